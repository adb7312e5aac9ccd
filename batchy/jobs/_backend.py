"""The contract every store (memory, SQLite, Redis) keeps; the worker and queue speak only this.

A backend stores opaque payloads and makes each step atomic; it decides nothing
about retries or encodings. Its promises, which the shared test suite checks on
every backend:

- ``push`` stores all envelopes or none; an envelope whose ``unique`` key was
  used within ``unique_ttl`` seconds, or whose id is a job still in the store
  (waiting, running or retrying), is skipped (``False`` in the result), and
  takes nothing: not its unique key, nor a place in ``info``'s queues.
- One job's bad values fail that job, never the round trip: ``push`` refuses
  an envelope with an unusable due time (:meth:`check_envelopes`), and ``cycle``
  applies an outcome no store could keep as that job's death
  (:meth:`screen_outcomes`), so the other outcomes of the round trip land.
- Text no job can have (a NUL character, a lone surrogate; an empty ordering or
  unique key) is refused alike by every store, before it is asked: ``push``
  raises :class:`TextError`, and so do look-ups and actions; an outcome, a
  heartbeat or a progress save for such an id is refused as if its claim ended,
  and a worker id or a progress save's payload with it raises :class:`TextError`
  (:mod:`batchy.jobs._checked` wraps every subclass's entry points); a retry's
  or a death's payload with it keeps the payload the job was claimed with.
- ``cycle`` applies outcomes, then claims up to ``limit`` ready jobs from
  ``queues`` in the order given (the first queue is drained first), each claimed
  job leased to ``worker`` for ``lease`` seconds under a fresh *lease token*
  (:attr:`Claimed.token`, unique per claim). Before claiming it moves due
  delayed and retry jobs to their queues and gives back jobs whose lease expired
  (their worker died or stalled): each exactly once, however many workers call
  ``cycle``. A job given back keeps no token: the next claim writes a new one.
- Fencing: only the lease holder's word counts. An outcome, a heartbeat, a
  release or a ``save_progress`` carries the token of the claim it speaks for,
  and the store applies it only while that token is still the job's, checked
  and applied in one atomic step (the Lua script, the SQL transaction). Anything
  else is refused without effect: ``cycle`` lists refused outcomes in
  :attr:`Claims.refused`, ``heartbeat`` returns the ids it did not renew,
  ``save_progress`` returns ``False``. So a job runs at least once (a stalled
  worker's job runs again elsewhere) but each attempt has at most one outcome:
  a worker that comes back after its lease ran out (paused, its loop blocked,
  the network stalled) can neither overwrite the new holder's result, nor end
  the job, nor start a third run, nor move an ordering key on. Each outcome or
  pair is answered for its own claim, also beside another claim of the same job
  in one call; refusals name jobs by id, so a worker speaks for one claim per
  job (one that claims a job anew ends its earlier claim of it).
- ``heartbeat`` renews the leases of the ``(id, token)`` pairs a live worker
  holds and records the worker for ``info``; it returns the ids it did not renew.
- Clocks: every time comparison that decides ownership or due-ness (lease
  expiry, due delayed and retry jobs, unique keys, live workers) is made on the
  store's clock: Redis's ``TIME`` inside its scripts, the local clock
  (:func:`batchy.jobs._clock.store_now`) for the memory and SQLite stores, which
  live on one machine. ``now`` is the caller's clock; a store takes from it only
  the offset of the absolute times it is handed (``Envelope.due``,
  ``Outcome.due``: due ``due - now`` seconds after the call, on the store's
  clock), and reports times (``KeyInfo.since``) back on it. A caller whose clock
  is off by any amount changes nothing.
- Ordering keys (``Envelope.key``): of the jobs sharing a key, only the *head*
  (the oldest still in the store, in push order) is ever claimable, so a key
  runs one job at a time in push order. A retry updates the head in place (it
  stays the head: the key waits for it); ``done`` and ``dead`` remove it and the
  next job of the key becomes the head in the same step. Expired leases and
  releases give the head back. A store keeps nothing per key once the key has no
  jobs, and never scans keys to find work: a key's next job is found from the
  job that just left.
- ``save_progress`` replaces the payload of a job whose token still holds (a
  sharded job's cursor), renewing its lease; ``False`` when the lease is lost.
- Wake-ups: ``wait_for_work(worker, queues, timeout)`` is where an idle worker
  with free slots waits; it returns when a job may be ready in ``queues``, when
  the store's next delayed or retry job falls due, or after about ``timeout``
  seconds (the worker then polls: a safety net, and how jobs of a dead worker
  come back). It may return early; the worker just calls ``cycle`` again. A
  store that cannot tell keeps the default: sleep ``timeout``. One that can
  *signals* a queue whenever a job there becomes ready (``push``, a due job
  moved, a release, a key's next job) and whenever a new due time is set (a
  delayed ``push``, a retry), so waiting workers re-read their deadline. A
  signal wakes one waiting worker of the queue, and one is enough: it is kept
  until a worker takes it, so it is never lost, and a ``cycle`` that leaves
  ready jobs in ``queues`` (it claimed ``limit``) signals again, so a wake-up
  taken by a worker without room for all the work is passed on. An idle worker
  costs the store at most one outstanding wait; the call may be cancelled at
  any time, and ``forget_worker`` ends what it left.
- Operating (:class:`batchy.jobs.Admin` speaks these): ``list_jobs`` pages
  through one state with keyset cursors and reads a bounded part of the store
  per call, whatever its size; ``job`` is one job's record (``jobs``: many
  jobs' records in one round trip); ``act`` applies an operator's action to
  every id or, if any id is unknown or in a state the action does not apply
  to, to none. A ``cancel`` is recorded for the job's
  current claim and reaches its worker in :attr:`Claims.cancel` at its next
  ``cycle``; the run's outcome (fenced as always) ends the request, and so does
  the claim ending any other way. ``info`` lists with each live worker the jobs
  it holds leases on now, not as of its last heartbeat.
- Activity counters (:mod:`batchy.jobs._activity`): ``add_counts`` adds a
  worker's per-minute counts to the store's, summing what every worker adds to
  the same ``(minute, name)``; ``read_counts`` returns the sums from a minute
  on. A store may drop minutes older than :data:`COUNTS_KEPT` before the
  ``now`` of a call. The default keeps them in this object, which the memory
  store needs; stores shared between processes keep them in the store.
- Sharded runs (:class:`batchy.jobs.ShardedJob`): ``note_run`` records a run's
  start, ``runs`` lists one sharded job's runs latest first, without scanning
  its jobs; ``run_started`` reads one run's start (a start names its pushes'
  unique keys after it). The default, again, keeps them in this object.
"""

