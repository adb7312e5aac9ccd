"""The records an operator reads: one stored job, its details, a page of jobs, shards, periodics.

A store hands :class:`StoredJob` records up (its payload still encoded, times on
the caller's clock); :class:`batchy.jobs.Admin` decodes them into
:class:`JobInfo`. Pages are cut by *cursors*: opaque strings a store makes from
the sort key of the last job of a page (keyset pagination), so the next page
starts with an index seek wherever the list is, never by skipping rows.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ._errors import ConfigError
from ._model import WorkerInfo

__all__ = [
    "ACTIONS",
    "LIST_STATES",
    "JobInfo",
    "JobPage",
    "PeriodicInfo",
    "RunInfo",
    "ShardInfo",
    "StoredJob",
    "cut_page",
    "decode_cursor",
    "encode_cursor",
    "merge_pages",
    "narrowed_by",
    "refusals",
    "with_running",
]

#: The states jobs can be listed by. ``blocked``: waiting behind the head of its
#: ordering key (``Handle.status()`` says ``queued`` or ``scheduled`` for it).
LIST_STATES = ("queued", "scheduled", "retrying", "running", "blocked", "dead", "done")

#: The operator's actions a store's ``act`` knows, and the states each applies to.
ACTIONS: Mapping[str, tuple[str, ...]] = {
    "delete": ("queued", "scheduled", "retrying", "blocked"),
    "run_now": ("scheduled", "retrying"),
    "cancel": ("running",),
    "retry_dead": ("dead",),
    "delete_dead": ("dead",),
}


def refusals(
    found: Mapping[str, str],
    action: str,
    ids: Sequence[str],
    dead: Collection[str] = (),
    done: Collection[str] = (),
) -> dict[str, str]:
    """For a store's ``act``: each id whose state ``action`` does not apply to.

    ``found`` gives the live jobs' states by id, ``dead`` the ids in the dead set, ``done``
    those with a kept result (``done`` unless live or dead). An id can be both (a dead
    job's id enqueued anew): the dead set's actions mean its dead entry, so
    ``delete_dead`` takes it, while ``retry_dead`` is refused as ``"dead and <state>"``
    (the retried job would replace the live one); the other actions mean the live job.
    """
    allowed = ACTIONS[action]
    refused = {}
    for i in ids:
        state = found.get(i)
        if i in dead and (state is None or action == "delete_dead"):
            state = "dead"
        elif i in dead and action == "retry_dead":
            state = f"dead and {state}"
        elif state is None and i in done:
            state = "done"
        if state not in allowed:
            refused[i] = state or "unknown"
    return refused


@dataclass(frozen=True, slots=True)
class StoredJob:
    """One job as a store holds it (:meth:`Backend.list_jobs`, :meth:`Backend.job`).

    ``state`` is one of :data:`LIST_STATES`. Times are Unix times on the caller's
    clock: ``due`` when a waiting job is (or was) due, ``lease`` when a running
    job's lease runs out unless renewed, ``died_at`` when a dead job died,
    ``expires`` until when a done job's result is kept. ``worker`` is a running
    job's lease holder. ``payload`` is empty for done jobs (the store keeps only
    their result). ``after`` is, in a listing, the cursor of the page that starts
    just after this job; None where no page may end (a store that can resume only
    at some jobs: Redis's blocked jobs, among many keyed ones).
    """

    id: str
    queue: str
    state: str
    payload: str = ""
    key: str | None = None
    due: float = 0.0
    worker: str | None = None
    lease: float = 0.0
    reason: str = ""
    traceback: str = ""
    died_at: float = 0.0
    result: str | None = None
    expires: float = 0.0
    after: str | None = None


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A job's details as an operator sees them (``batchy jobs show``).

    ``state`` is one of :data:`LIST_STATES`, or ``cancelled`` for a dead job whose
    run an operator cancelled. ``job``, ``args`` and ``kwargs`` come from the
    payload (``job`` is None when it cannot be decoded, and for done jobs, whose
    payload is gone). ``attempts`` counts the attempts that ended in a failure so
    far (a running job runs attempt ``attempts + 1``); ``error`` and
    ``traceback`` are the last failure's. ``next_run`` is when a scheduled or
    retrying job is due, ``worker`` and ``lease_until`` a running job's lease
    holder and lease; ``result`` a done job's decoded result, kept until
    ``expires``. Times are Unix times.
    """

    id: str
    queue: str
    state: str
    job: str | None = None
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    attempts: int = 0
    enqueued_at: float | None = None
    key: str | None = None
    next_run: float | None = None
    worker: str | None = None
    lease_until: float | None = None
    error: str | None = None
    traceback: str | None = None
    died_at: float | None = None
    result: Any = None
    expires: float | None = None
    payload: str = ""


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of a job listing; pass ``next`` as ``after=`` for the next (None: the last)."""

    state: str
    jobs: tuple[JobInfo, ...]
    next: str | None = None


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """One shard of a sharded run: where it is and how far it got.

    ``state`` is the shard job's (``unknown`` if never started, or done and its
    result expired); ``cursor`` the last saved one (None before the first batch
    and once done); ``batches`` how many batches a finished shard ran.
    """

    shard: int
    state: str
    cursor: Any = None
    worker: str | None = None
    batches: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run of a sharded job: its name, when it was (last) started, and its shards."""

    job: str
    run: str
    started: float
    shards: tuple[ShardInfo, ...]

    @property
    def done(self) -> int:
        """How many shards have finished."""
        return sum(s.state == "done" for s in self.shards)

    @property
    def failed(self) -> int:
        """How many shards are dead, cancelled or waiting to retry."""
        return sum(s.state in ("dead", "cancelled", "retrying") for s in self.shards)


