"""The operator's commands of the ``batchy`` command line: ``info``, ``jobs`` and ``dead``.

::

    batchy info app.jobs:queue
    batchy jobs list app.jobs:queue --state retrying --queue default
    batchy jobs show app.jobs:queue 3f2a...
    batchy jobs delete|run-now|cancel app.jobs:queue ID...
    batchy dead list|show app.jobs:queue [ID]
    batchy dead retry|delete app.jobs:queue ID... | --all | --queue Q | --job NAME

Each prints first the store it talks to (kind and location, never a password)
and says so when a list is empty; an unknown id or a job in the wrong state is a
:class:`~batchy.jobs.JobError` (the command exits 2 with its message). They are
built on :class:`batchy.jobs.Admin`, so a dashboard shows the same things.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ._admin import Admin
from ._cli_app import app_arguments, choose_app, hint
from ._errors import ConfigError, JobStateError
from ._output import OutputFailed, guarded_stdout, output_failed
from ._queue import Queue
from ._records import LIST_STATES, JobInfo, JobPage

# The entry point (batchy/__main__.py) takes the app and output helpers from here too.
__all__ = [
    "COMMANDS",
    "OutputFailed",
    "add_commands",
    "app_arguments",
    "choose_app",
    "guarded_stdout",
    "hint",
    "output_failed",
]


def add_commands(sub: Any) -> None:
    """Add ``info``, ``jobs`` and ``dead`` to the subparsers ``sub`` of ``batchy``."""
    info = sub.add_parser(
        "info", help="queues, dead jobs, live workers, busiest/stalled keys, sharded runs"
    )
    app_arguments(info)
    info.add_argument("--keys", type=int, default=10, help="ordering keys to show per list")
    info.add_argument(
        "--runs", type=int, default=5, help="latest runs to show per sharded job (default 5)"
    )

    jobs = sub.add_parser("jobs", help="list, show, delete, run now or cancel jobs")
    jobs.add_argument(
        "action", choices=["list", "show", "delete", "run-now", "cancel"],
        help="list jobs; show one; delete waiting ones; run scheduled or retrying ones now; "
        "cancel running ones (their handler gets CancelledError at its next await)",
    )  # fmt: skip
    app_arguments(jobs)
    jobs.add_argument(
        "ids", nargs="*", default=[], help="job ids (show: one; delete, run-now, cancel: any)"
    )
    jobs.add_argument(
        "--state", default="queued", choices=LIST_STATES,
        help="which jobs to list (default queued; blocked: waiting behind their ordering key)",
    )  # fmt: skip
    _filters(jobs, "list only jobs", key=True)

    dead = sub.add_parser("dead", help="list, show, retry or delete dead jobs")
    dead.add_argument(
        "action", choices=["list", "show", "retry", "delete"],
        help="list dead jobs; show one with its traceback; retry or delete some or all",
    )  # fmt: skip
    app_arguments(dead)
    dead.add_argument("ids", nargs="*", default=[], help="dead job ids (show: one)")
    dead.add_argument("--all", action="store_true", help="retry or delete every dead job")
    _filters(dead, "only dead jobs", key=False)


def _filters(parser: argparse.ArgumentParser, what: str, *, key: bool) -> None:
    parser.add_argument("--queue", help=f"{what} of this queue")
    parser.add_argument("--job", help=f"{what} of this job type (its name, see `batchy info`)")
    if key:
        parser.add_argument("--key", help=f"{what} of this ordering key (as stored: group:value)")
    parser.add_argument("--limit", type=int, default=50, help="jobs per page (default 50)")
    parser.add_argument("--after", help="the cursor a previous page printed: its next page")


async def info(queue: Queue, args: argparse.Namespace) -> int:
    admin = queue.admin
    _store(admin)
    now = time.time()
    found = await admin.info()
    busiest, stalled = await admin.keys(args.keys)
    print(
        f"{'queue':<20} {'size':>8} {'latency':>9} {'running':>8} {'scheduled':>10} {'retrying':>9}"
    )
    for q in found.queues:
        print(
            f"{q.name:<20} {q.size:>8} {q.latency:>8.1f}s {q.running:>8} {q.scheduled:>10} "
            f"{q.retrying:>9}"
        )
    if not found.queues:
        print("no queues yet: nothing was ever enqueued in this store")
    print(f"dead: {found.dead}")
    print(f"workers: {len(found.workers)}")
    for w in found.workers:
        print(
            f"  {w.id}  queues={','.join(w.queues)}  busy={len(w.running)}/{w.concurrency}  "
            f"up={now - w.started_at:.0f}s  jobs={' '.join(w.running[:10])}"
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
    periodics = admin.periodics()
    if periodics:
        print("periodic jobs:")
        for p in periodics:
            print(f"  {p.name}  queue={p.queue}  {p.schedule}  next {_at(p.next_run, now)}")
    for name, sharded in sorted(queue.sharded_jobs.items()):
        runs = await admin.runs(sharded, limit=args.runs)
        print(f"sharded job {name} ({sharded.shards} shards):" + ("" if runs else " no runs"))
        for r in runs:
            failing = f", {r.failed} failing" if r.failed else ""
            print(
                f"  run {r.run}  started {_at(r.started, now)}  "
                f"{r.done}/{len(r.shards)} shards done{failing}"
            )
    return 0


async def jobs(queue: Queue, args: argparse.Namespace) -> int:
    admin = queue.admin
    _store(admin)
    if args.action == "list":
        return await _list(admin, args, args.state)
    if args.action == "show":
        _show(await admin.job(_one(args)))
        return 0
    ids = _ids(args)
    if args.action == "delete":
        print(f"deleted {await admin.delete(ids)} job(s)")
    elif args.action == "run-now":
        print(f"{await admin.run_now(ids)} job(s) due now")
    else:
        count = await admin.cancel(ids)
        print(
            f"asked the workers running them to cancel {count} job(s): each stops at its "
            "handler's next await, goes to the dead set as cancelled, and is not retried"
        )
    return 0


async def dead(queue: Queue, args: argparse.Namespace) -> int:
    admin = queue.admin
    _store(admin)
    if args.action == "list":
        return await _list(admin, args, "dead")
    if args.action == "show":
        job = await admin.job(_one(args))
        if job.state not in ("dead", "cancelled"):
            # Its id may be a live job's again (enqueued anew) with the dead entry kept.
            entry = await _dead_entry(admin, job.id)
            if entry is None:
                raise JobStateError(
                    f"job {job.id} is {job.state}, not dead, on {admin.store}; see it with "
                    f"`batchy jobs show {job.id}`"
                )
            print(
                f"job {job.id} was enqueued again and is {job.state} (`batchy jobs show "
                f"{job.id}`); its dead entry:",
                file=sys.stderr,
            )
            job = entry
        _show(job)
        return 0
    chosen = [args.ids, args.all, args.queue or args.job]
    if sum(map(bool, chosen)) != 1:
        raise ConfigError(
            f"`batchy dead {args.action}` needs job ids, or --all, or --queue/--job (one of "
            "them); see `batchy dead list`"
        )
    ids = args.ids or None
    if args.action == "retry":
        moved = await admin.retry_dead(ids, queue=args.queue, job=args.job)
        left = [] if ids else await _live_again(admin, args)
        # Such an entry stays dead by design (its retry would replace the live job):
        # without a word, "retried 0 dead job(s)" beside a dead list looked like a failure.
        why = (
            f"; {len(left)} left dead, each id a live job's again (enqueued anew), which a "
            f"retry would replace: {' '.join(left[:5])}{' ...' if len(left) > 5 else ''} "
            "(`batchy dead show ID` shows the entry, `batchy dead delete ID` drops it)"
        )
        print(f"retried {moved} dead job(s)" + (why if left else ""))
    else:
        gone = await admin.delete_dead(ids, queue=args.queue, job=args.job)
        print(f"deleted {gone} dead job(s)")
    return 0


COMMANDS: dict[str, Callable[[Queue, argparse.Namespace], Awaitable[int]]] = {
    "info": info,
    "jobs": jobs,
    "dead": dead,
}


def _store(admin: Admin) -> None:
    print(f"store: {admin.store}")


def _one(args: argparse.Namespace) -> str:
    if len(args.ids) != 1:
        raise ConfigError(
            f"`batchy {args.command} show` takes one job id, got {len(args.ids)}; e.g. "
            f"`batchy {args.command} show {args.app or 'app:queue'} 3f2a...` (ids are in "
            f"`batchy {args.command} list`)"
        )
    return str(args.ids[0])


def _ids(args: argparse.Namespace) -> list[str]:
    if not args.ids:
        raise ConfigError(
            f"`batchy jobs {args.action}` needs job ids; find them with `batchy jobs list "
            "--state STATE`"
        )
    return list(args.ids)


async def _list(admin: Admin, args: argparse.Namespace, state: str) -> int:
    if args.ids:
        # A mistyped app (no ':') is read as an id: say what an app looks like.
        raise ConfigError(
            f"`batchy {args.command} list` takes no job ids, got {' '.join(args.ids)!r}; "
            "narrow it with --queue or --job, and name the app as module:attribute "
            "(e.g. myapp.jobs:queue), with --app, or in BATCHY_APP"
        )
    page: JobPage = await admin.jobs(
        state, queue=args.queue, job=args.job, key=getattr(args, "key", None),
        after=args.after, limit=args.limit,
    )  # fmt: skip
    key = getattr(args, "key", None)
    labels = (("in queue", args.queue), ("of job type", args.job), ("of key", key))
    where = "".join(f" {label} {value!r}" for label, value in labels if value is not None)
    now = time.time()
    if not page.jobs:
        more = " on this page" if page.next else ""
        print(f"no {state} jobs{where}{more}")
    else:
        print(f"{state} jobs{where}:")
        for job in page.jobs:
            print(_line(job, now))
    if page.next:
        command = "dead list" if args.command == "dead" else f"jobs list --state {state}"
        print(f"next page: batchy {command} {args.app or ''} ... --after {page.next}")
    return 0


def _line(job: JobInfo, now: float) -> str:
    """One job in a list: id, state, queue, type, failed attempts, when, and a note."""
    when, note = "", job.error or ""
    if job.state in ("scheduled", "retrying") and job.next_run is not None:
        when = f"in {job.next_run - now:.1f}s"
    elif job.state == "running":
        when = f"on {job.worker}"
    elif job.state in ("dead", "cancelled") and job.died_at is not None:
        when = _clock(job.died_at)
    elif job.state == "done":
        when, note = f"kept {job.expires - now:.0f}s" if job.expires else "", _short(job.result)
    elif job.enqueued_at is not None:
        when = f"{now - job.enqueued_at:.1f}s old"
    kind, key = job.job or "?", f" key={job.key}" if job.key else ""
    head = f"{job.id}  {job.state:<9} {job.queue:<12} {kind:<24} {job.attempts:>3}"
    return f"{head}  {when}{key}  {note}".rstrip()


async def _live_again(admin: Admin, args: argparse.Namespace) -> list[str]:
    """The ids of the dead entries (of ``args``' filters) whose id is a live job's again."""
    found: list[str] = []
    after: str | None = None
    while True:  # after a retry, the dead set holds only those and jobs dead since
        page = await admin.jobs("dead", queue=args.queue, job=args.job, after=after, limit=500)
        for entry in page.jobs:
            if (await admin.job(entry.id)).state not in ("dead", "cancelled"):
                found.append(entry.id)
        after = page.next
        if after is None:
            return found


async def _dead_entry(admin: Admin, job_id: str) -> JobInfo | None:
    """The dead set's entry of ``job_id``, read page by page (the dead set is capped)."""
    after: str | None = None
    while True:
        page = await admin.jobs("dead", after=after, limit=500)
        for job in page.jobs:
            if job.id == job_id:
                return job
        after = page.next
        if after is None:
            return None


def _show(job: JobInfo) -> None:
    now = time.time()
    rows: list[tuple[str, Any]] = [
        ("id", job.id), ("state", job.state), ("queue", job.queue), ("job", job.job or "?"),
        ("args", json.dumps(job.args)), ("kwargs", json.dumps(job.kwargs)), ("key", job.key),
        ("enqueued", job.enqueued_at and _at(job.enqueued_at, now)),
        ("attempts", f"{job.attempts} failed" if job.state != "done" else None),
        ("next run", job.next_run and _at(job.next_run, now)),
        ("worker", job.worker and f"{job.worker} (lease until {_at(job.lease_until or 0, now)})"),
        ("died", job.died_at and _at(job.died_at, now)),
        ("error", job.error), ("result", job.state == "done" and _short(job.result, 2000)),
        ("kept until", job.expires and _at(job.expires, now)),
    ]  # fmt: skip
    for label, value in rows:
        if value not in (None, False, ""):
            print(f"{label + ':':<11} {value}")
    if job.job is None and job.payload:
        print(f"{'payload:':<11} {job.payload[:2000]}")
    if job.traceback:
        print("traceback:")
        for line in job.traceback.rstrip().splitlines():
            print(f"  {line}")


def _clock(when: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(when)) + "Z"


def _at(when: float, now: float) -> str:
    """``2026-01-02 10:00:00Z (in 3.0s)`` or ``(... ago)``."""
    delta = when - now
    rel = f"in {delta:.1f}s" if delta >= 0 else f"{-delta:.1f}s ago"
    return f"{_clock(when)} ({rel})"


def _short(value: Any, width: int = 60) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= width else text[: width - 3] + "..."
