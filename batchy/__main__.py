"""The ``batchy`` command: run job workers and operate queues (info, dead jobs, enqueue).

::

    batchy worker app.jobs:queue --concurrency 100 -q critical,2 -q default
    batchy info app.jobs:queue
    batchy dead list app.jobs:queue
    batchy dead retry app.jobs:queue ID... | --all
    batchy enqueue app.jobs:queue app.jobs.send_welcome 42 '"hello"'
    batchy dashboard app.jobs:queue --port 8000      # pip install 'batchy[dashboard]'
    batchy migrate app.jobs:queue                    # a deploy step: the store's schema

``APP`` is ``module:attribute`` naming a :class:`batchy.jobs.Queue` (the
current directory is importable); every command also takes it as ``--app APP``
or from ``$BATCHY_APP``. The first word after ``jobs ACTION``, ``dead ACTION``
or ``enqueue`` is the app only when it has that form: ``BATCHY_APP=app.jobs:queue
batchy jobs delete ID1 ID2`` deletes two jobs (the rule is in ``batchy/jobs/_cli_app.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import logging
import math
import os
import re
import sys
import traceback
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import TypeVar

from batchy import UsageError
from batchy.jobs import ConfigError, JobError, Queue, Worker
from batchy.jobs.cli import (
    COMMANDS,
    OutputFailed,
    add_commands,
    app_arguments,
    choose_app,
    guarded_stdout,
    hint,
    output_failed,
)

T = TypeVar("T")

__all__ = ["load_app", "main"]


def load_app(spec: str | None) -> Queue:
    """Import ``module:attribute`` and return the :class:`Queue` it names."""
    spec = spec or os.environ.get("BATCHY_APP")
    if not spec:
        raise ConfigError(
            "no app given: name the batchy.jobs.Queue as 'module:attribute', "
            "e.g. `batchy worker myapp.jobs:queue`, or set BATCHY_APP=myapp.jobs:queue"
        )
    if ":" not in spec:
        raise ConfigError(
            f"app {spec!r} is not 'module:attribute' naming a batchy.jobs.Queue; "
            "e.g. `batchy worker myapp.jobs:queue` (or set BATCHY_APP)"
        )
    module_name, attr = spec.split(":", 1)
    if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
        # A file path is the first guess of many (uvicorn and Celery take modules too).
        path = module_name.removesuffix(".py").replace(os.sep, "/").strip("./")
        dotted = path.replace("/", ".")
        raise ConfigError(
            f"app {spec!r}: {module_name!r} is a file path; name the module as Python "
            f"imports it, from the directory that contains it: {dotted}:{attr}"
        )
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
    queue = getattr(module, attr, _MISSING)
    if not isinstance(queue, Queue):
        found = sorted(name for name, v in vars(module).items() if isinstance(v, Queue))
        where = (
            f"it holds: {', '.join(f'{module_name}:{name}' for name in found)}"
            if found
            else "it holds none; point at the module that declares the Queue"
        )
        what = (
            f"module {module_name!r} has no attribute {attr!r}"
            if queue is _MISSING
            else f"{module_name}.{attr} is {queue!r}, not a batchy.jobs.Queue"
        )
        raise ConfigError(
            f"app {spec!r}: {what}; point at the Queue object your jobs are declared on ({where})"
        )
    return queue


_MISSING = object()


def _import_failed(spec: str, module_name: str, error: Exception) -> ConfigError:
    if isinstance(error, JobError):
        # batchy's own error (a store that cannot open its file, say) names the
        # problem and its fix; where in batchy it was raised is no help.
        return ConfigError(f"app {spec!r}: importing module {module_name!r} failed: {error}")
    if isinstance(error, SyntaxError):
        where = f"{error.filename}:{error.lineno}"
    else:
        frames = traceback.extract_tb(error.__traceback__)
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    return ConfigError(
        f"app {spec!r}: importing module {module_name!r} failed with "
        f"{type(error).__name__}: {error} (at {where}); fix that code, then start again"
    )


_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _seconds(text: str) -> float:
    """A finite number of seconds > 0 (argparse names the option in its message)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a finite number of seconds > 0; e.g. --lease 30"
        )
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="batchy", description="batchy background jobs")
    sub = parser.add_subparsers(dest="command", required=True)

    worker = sub.add_parser("worker", help="run a worker")
    app_arguments(worker)
    worker.add_argument(
        "-c", "--concurrency", type=int, default=10,
        help="jobs run at once in this process, their loads batched together (default 10)",
    )  # fmt: skip
    worker.add_argument(
        "--prefetch", type=int, default=0,
        help="jobs claimed ahead of a free slot, for short jobs (default 0: only for free slots)",
    )  # fmt: skip
    worker.add_argument(
        "-q", "--queue", action="append", dest="queues", metavar="NAME[,WEIGHT]",
        help="queue to fetch from; repeat; weights make it weighted, none strict",
    )  # fmt: skip
    worker.add_argument(
        "--shutdown-timeout", type=float, default=25.0,
        help="seconds SIGTERM waits for running jobs before handing them back (default 25)",
    )  # fmt: skip
    worker.add_argument(
        "--lease", type=_seconds, default=30.0,
        help="seconds a claimed job stays this worker's without a heartbeat (default 30)",
    )  # fmt: skip
    worker.add_argument(
        "--heartbeat", type=float, default=None,
        help="seconds between lease renewals (default: a third of --lease)",
    )  # fmt: skip
    worker.add_argument(
        "--poll-interval", type=float, default=0.5,
        help="longest an idle worker waits without a wake-up, in seconds (default 0.5)",
    )  # fmt: skip
    worker.add_argument("--burst", action="store_true", help="exit when no job is ready")
    worker.add_argument(
        "--log-level", default="INFO", type=str.upper, choices=_LEVELS, metavar="LEVEL",
        help=f"{', '.join(_LEVELS[:-1])} or {_LEVELS[-1]} (default INFO; any case)",
    )  # fmt: skip

    add_commands(sub)  # info, jobs, dead

    board = sub.add_parser(
        "dashboard", help="serve the web dashboard (needs: pip install 'batchy[dashboard]')"
    )
    app_arguments(board)
    board.add_argument("--host", default="127.0.0.1", help="interface (default: this machine only)")
    board.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    board.add_argument("--read-only", action="store_true", help="show everything, change nothing")
    board.add_argument(
        "--auth", metavar="MODULE:CALLABLE",
        help="called with each request; returns whether it may proceed (see the Operations guide)",
    )  # fmt: skip
    board.add_argument("--root-path", default="", help="URL prefix when proxied under a path")
    board.add_argument(
        "--allowed-host", action="append", default=[], metavar="NAME",
        help="a host name the dashboard answers to (repeat it; *.example.com for subdomains); "
        "default on a loopback --host without --auth: this machine's names only",
    )  # fmt: skip

    migrate = sub.add_parser(
        "migrate", help="create the store's schema or bring it to this release's (PostgreSQL)"
    )
    app_arguments(migrate)

    enqueue = sub.add_parser(
        "enqueue", help="enqueue one job (arguments as JSON)",
        usage="batchy enqueue [-h] [--app APP] [options] [APP] JOB [ARG ...]",
    )  # fmt: skip
    # The app is a word of its own form (module:attribute) or --app or $BATCHY_APP
    # (see choose_app), so the parser takes words and requires only the job's.
    enqueue.add_argument(
        "job", metavar="[APP] JOB", help="module:attribute naming the Queue (default --app or "
        "$BATCHY_APP), then the job type's name",
    )  # fmt: skip
    enqueue.add_argument(
        "args", nargs="*", default=[], help="positional arguments, each a JSON value"
    )
    app_arguments(enqueue, positional=False)
    enqueue.add_argument("--kwargs", default="{}", help="keyword arguments as a JSON object")
    enqueue.add_argument("--delay", type=float, default=None, help="seconds from now to run it")
    enqueue.add_argument("--queue", default=None, help="queue (default: the job type's)")
    enqueue.add_argument("--key", default=None, help="ordering key (runs after its key's jobs)")
    return parser


