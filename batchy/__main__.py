"""The ``batchy`` command: run job workers and operate queues (info, dead jobs, enqueue).

::

    batchy worker app.jobs:queue --concurrency 100 -q critical,2 -q default
    batchy info app.jobs:queue
    batchy dead list app.jobs:queue
    batchy dead retry app.jobs:queue ID... | --all
    batchy enqueue app.jobs:queue app.jobs.send_welcome 42 '"hello"'

``APP`` is ``module:attribute`` naming a :class:`batchy.jobs.Queue` (the
current directory is importable); it may also come from ``$BATCHY_APP``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Sequence

from batchy.jobs import ConfigError, JobError, Queue, Worker

__all__ = ["load_app", "main"]


def load_app(spec: str | None) -> Queue:
    """Import ``module:attribute`` and return the :class:`Queue` it names."""
    spec = spec or os.environ.get("BATCHY_APP")
    if not spec or ":" not in spec:
        raise ConfigError(
            f"app {spec!r} is not 'module:attribute' naming a batchy.jobs.Queue; "
            "e.g. `batchy worker myapp.jobs:queue` (or set BATCHY_APP)"
        )
    module_name, attr = spec.split(":", 1)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is None or not f"{module_name}.".startswith(f"{error.name}."):
            raise _import_failed(spec, module_name, error) from error
        raise ConfigError(
            f"app {spec!r}: cannot import module {module_name!r} ({error}); run from the "
            "directory that contains it, or fix PYTHONPATH"
        ) from error
    except Exception as error:  # the app's own code failed: say where, in one line
        raise _import_failed(spec, module_name, error) from error
    queue = getattr(module, attr, None)
    if not isinstance(queue, Queue):
        raise ConfigError(
            f"app {spec!r}: {module_name}.{attr} is {queue!r}, not a batchy.jobs.Queue; "
            "point at the Queue object your jobs are declared on"
        )
    return queue


def _import_failed(spec: str, module_name: str, error: Exception) -> ConfigError:
    if isinstance(error, SyntaxError):
        where = f"{error.filename}:{error.lineno}"
    else:
        frames = traceback.extract_tb(error.__traceback__)
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    return ConfigError(
        f"app {spec!r}: importing module {module_name!r} failed with "
        f"{type(error).__name__}: {error} (at {where}); fix that code, then start again"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="batchy", description="batchy background jobs")
    sub = parser.add_subparsers(dest="command", required=True)

    worker = sub.add_parser("worker", help="run a worker")
    worker.add_argument("app", nargs="?", help="module:queue (default $BATCHY_APP)")
    worker.add_argument("-c", "--concurrency", type=int, default=10)
    worker.add_argument(
        "-q", "--queue", action="append", dest="queues", metavar="NAME[,WEIGHT]",
        help="queue to fetch from; repeat; weights make it weighted, none strict",
    )  # fmt: skip
    worker.add_argument("--shutdown-timeout", type=float, default=25.0)
    worker.add_argument("--lease", type=float, default=30.0)
    worker.add_argument("--heartbeat", type=float, default=None)
    worker.add_argument("--poll-interval", type=float, default=0.5)
    worker.add_argument("--burst", action="store_true", help="exit when no job is ready")
    worker.add_argument("--log-level", default="INFO")

    info = sub.add_parser("info", help="queues, dead jobs, live workers, busiest/stalled keys")
    info.add_argument("app", nargs="?")
    info.add_argument("--keys", type=int, default=10, help="ordering keys to show per list")

    dead = sub.add_parser("dead", help="list, retry or delete dead jobs")
    dead.add_argument("action", choices=["list", "retry", "delete"])
    dead.add_argument("app", nargs="?")
    dead.add_argument("ids", nargs="*")
    dead.add_argument("--all", action="store_true", help="every dead job")
    dead.add_argument("--limit", type=int, default=50)

    enqueue = sub.add_parser("enqueue", help="enqueue one job (arguments as JSON)")
    enqueue.add_argument("app")
    enqueue.add_argument("job", help="the job type's name (see `batchy info`)")
    enqueue.add_argument("args", nargs="*", help="positional arguments, each a JSON value")
    enqueue.add_argument("--kwargs", default="{}", help="keyword arguments as a JSON object")
    enqueue.add_argument("--delay", type=float, default=None)
    enqueue.add_argument("--queue", default=None)
    enqueue.add_argument("--key", default=None, help="ordering key (runs after its key's jobs)")
    return parser


async def _worker(args: argparse.Namespace) -> int:
    queue = load_app(args.app)
    worker = Worker(
        queue,
        queues=args.queues,
        concurrency=args.concurrency,
        lease=args.lease,
        heartbeat=args.heartbeat,
        poll_interval=args.poll_interval,
        shutdown_timeout=args.shutdown_timeout,
        burst=args.burst,
    )
    names = ", ".join(f"{n},{w}" if w else n for n, w in worker.queue_specs)
    logging.getLogger("batchy.jobs").info(
        "worker %s: queues %s, concurrency %d, store %r",
        worker.id, names, worker.concurrency, queue.backend,
    )  # fmt: skip
    try:
        await worker.run(signals=True)
    finally:
        await queue.close()
    return 0


async def _info(args: argparse.Namespace) -> int:
    queue = load_app(args.app)
    try:
        info = await queue.info()
        now = time.time()
        busiest, stalled = await queue.backend.keys(now, args.keys)
    finally:
        await queue.close()
    print(
        f"{'queue':<20} {'size':>8} {'latency':>9} {'running':>8} {'scheduled':>10} {'retrying':>9}"
    )
    for q in info.queues:
        print(
            f"{q.name:<20} {q.size:>8} {q.latency:>8.1f}s {q.running:>8} {q.scheduled:>10} "
            f"{q.retrying:>9}"
        )
    print(f"dead: {info.dead}")
    print(f"workers: {len(info.workers)}")
    for w in info.workers:
        up = time.time() - w.started_at
        print(
            f"  {w.id}  queues={','.join(w.queues)}  busy={len(w.running)}/{w.concurrency}  "
            f"up={up:.0f}s  jobs={' '.join(w.running[:10])}"
        )
    for title, keys in (("busiest keys", busiest), ("stalled keys", stalled)):
        if not keys:
            continue
        print(f"{title}:")
        for k in keys:
            when = ""
            if k.state in ("retrying", "scheduled"):
                when = f" (due in {k.since - now:.1f}s)"
            elif k.state in ("expired", "queued"):
                when = f" (for {now - k.since:.1f}s)"
            print(f"  {k.key}  jobs={k.jobs}  queue={k.queue}  head={k.head} {k.state}{when}")
    return 0


async def _dead(args: argparse.Namespace) -> int:
    queue = load_app(args.app)
    try:
        if args.action == "list":
            for d in await queue.dead_jobs(args.limit):
                when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(d.died_at))
                key = f"  key={d.key}" if d.key is not None else ""
                print(f"{d.id}  {d.queue}  {when}Z{key}  {d.reason}")
            return 0
        if not args.ids and not args.all:
            raise ConfigError(
                f"`batchy dead {args.action}` needs job ids or --all; see `batchy dead list`"
            )
        ids = None if args.all else args.ids
        if args.action == "retry":
            print(f"retried {await queue.retry_dead(ids)} dead job(s)")
        else:
            print(f"deleted {await queue.delete_dead(ids)} dead job(s)")
        return 0
    finally:
        await queue.close()


async def _enqueue(args: argparse.Namespace) -> int:
    queue = load_app(args.app)
    job = queue.jobs.get(args.job)
    if job is None:
        raise ConfigError(
            f"job type {args.job!r} is not declared on {args.app}; it declares: "
            f"{', '.join(sorted(queue.jobs)) or 'none'}"
        )
    try:
        values = [json.loads(a) for a in args.args]
        kwargs = json.loads(args.kwargs)
    except json.JSONDecodeError as error:
        raise ConfigError(
            f"job {args.job!r}: argument is not JSON ({error}); quote strings as JSON, "
            "e.g. '\"hello\"'"
        ) from error
    try:
        options = job.options(delay=args.delay, queue=args.queue, key=args.key)
        handle = await options.enqueue(*values, **kwargs)
    finally:
        await queue.close()
    print(handle.id)
    return 0


_COMMANDS = {"worker": _worker, "info": _info, "dead": _dead, "enqueue": _enqueue}


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``batchy`` script."""
    args = _parser().parse_args(argv)
    if args.command == "worker":
        logging.basicConfig(
            level=args.log_level.upper(),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    try:
        code = asyncio.run(_COMMANDS[args.command](args))
    except JobError as error:  # a bad option, app, argument or delay: no traceback
        print(f"batchy: error: {error}", file=sys.stderr)
        code = 2
    except asyncio.CancelledError:
        code = 130  # stopped at once by a second SIGINT
    sys.exit(code)


if __name__ == "__main__":
    main()
