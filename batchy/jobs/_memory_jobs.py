"""The memory store's job record, and what an operator reads of its jobs: states, pages, records.

The memory store is for tests and one-process scripts, so a listing here sorts
the jobs of the state it lists on each call (the other stores seek an index).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ._model import DeadJob
from ._records import StoredJob, decode_cursor, encode_cursor

__all__ = [
    "DoneJob",
    "MemJob",
    "dead_record",
    "done_record",
    "page",
    "record_of",
    "sort_key",
    "state_of",
]


@dataclass(slots=True)
class MemJob:
    """A job in the memory store (waiting, running, or behind its key's head)."""

    id: str
    queue: str
    payload: str
    due: float
    seq: int
    retrying: bool = False
    owner: str | None = None
    lease: float = 0.0
    key: str | None = None
    token: str | None = None  # the lease token of the current claim, None when not claimed


def state_of(job: MemJob, lines: Mapping[str, deque[str]], now: float) -> str:
    """The job's state at ``now`` (the store's clock) for an operator."""
    if job.owner is not None:
        return "running"
    if job.key is not None and lines[job.key][0] != job.id:
        return "blocked"
    if job.due > now:
        return "retrying" if job.retrying else "scheduled"
    return "queued"


def record_of(job: MemJob, state: str, shift: float) -> StoredJob:
    """``job`` as a :class:`StoredJob`, its times moved onto the caller's clock by ``shift``."""
    running = state == "running"
    return StoredJob(
        job.id,
        job.queue,
        state,
        job.payload,
        job.key,
        due=job.due + shift,
        worker=job.owner,
        lease=job.lease + shift if running else 0.0,
    )


def dead_record(dead: DeadJob, shift: float) -> StoredJob:
    """A dead job as a :class:`StoredJob`."""
    return StoredJob(
        dead.id,
        dead.queue,
        "dead",
        dead.payload,
        dead.key,
        reason=dead.reason,
        traceback=dead.traceback,
        died_at=dead.died_at + shift,
    )


@dataclass(frozen=True, slots=True)
class DoneJob:
    """A done job whose result is kept: the result, until when, and what the job was."""

    result: str | None
    expires: float
    queue: str
    key: str | None
    payload: str


def done_record(job_id: str, done: DoneJob, shift: float) -> StoredJob:
    """A done job as a :class:`StoredJob`."""
    return StoredJob(
        job_id, done.queue, "done", done.payload, done.key, result=done.result,
        expires=done.expires + shift,
    )  # fmt: skip


# How many values the sort key (and so the cursor) of each state's listing has.
_SIZES = {"queued": 3, "blocked": 1, "running": 1}


def sort_key(state: str, job: MemJob) -> tuple[Any, ...]:
    """Where a waiting or running job stands in its state's listing (store times, stable)."""
    if state == "queued":
        return (job.queue, job.due, job.seq)
    if state in ("scheduled", "retrying"):
        return (job.due, job.id)
    if state == "blocked":
        return (job.seq,)  # push order
    return (job.id,)


def page(
    state: str,
    found: Iterable[tuple[tuple[Any, ...], StoredJob]],
    after: str | None,
    limit: int,
    store: object,
) -> tuple[list[StoredJob], str | None]:
    """The page after cursor ``after`` of ``found``: all of a state's jobs with their sort keys.

    Dead and done jobs come newest first: their keys ``(time, id)`` are taken in
    reverse.
    """
    desc = state in ("dead", "done")
    keyed = sorted(found, key=lambda kj: kj[0], reverse=desc)
    if after is not None:
        size = 1 if state.endswith("@key") else _SIZES.get(state, 2)  # by key: push order
        start = tuple(decode_cursor(after, state, size, store))
        keyed = [kj for kj in keyed if (kj[0] < start if desc else kj[0] > start)]
    chosen = [replace(j, after=encode_cursor(state, k)) for k, j in keyed[:limit]]
    return chosen, chosen[-1].after if len(keyed) > limit else None