@contextlib.asynccontextmanager
async def _opened(args: argparse.Namespace) -> AsyncIterator[Queue]:
    """The app's queue, its store closed however the command ends (a refused argument too)."""
    try:
        queue = load_app(args.app)
    except ConfigError as error:
        raise hint(args, error) from error
    try:
        yield queue
    finally:
        await queue.close()


async def _worker(args: argparse.Namespace) -> int:
    async with _opened(args) as queue:
        queue.check_runnable(f"app {args.app!r}")
        worker = Worker(
            queue,
            queues=args.queues,
            concurrency=args.concurrency,
            lease=args.lease,
            heartbeat=args.heartbeat,
            poll_interval=args.poll_interval,
            shutdown_timeout=args.shutdown_timeout,
            burst=args.burst,
            prefetch=args.prefetch,
        )
        names = ", ".join(f"{n},{w}" if w else n for n, w in worker.queue_specs)
        logging.getLogger("batchy.jobs").info(
            "worker %s: queues %s, concurrency %d, store %s",
            worker.id, names, worker.concurrency, queue.admin.store,
        )  # fmt: skip
        await worker.run(signals=True)
    return 0


async def _operate(args: argparse.Namespace) -> int:
    async with _opened(args) as queue:
        return await _reaching(queue, COMMANDS[args.command](queue, args))


#: Seconds a command waits for the store: a server that accepts connections and
#: never answers (a wrong port behind a proxy, a stopped process) hung it for good.
ANSWER_WITHIN = 60.0