@dataclass(frozen=True, slots=True)
class PeriodicInfo:
    """A periodic job type: its name, queue, schedule and next tick (a Unix time)."""

    name: str
    queue: str
    schedule: str
    next_run: float


def encode_cursor(state: str, values: Sequence[Any]) -> str:
    """A page cursor of a ``state`` listing after ``values`` (JSON), safe on a command line."""
    raw = json.dumps([state, *values], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, state: str, size: int, store: object) -> list[Any]:
    """The ``size`` values in ``cursor``; :class:`ConfigError` if ``store`` did not make it."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        values = json.loads(raw)
    except (ValueError, TypeError):
        values = None
    if not isinstance(values, list) or len(values) != size + 1 or values[0] != state:
        raise ConfigError(
            f"page cursor {cursor!r} was not made by {store!r} for a listing of {state} "
            "jobs; pass the `next` cursor of the previous page of the same listing, or "
            "none for the first page"
        )
    return values[1:]


#: A job a store read, with its sort key in the listing (the cursor's values).
Keyed = tuple[StoredJob, list[Any]]


def narrowed_by(queue: str | None, key: str | None) -> Callable[[StoredJob], bool]:
    """For a listing the store filters as it reads: is a job of ``queue`` and ``key``
    (None: any)?"""

    def wanted(job: StoredJob) -> bool:
        return (queue is None or job.queue == queue) and (key is None or job.key == key)

    return wanted


def cut_page(
    found: Sequence[Keyed], keep: Callable[[StoredJob], bool], limit: int, full: bool, tag: str
) -> tuple[list[StoredJob], str | None]:
    """The first ``limit`` kept jobs of ``found`` (in listing order), and the next cursor.

    ``full``: the read stopped at its budget, so more may follow the last row read;
    then the cursor goes on after it even if nothing was kept.
    """
    out: list[StoredJob] = []
    for job, key in found:
        if keep(job):
            if len(out) == limit:
                return out, out[-1].after
            out.append(replace(job, after=encode_cursor(tag, key)))
    more = full and bool(found)
    return out, encode_cursor(tag, found[-1][1]) if more else None


def merge_pages(
    parts: Sequence[tuple[Sequence[Keyed], bool]],
    keep: Callable[[StoredJob], bool],
    limit: int,
    tag: str,
) -> tuple[list[StoredJob], str | None]:
    """One page from per-queue reads in the same order, each ``(rows, cut at its budget)``.

    Of the reads cut at their budget, the smallest last key bounds the page: past
    it, some queue was not read.
    """
    bound = min((rows[-1][1] for rows, cut in parts if cut and rows), default=None)
    found = sorted((kj for rows, _ in parts for kj in rows), key=lambda kj: kj[1])
    if bound is not None:
        found = [kj for kj in found if kj[1] <= bound]
    return cut_page(found, keep, limit, bound is not None, tag)


def with_running(
    workers: Iterable[WorkerInfo], leases: Iterable[tuple[str, str]]
) -> tuple[WorkerInfo, ...]:
    """Each worker with the jobs ``leases`` (``(worker, job id)``) give it: the jobs it
    holds now, for ``info`` (a worker's heartbeat lists them as of seconds ago)."""
    held: dict[str, list[str]] = {}
    for worker, job_id in leases:
        held.setdefault(worker, []).append(job_id)
    return tuple(replace(w, running=tuple(sorted(held.get(w.id, ())))) for w in workers)
