"""The contract every store (memory, SQLite, Redis) keeps; the worker and queue speak only this.

A backend stores opaque payloads and makes each step atomic; it decides nothing
about retries or encodings. Its promises, which the shared test suite checks on
every backend:

- ``push`` stores all envelopes or none; an envelope whose ``unique`` key was
  used within ``unique_ttl`` seconds, or whose id is a job still in the store
  (waiting, running or retrying), is skipped (``False`` in the result).
- ``cycle`` applies outcomes, then claims up to ``limit`` ready jobs from
  ``queues`` in the order given (the first queue is drained first), each claimed
  job leased to ``worker`` until ``now + lease``. Before claiming it moves due
  delayed and retry jobs to their queues and gives back jobs whose lease expired
  (their worker died): each exactly once, however many workers call ``cycle``.
- ``heartbeat`` renews the leases of the jobs a live worker holds and records the
  worker for ``info``; it returns the ids whose lease the worker had lost.
- An outcome for a job whose lease moved to another worker is still applied:
  the guarantee is at-least-once, and the last word about a job wins.
- Ordering keys (``Envelope.key``): of the jobs sharing a key, only the *head*
  (the oldest still in the store, in push order) is ever claimable, so a key
  runs one job at a time in push order. A retry updates the head in place (it
  stays the head: the key waits for it); ``done`` and ``dead`` remove it and the
  next job of the key becomes the head in the same step. Expired leases and
  releases give the head back. A store keeps nothing per key once the key has no
  jobs, and never scans keys to find work: a key's next job is found from the
  job that just left.
- ``save_progress`` replaces the payload of a job the worker still holds (a
  sharded job's cursor), renewing its lease; ``False`` when the lease is lost.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

from ._errors import ConfigError
from ._model import Claimed, DeadJob, Envelope, Info, JobStatus, KeyInfo, Outcome, WorkerInfo

__all__ = ["DEAD_MAX", "DEAD_MAX_AGE", "Backend"]

#: Dead jobs kept at most (the oldest go first), as in Sidekiq.
DEAD_MAX = 10_000
#: Seconds a dead job is kept at most (180 days), as in Sidekiq.
DEAD_MAX_AGE = 180 * 24 * 3600.0


class Backend(abc.ABC):
    """Where jobs live. Subclass it for a new store; every method is one round trip."""

    dead_max: int = DEAD_MAX
    dead_max_age: float = DEAD_MAX_AGE

    @abc.abstractmethod
    async def push(self, envelopes: Sequence[Envelope], now: float) -> list[bool]:
        """Store jobs atomically; ``False`` for each one skipped by its unique key."""

    def push_sync(self, envelopes: Sequence[Envelope], now: float) -> list[bool]:
        """``push`` for code without an event loop (a Flask view, a Django signal).

        Stores whose ``push`` never waits (memory, SQLite) get this for free: the
        coroutine is driven to its end right here. Stores that do I/O override it.
        """
        coro = self.push(envelopes, now)
        try:
            coro.send(None)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        coro.close()
        raise ConfigError(
            f"{self!r} cannot enqueue without an event loop; use 'await job.enqueue(...)' "
            "from async code, or override push_sync() in this store"
        )

    @abc.abstractmethod
    async def cycle(
        self,
        outcomes: Sequence[Outcome],
        queues: Sequence[str],
        limit: int,
        worker: str,
        lease: float,
        now: float,
    ) -> list[Claimed]:
        """Apply outcomes, then claim up to ``limit`` ready jobs from ``queues`` in order."""

    @abc.abstractmethod
    async def heartbeat(
        self, worker: WorkerInfo, ids: Sequence[str], lease: float, now: float
    ) -> list[str]:
        """Extend the leases of ``ids`` held by ``worker``; return the ids it no longer holds."""

    async def save_progress(
        self, job_id: str, worker: str, payload: str, lease: float, now: float
    ) -> bool:
        """Store ``payload`` for a job ``worker`` holds and renew its lease; ``False`` if lost."""
        raise ConfigError(
            f"{self!r} cannot save a running job's progress, so sharded jobs cannot run on "
            "it; implement save_progress() or use MemoryBackend, SQLiteBackend or RedisBackend"
        )

    async def keys(self, now: float, limit: int = 10) -> tuple[list[KeyInfo], list[KeyInfo]]:
        """The ``limit`` busiest ordering keys (most jobs first) and the stalled ones."""
        return [], []

    @staticmethod
    def rank_keys(found: list[KeyInfo], limit: int) -> tuple[list[KeyInfo], list[KeyInfo]]:
        """For :meth:`keys`: the busiest (most jobs first) and stalled (longest first) keys."""
        busiest = sorted(found, key=lambda k: (-k.jobs, k.key))[:limit]
        stalled = sorted((k for k in found if k.stalled), key=lambda k: k.since)[:limit]
        return busiest, stalled

    @abc.abstractmethod
    async def forget_worker(self, worker_id: str) -> None:
        """Remove a stopping worker from ``info`` (its leases are left to outcomes or expiry)."""

    @abc.abstractmethod
    async def status(self, job_id: str, now: float) -> JobStatus:
        """Where the job is now, and its result when it is done and kept."""

    @abc.abstractmethod
    async def info(self, now: float) -> Info:
        """Counts per queue (``queues`` lists every queue that has or had jobs), dead, workers."""

    @abc.abstractmethod
    async def dead_jobs(self, limit: int = 100) -> list[DeadJob]:
        """The most recent dead jobs first."""

    @abc.abstractmethod
    async def retry_dead(self, ids: Sequence[str] | None, now: float) -> int:
        """Put dead jobs (all when ``ids`` is None) back on their queues; how many moved."""

    @abc.abstractmethod
    async def delete_dead(self, ids: Sequence[str] | None) -> int:
        """Delete dead jobs (all when ``ids`` is None); how many went."""

    async def close(self) -> None:  # noqa: B027 - optional for stores with nothing to close
        """Release connections."""