from __future__ import annotations

import abc
import asyncio
import inspect
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from . import _runs_kept
from ._checked import check_entry_points
from ._errors import ConfigError
from ._model import Claims, DeadJob, Envelope, Info, JobStatus, KeyInfo, Outcome, WorkerInfo
from ._records import (
    ACTIONS,
    StoredJob,
    cut_page,
    decode_cursor,
    encode_cursor,
    merge_pages,
    narrowed_by,
    refusals,
    with_running,
)
from ._redact import password_of, redact
from ._screen import check_envelopes, screen_outcomes
from ._status_sql import status_select

__all__ = ["COUNTS_KEPT", "DEAD_MAX", "DEAD_MAX_AGE", "Backend"]

#: Dead jobs kept at most (the oldest go first), as in Sidekiq.
DEAD_MAX = 10_000
#: Seconds a dead job is kept at most (180 days), as in Sidekiq.
DEAD_MAX_AGE = 180 * 24 * 3600.0
#: Minutes of activity counters a store keeps at least (two hours: a dashboard shows one).
COUNTS_KEPT = 120


class Backend(abc.ABC):
    """Where jobs live. Subclass it for a new store; every method is one round trip."""

    dead_max: int = DEAD_MAX
    dead_max_age: float = DEAD_MAX_AGE

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Every store, batchy's or not, takes text no job can have alike (see _checked).
        super().__init_subclass__(**kwargs)
        check_entry_points(cls)

    #: The operator's actions :meth:`act` knows, and the states each applies to.
    actions: ClassVar[Mapping[str, tuple[str, ...]]] = ACTIONS

    @abc.abstractmethod
    async def push(
        self, envelopes: Sequence[Envelope], now: float, *, connection: Any = None
    ) -> list[bool]:
        """Store jobs atomically; ``False`` for each one skipped by its unique key.

        ``connection`` is the application's own connection to the store's database
        (PostgreSQL, SQLite): the jobs are written inside its open transaction, so
        they exist if and only if it commits. Stores without one raise ConfigError.
        """

    def push_sync(
        self, envelopes: Sequence[Envelope], now: float, *, connection: Any = None
    ) -> list[bool]:
        """``push`` for code without an event loop (a Flask view, a Django signal).

        Stores whose ``push`` never waits (memory, SQLite) get this for free: the
        coroutine is driven to its end right here. Stores that do I/O override it.
        """
        coro = self.push(envelopes, now, connection=connection)
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
    ) -> Claims:
        """Apply the outcomes whose token holds, then claim up to ``limit`` jobs from ``queues``."""

    @abc.abstractmethod
    async def heartbeat(
        self, worker: WorkerInfo, held: Sequence[tuple[str, str]], lease: float, now: float
    ) -> list[str]:
        """Extend the leases of the ``(id, token)`` pairs still held; return the ids not renewed."""

    async def save_progress(
        self, job_id: str, token: str, payload: str, lease: float, now: float
    ) -> bool:
        """Store ``payload`` while ``token`` holds the job and renew its lease; ``False`` if not."""
        raise ConfigError(
            f"{self!r} cannot save a running job's progress, so sharded jobs cannot run on "
            "it; implement save_progress() or use MemoryBackend, SQLiteBackend or RedisBackend"
        )

    async def keys(self, now: float, limit: int = 10) -> tuple[list[KeyInfo], list[KeyInfo]]:
        """The ``limit`` busiest ordering keys (most jobs first) and the stalled ones."""
        return [], []

    #: For stores, first thing in ``push``: a :class:`DelayError` if an envelope's
    #: due time or unique TTL is unusable (a push is all or nothing).
    check_envelopes = staticmethod(check_envelopes)

    def no_connection(self, connection: Any) -> None:
        """Raise :class:`ConfigError` if ``connection`` is given to a store that cannot join it."""
        if connection is not None:
            raise ConfigError(
                f"{self!r} cannot enqueue inside your transaction (connection={connection!r}): "
                "it does not share a database with it. Enqueue after your commit, or use "
                "a PostgreSQL or SQLite job store on the database your app writes to."
            )

    #: For stores, first thing in ``cycle``: each outcome no store could keep (a
    #: retry due at NaN) made a dead outcome with the reason, so it fails alone.
    screen_outcomes = staticmethod(screen_outcomes)

    @staticmethod
    def rank_keys(found: list[KeyInfo], limit: int) -> tuple[list[KeyInfo], list[KeyInfo]]:
        """For :meth:`keys`: the busiest (most jobs first) and stalled (longest first) keys."""
        busiest = sorted(found, key=lambda k: (-k.jobs, k.key))[:limit]
        stalled = sorted((k for k in found if k.stalled), key=lambda k: k.since)[:limit]
        return busiest, stalled

    async def wait_for_work(self, worker: str, queues: Sequence[str], timeout: float) -> None:
        """Return when work may be ready in ``queues`` or a job falls due; ``timeout`` at most.

        ``worker`` is the caller's id (``cycle``'s ``worker``): a store may keep one
        wait per worker outstanding between calls. This default sleeps ``timeout``:
        a store without wake-ups is polled every ``poll_interval``.
        """
        await asyncio.sleep(timeout)

    @abc.abstractmethod
    async def forget_worker(self, worker_id: str) -> None:
        """Remove a stopping worker from ``info`` (its leases are left to outcomes or expiry)."""

    @abc.abstractmethod
    async def status(self, job_id: str, now: float) -> JobStatus:
        """Where the job is now, and its result when it is done and kept."""

    async def statuses(self, job_ids: Sequence[str], now: float) -> list[JobStatus]:
        """:meth:`status` of each of ``job_ids``, in order, read in one round trip where the
        store can (``result()``'s waiters share these reads). The default asks one by one."""
        return [await self.status(job_id, now) for job_id in job_ids]

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

    # -- activity counters (batchy.jobs._activity) ---------------------------------------

    async def add_counts(self, counts: Mapping[tuple[int, str], int], now: float) -> None:
        """Add ``counts`` (``(Unix minute, name) -> amount``) to the store's counters.

        Workers call it beside their heartbeat. The default keeps the counters in
        this object, so only this process sees them: stores shared between
        processes override both methods.
        """
        kept: dict[tuple[int, str], int] = self.__dict__.setdefault("_activity_counts", {})
        for key, amount in counts.items():
            kept[key] = kept.get(key, 0) + amount
        oldest = int(now // 60) - COUNTS_KEPT
        for key in [k for k in kept if k[0] < oldest]:
            del kept[key]

    async def read_counts(self, since: int, now: float) -> dict[tuple[int, str], int]:
        """The counters of minute ``since`` (a Unix minute) and later, summed over all workers."""
        kept: dict[tuple[int, str], int] = self.__dict__.get("_activity_counts", {})
        return {k: v for k, v in kept.items() if k[0] >= since}

    # -- sharded runs (batchy.jobs.ShardedJob) -------------------------------------------

    async def note_run(self, name: str, run: str, now: float, keep: float) -> None:
        """Record that ``run`` of sharded job ``name`` started at ``now``, so
        :meth:`runs` can list it without a scan; forget that job's runs started
        more than ``keep`` seconds ago (its shards' results are gone by then).

        The default keeps them in this object, for this process only: stores
        shared between processes override the three methods."""
        _runs_kept.note(self.__dict__.setdefault("_sharded_runs", {}), name, run, now, keep)

    async def runs(
        self, name: str, now: float, keep: float, limit: int = 50
    ) -> list[tuple[str, float]]:
        """Up to ``limit`` runs of sharded job ``name`` started in the last ``keep``
        seconds, as ``(run, started)``, the latest first."""
        return _runs_kept.listed(self.__dict__.get("_sharded_runs", {}), name, now, keep, limit)

    async def run_started(self, name: str, run: str) -> float | None:
        """When ``run`` of sharded job ``name`` was last started (:meth:`note_run`), or
        ``None``; not filtered by a keep, so readers either side of its end agree."""
        return _runs_kept.started(self.__dict__.get("_sharded_runs", {}), name, run)

    # -- operating (batchy.jobs.Admin) ---------------------------------------------------

    def describe(self) -> str:
        """The store's kind and location for people, without passwords: ``SQLite /srv/jobs.db``."""
        return type(self).__name__

    def connect_error(self) -> str | None:
        """Why the store's last try to connect failed, in its driver's words; else ``None``."""
        return None

    def unreachable(self, error: BaseException) -> bool:
        """Whether ``error`` says the store could not be reached (no server at the address,
        an unknown database or user): the command-line tools say so in one line."""
        return isinstance(error, OSError)

    async def list_jobs(
        self,
        state: str,
        now: float,
        *,
        queue: str | None = None,
        key: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> tuple[list[StoredJob], str | None]:
        """Up to ``limit`` jobs in ``state`` after cursor ``after``, and the next page's cursor.

        ``queue`` and ``key`` (an ordering key) narrow the list (a done job is kept
        with its queue, key and payload beside its result). Orders: ``queued``
        queue by queue (by name), each in claim order;
        ``scheduled`` and ``retrying`` by due time; ``running`` by id; ``blocked``
        in push order (a store that keeps no such order: any); with ``key``, every
        state in push order; ``dead`` newest first; ``done`` by the time their
        result expires, latest first. The cursor is None after the last page. A call
        reads a bounded part of the store: it may return fewer than ``limit`` jobs
        and a cursor to go on from (a store that can resume only after some jobs,
        a few more: those it cannot resume after have ``after=None``).
        """
        raise self._cannot_operate()

    async def job(self, job_id: str, now: float) -> StoredJob | None:
        """The job's record in any state, or None if not held (by default: :meth:`jobs`'s)."""
        if inspect.unwrap(type(self).jobs) is Backend.jobs:  # (wrapped: see _checked)
            raise self._cannot_operate()
        return (await self.jobs([job_id], now))[0]

    async def jobs(self, job_ids: Sequence[str], now: float) -> list[StoredJob | None]:
        """:meth:`job` of each of ``job_ids``, in order, read in one round trip where the
        store can (a sharded run's shards, an operator's page). The default asks one by one."""
        return [await self.job(job_id, now) for job_id in job_ids]

    async def act(self, action: str, ids: Sequence[str], now: float) -> dict[str, str]:
        """Apply ``action`` (a key of :attr:`actions`) to all ``ids`` or to none.

        Returns ``{}`` when it was applied, else, for each id it does not apply to,
        the state the job is in (``done`` when only its kept result is left,
        ``unknown`` when the store does not hold it), and nothing changed.
        """
        raise self._cannot_operate()

    def _cannot_operate(self) -> ConfigError:
        return ConfigError(
            f"{self!r} cannot list or manage jobs; implement list_jobs(), job() and act() "
            "in this store, or use one of batchy's (memory, SQLite, Redis, PostgreSQL)"
        )

    #: For :meth:`act`: each id whose state ``action`` does not apply to (see its docstring).
    refusals = staticmethod(refusals)

    #: For stores: the opaque cursor of a ``state`` listing after a sort key, and back;
    #: a page cut from the jobs read, and one merged from several reads (per queue).
    make_cursor = staticmethod(encode_cursor)
    read_cursor = staticmethod(decode_cursor)
    cut_page = staticmethod(cut_page)
    merge_pages = staticmethod(merge_pages)
    narrowed_by = staticmethod(narrowed_by)

    #: For :meth:`info`: each worker with the jobs ``leases`` (``(worker, job id)``) give it.
    with_running = staticmethod(with_running)
    #: For SQL stores: one query of many jobs' statuses (see :meth:`statuses`).
    status_select = staticmethod(status_select)

    #: ``location`` (a URL or a libpq ``key=value`` string) with any password masked.
    redact = staticmethod(redact)
    #: The password in a location's user info (``user:password@host``), scheme or not.
    password_of = staticmethod(password_of)