async def _reaching(queue: Queue, command: Awaitable[T], within: float | None = ANSWER_WITHIN) -> T:
    """``command``, with a store it cannot reach said in one line (ConfigError), not a traceback."""
    try:
        async with asyncio.timeout(within):
            return await command
    except TimeoutError as error:
        raise ConfigError(
            f"{queue.admin.store} did not answer within {ANSWER_WITHIN:g} s; check that the "
            "server is up and answering, and that the app's address (DSN or URL) points at it"
        ) from error
    except Exception as error:
        if not queue.backend.unreachable(error):
            raise
        said = " ".join(str(error).split()).rstrip(".")  # libpq's messages span lines
        if said.startswith(f"cannot reach {queue.admin.store}: "):
            raise ConfigError(said) from error  # the store's own line: where, why, what to do
        raise ConfigError(
            f"cannot reach {queue.admin.store}: {type(error).__name__}: {said}; check that "
            "the server is up and that the app's address (DSN or URL) points at it"
        ) from error


async def _enqueue(args: argparse.Namespace) -> int:
    async with _opened(args) as queue:
        job = queue.jobs.get(args.job)
        if job is None:
            raise ConfigError(
                f"job type {args.job!r} is not declared on {args.app}; it declares: "
                f"{', '.join(sorted(queue.jobs)) or 'none'}"
            )
        values = [_json(args.job, f"argument {n}", text) for n, text in enumerate(args.args, 1)]
        kwargs = _json(args.job, "--kwargs", args.kwargs)
        if not isinstance(kwargs, dict):
            raise ConfigError(
                f"job {args.job!r}: --kwargs {args.kwargs!r} is not a JSON object; pass the "
                "keyword arguments by name, e.g. --kwargs '{\"user_id\": 42}'"
            )
        options = job.options(delay=args.delay, queue=args.queue, key=args.key)
        handle = await _reaching(queue, options.enqueue(*values, **kwargs))
    print(f"store: {queue.admin.store}", file=sys.stderr)  # stdout: the id, for scripts
    print(handle.id)
    return 0


async def _migrate(args: argparse.Namespace) -> int:
    """The store's ``migrate()``, where it has one: a deploy step before the new workers start."""
    async with _opened(args) as queue:
        print(f"store: {queue.admin.store}")
        migrate = getattr(queue.backend, "migrate", None)
        if migrate is None:
            print("nothing to migrate: this store makes (and updates) what it keeps as it opens")
            return 0
        # No time limit of its own: the migration bounds its waits for locks (and
        # says who held them), and an index it builds takes what it takes.
        said = await _reaching(queue, migrate(), within=None)
        print(said if isinstance(said, str) else "migrated")
    return 0


def _json(job: str, which: str, text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(
            f"job {job!r}: {which}, {text!r}, is not JSON ({error}); quote a string as JSON, "
            f"e.g. {json.dumps(text)!r}"
        ) from error


async def _dashboard(args: argparse.Namespace) -> int:
    try:  # batchy itself needs only the standard library: the dashboard is an extra
        from batchy_contrib.dashboard.serve import load_auth, serve
    except ImportError as error:
        if isinstance(error, UsageError):  # batchy_contrib's own, naming the extra already
            raise ConfigError(f"`batchy dashboard`: {error}") from error
        raise ConfigError(
            f"`batchy dashboard` needs the dashboard's packages ({error}); install them "
            "with: pip install 'batchy[dashboard]'"
        ) from error
    async with _opened(args) as queue:
        auth = load_auth(args.auth) if args.auth else None
        await serve(
            queue, host=args.host, port=args.port, read_only=args.read_only, auth=auth,
            root_path=args.root_path, allowed_hosts=args.allowed_host,
        )  # fmt: skip
    return 0


_COMMANDS = {
    "worker": _worker,
    "info": _operate,
    "jobs": _operate,
    "dead": _operate,
    "enqueue": _enqueue,
    "dashboard": _dashboard,
    "migrate": _migrate,
}


#: The commands whose last positional takes any number of words, and its name.
_WORDS = {"jobs": "ids", "dead": "ids", "enqueue": "args"}


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``argv`` parsed, with the words after an option (``jobs delete --app A ID``) kept.

    argparse fills the optional positionals (the app, the ids) with nothing at the first
    option, and calls the words after it unrecognized: they are the ids (or arguments).
    """
    args, extra = parser.parse_known_args(argv)
    dest = _WORDS.get(args.command)
    options = [w for w in extra if w.startswith("-") and not _NUMBER.fullmatch(w)]
    if extra and (dest is None or options):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        setattr(args, str(dest), [*getattr(args, str(dest)), *extra])
    return args


_NUMBER = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?|-\.\d+([eE][-+]?\d+)?")


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``batchy`` script."""
    args = _parse(_parser(), argv)
    if args.command == "worker":
        logging.basicConfig(
            level=args.log_level,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        )
    try:
        choose_app(args)
        with guarded_stdout():
            code = asyncio.run(_COMMANDS[args.command](args))
    except OutputFailed as failed:  # `| head` closed the pipe, say: no store's failure
        code = output_failed(failed)
    except JobError as error:  # a bad option, app, argument or delay: no traceback
        print(f"batchy: error: {error}", file=sys.stderr)
        code = 2
    except (asyncio.CancelledError, KeyboardInterrupt):
        # Stopped at once: a worker by a second SIGINT, any other command by the first
        # (Ctrl-C on a listing, or on a store that does not answer). The shell has
        # shown ^C; a traceback of where the loop was says nothing more.
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
