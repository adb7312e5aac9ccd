"""The operator's view of a queue: list and inspect jobs, act on them, see workers, keys, shards.

::

    admin = queue.admin
    page = await admin.jobs("retrying", queue="default", limit=50)
    for job in page.jobs:
        print(job.id, job.job, job.attempts, job.error)
    more = await admin.jobs("retrying", queue="default", after=page.next)
    await admin.run_now(page.jobs[0].id)
    await admin.cancel(running_id)       # the handler gets CancelledError at its next await

Everything here goes through the store's operating methods
(:meth:`Backend.list_jobs`, :meth:`Backend.job`, :meth:`Backend.act`), which
read a bounded part of the store per call, so a dashboard can call them on
every page view of a store with a million jobs. Stores never decode payloads:
the job type, arguments and last error of a job are decoded here, and so the
filter by job type is applied here, on the pages the store returns (see
:meth:`Admin.jobs`). An action on an id the store does not hold, or on a job in
a state the action does not apply to, raises and changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from batchy import short_repr

from . import _clock
from ._errors import ConfigError, JobNotFound, JobStateError, PayloadError
from ._model import Claimed, Info, KeyInfo, Message, WorkerInfo, decode
from ._records import LIST_STATES, JobInfo, JobPage, PeriodicInfo, RunInfo, ShardInfo, StoredJob
from ._screen import check_lookup
from ._serializer import Serializer
from ._sharded import ShardedJob
from ._ticks import PeriodicLike

if TYPE_CHECKING:
    from ._backend import Backend
    from ._job import JobType

__all__ = ["Admin", "Managed"]

#: Jobs a listing filtered by job type examines at most per call (then it
#: returns what it found, maybe nothing, with a cursor to go on from).
TYPE_SCAN = 2000

# What an action on a job in the wrong state should be instead, by (action, state).
_INSTEAD = {
    ("delete", "running"): "cancel it first (`batchy jobs cancel {id}`)",
    ("delete", "dead"): "delete it from the dead set (`batchy dead delete {id}`)",
    ("run_now", "queued"): "it already waits only for a free worker",
    ("run_now", "blocked"): "it runs when the jobs before it on its ordering key are done",
    ("run_now", "dead"): "retry it (`batchy dead retry {id}`)",
    ("retry_dead", "retrying"): "run it now instead (`batchy jobs run-now {id}`)",
    ("retry_dead", "scheduled"): "run it now instead (`batchy jobs run-now {id}`)",
}
_WAITING = ("queued", "scheduled", "retrying", "blocked")
_FOR_WAITING = "it is not running; delete it instead (`batchy jobs delete {id}`)"
# Each action in words: (what the operator asked, what would have happened).
_WORDS = {
    "delete": ("delete", "deleted"),
    "run_now": ("run now", "run now"),
    "cancel": ("cancel", "cancelled"),
    "retry_dead": ("retry", "retried"),
    "delete_dead": ("delete from the dead set", "deleted"),
}
# Where an operator finds the ids an action takes.
_LISTS = {"retry_dead": "batchy dead list", "delete_dead": "batchy dead list"}
_CHECK_ID = "check the id (`batchy jobs list`, `batchy dead list`)"


class Managed(Protocol):
    """What :class:`Admin` needs of a :class:`~batchy.jobs.Queue`."""

    @property
    def backend(self) -> Backend: ...
    @property
    def serializer(self) -> Serializer: ...
    @property
    def jobs(self) -> Mapping[str, JobType[Any, Any]]: ...
    @property
    def periodics(self) -> Sequence[PeriodicLike]: ...
    @property
    def sharded_jobs(self) -> Mapping[str, ShardedJob]: ...


class Admin:
    """Management of one queue's store: ``queue.admin`` (see the module's docstring)."""

    def __init__(self, queue: Managed) -> None:
        self.queue = queue

    @property
    def backend(self) -> Backend:
        """The queue's store."""
        return self.queue.backend

    def __repr__(self) -> str:
        return f"<batchy.jobs.Admin {self.store}>"

    @property
    def store(self) -> str:
        """What store this is, for people: ``SQLite /srv/app/jobs.db`` (never a password)."""
        return self.backend.describe()

    # -- reading ---------------------------------------------------------------------

    async def jobs(
        self,
        state: str = "queued",
        *,
        queue: str | None = None,
        job: str | None = None,
        key: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> JobPage:
        """A page of jobs in ``state``; ``page.next`` (as ``after=``) gives the next one.

        ``state`` is one of ``queued``, ``scheduled``, ``retrying``, ``running``,
        ``blocked`` (waiting behind its ordering key's head), ``dead`` or ``done``
        (jobs whose result is kept). ``queue``, ``job`` (a job type's name) and
        ``key`` (an ordering key, as stored: ``group:value``) narrow it; a done
        job is kept with what it was (queue, key, payload) for as long as its
        result. The store seeks each page by index; the job type is read from
        payloads here, reading at most ``TYPE_SCAN`` jobs' worth of store pages
        per call: a page
        filtered by type may hold fewer than ``limit`` jobs (even none) and still
        have a ``next``. So may a page of done jobs filtered by queue or key (the
        stores index results by expiry only). A page of Redis's blocked jobs, on a
        store of more keyed jobs than its ``page_budget``, ends where a batch of
        ``HSCAN`` does: it may hold a few more than ``limit``.
        """
        self._check_listing(state, queue, job, key, limit)
        if job is None:
            found, after = await self._page(state, queue, key, after, limit)
            return JobPage(state, tuple(self._info(s) for s in found), after)
        kept: list[JobInfo] = []
        examined, size = 0, max(limit, 100)
        while examined < TYPE_SCAN:
            found, following = await self._page(state, queue, key, after, size)
            # A short page with a next one read a whole page's worth in the store
            # (its queue or key filter left jobs out): counted by what it returned,
            # a queue that matches nothing had every job of 100,000 read in one call.
            examined += size
            for i, stored in enumerate(found):
                info = self._info(stored)
                if info.job == job:
                    kept.append(info)
                # The next page starts right after this job, if one may (else after
                # the next job that has a cursor, of this type or not: a few more).
                if len(kept) >= limit and stored.after is not None:
                    last = i == len(found) - 1 and following is None
                    return JobPage(state, tuple(kept), None if last else stored.after)
            after = following
            if after is None:
                break
        return JobPage(state, tuple(kept), after)

    async def _page(
        self, state: str, queue: str | None, key: str | None, after: str | None, limit: int
    ) -> tuple[list[StoredJob], str | None]:
        return await self.backend.list_jobs(
            state, _clock.now(), queue=queue, key=key, after=after, limit=limit
        )

    def _check_listing(
        self, state: str, queue: str | None, job: str | None, key: str | None, limit: int
    ) -> None:
        if state not in LIST_STATES:
            raise ConfigError(
                f"job state {state!r} cannot be listed; the states are {', '.join(LIST_STATES)}"
            )
        if type(limit) is not int or not 1 <= limit <= 1000:
            raise ConfigError(f"page size limit={limit!r} must be an int from 1 to 1000")
        for what, text in (("queue", queue), ("ordering key", key)):
            if text is not None:
                where = f"admin.jobs({state!r}, {what.split()[-1]}={short_repr(text)})"
                check_lookup(text, what, where, "take it out of the filter")

    async def job(self, job_id: str) -> JobInfo:
        """The details of one job, wherever it is; :class:`JobNotFound` if the store lacks it."""
        check_lookup(job_id, "job id", f"admin.job({short_repr(job_id)})", _CHECK_ID)
        found = await self.backend.job(job_id, _clock.now())
        if found is None:
            raise JobNotFound(
                f"job {job_id} is not in {self.store}: it was never enqueued there, or it "
                "finished and its result was not kept (or has expired); check the id, and "
                "the store the app points at"
            )
        return self._info(found)

    def _info(self, stored: StoredJob) -> JobInfo:
        message: Message | None = None
        if stored.payload:
            try:
                message = decode(Claimed(stored.id, stored.queue, stored.payload), self._ser)
            except PayloadError:
                message = None  # shown raw: an operator may need to see a bad payload
        result: Any = stored.result
        if stored.state == "done" and stored.result is not None:
            try:
                result = self._ser.loads(stored.result)
            except Exception:
                result = stored.result
        state = stored.state
        if message is not None and message.cancelled and state == "dead":
            state = "cancelled"
        waits = stored.state in ("scheduled", "retrying")
        return JobInfo(
            id=stored.id,
            queue=stored.queue,
            state=state,
            job=message.job if message else None,
            args=message.args if message else [],
            kwargs=message.kwargs if message else {},
            attempts=message.attempt if message else 0,
            enqueued_at=message.enqueued_at if message else None,
            key=stored.key,
            next_run=stored.due if waits else None,
            worker=stored.worker,
            lease_until=stored.lease if stored.state == "running" else None,
            error=stored.reason or (message.error if message else None),
            traceback=stored.traceback or (message.traceback if message else None),
            died_at=stored.died_at if stored.state == "dead" else None,
            result=result,
            expires=stored.expires if stored.state == "done" else None,
            payload=stored.payload,
        )

    @property
    def _ser(self) -> Serializer:
        return self.queue.serializer

    async def info(self) -> Info:
        """Counts per queue, the dead set's size and the live workers (``batchy info``)."""
        return await self.backend.info(_clock.now())

    async def workers(self) -> tuple[WorkerInfo, ...]:
        """The live workers, each with the jobs it runs now (``len(w.running)``: busy slots)."""
        return (await self.info()).workers

    async def keys(self, limit: int = 10) -> tuple[list[KeyInfo], list[KeyInfo]]:
        """The ``limit`` busiest ordering keys (most jobs first) and the stalled ones."""
        return await self.backend.keys(_clock.now(), limit)

    def periodics(self) -> list[PeriodicInfo]:
        """The periodic job types declared on the queue, each with its next tick."""
        now = _clock.now()
        return [
            PeriodicInfo(p.job.name, p.job.queue_name, repr(p.schedule), p.schedule.next_after(now))
            for p in self.queue.periodics
        ]

    async def runs(self, job: str | ShardedJob, limit: int = 20) -> list[RunInfo]:
        """The latest ``limit`` runs of sharded job ``job`` (its name or itself), each
        with its shards; the store remembers a run a week after its start (or the
        job's ``keep_result``, if longer)."""
        sharded = self._sharded(job)
        if type(limit) is not int or not 1 <= limit <= 1000:
            raise ConfigError(f"runs limit={limit!r} must be an int from 1 to 1000")
        found = await self.backend.runs(sharded.name, _clock.now(), sharded.remembered, limit)
        # Every shard of every run in one read (a page of 20 runs of 256 shards was
        # 5,120 round trips, seconds on a network store, at each of a dashboard's refreshes).
        shards = await self._shards(sharded, [run for run, _ in found])
        return [RunInfo(sharded.name, run, started, tuple(shards[run])) for run, started in found]

    async def shards(self, job: str | ShardedJob, run: str = "default") -> list[ShardInfo]:
        """Where each shard of sharded job ``job`` (its name or itself) is in ``run``."""
        return (await self._shards(self._sharded(job), [run]))[run]

    async def _shards(self, sharded: ShardedJob, runs: list[str]) -> dict[str, list[ShardInfo]]:
        ids = [sharded.shard_id(run, shard) for run in runs for shard in range(sharded.shards)]
        records = iter(await self.backend.jobs(ids, _clock.now()))
        return {run: [self._shard(s, next(records)) for s in range(sharded.shards)] for run in runs}

    def _shard(self, shard: int, found: StoredJob | None) -> ShardInfo:
        if found is None:
            return ShardInfo(shard, "unknown")
        info = self._info(found)
        if info.state == "done":
            batches = info.result.get("batches") if isinstance(info.result, dict) else None
            return ShardInfo(shard, "done", batches=batches)
        cursor = info.args[2] if len(info.args) > 2 else None
        return ShardInfo(shard, info.state, cursor, info.worker, error=info.error)

    def _sharded(self, job: str | ShardedJob) -> ShardedJob:
        sharded = job if isinstance(job, ShardedJob) else self.queue.sharded_jobs.get(job)
        if sharded is None:
            raise ConfigError(
                f"{job!r} is not a sharded job of this queue; it declares "
                f"{', '.join(sorted(self.queue.sharded_jobs)) or 'none'}"
            )
        return sharded

    # -- acting ----------------------------------------------------------------------

    async def delete(self, ids: str | Iterable[str]) -> int:
        """Delete queued, scheduled, retrying or blocked jobs (all of them, or none)."""
        return await self._act("delete", ids)

    async def run_now(self, ids: str | Iterable[str]) -> int:
        """Make scheduled or retrying jobs due now (all of them, or none)."""
        return await self._act("run_now", ids)

    async def cancel(self, ids: str | Iterable[str]) -> int:
        """Ask the workers running these jobs to cancel them (all of them, or none).

        Cooperative: the worker learns of it at its next round trip to the store
        (well within a second), and the handler gets ``CancelledError`` at its next
        ``await`` or ``yield``. The job then goes to the dead set marked cancelled,
        never retried. A run that ends first (done, failed, its lease lost) ends the
        request.
        """
        return await self._act("cancel", ids)

    async def retry_dead(
        self,
        ids: str | Iterable[str] | None = None,
        *,
        queue: str | None = None,
        job: str | None = None,
    ) -> int:
        """Put dead jobs back on their queues: ``ids``, or all matching ``queue``/``job``."""
        return await self._dead("retry_dead", ids, queue, job)

    async def delete_dead(
        self,
        ids: str | Iterable[str] | None = None,
        *,
        queue: str | None = None,
        job: str | None = None,
    ) -> int:
        """Delete dead jobs: ``ids``, or all matching ``queue``/``job`` (all when no filter)."""
        return await self._dead("delete_dead", ids, queue, job)

    async def _dead(
        self, action: str, ids: str | Iterable[str] | None, queue: str | None, job: str | None
    ) -> int:
        if ids is not None:
            if queue is not None or job is not None:
                raise ConfigError(
                    f"{_WORDS[action][0]} dead jobs: pass ids or filters (queue=, job=), not both"
                )
            return await self._act(action, ids)
        if queue is None and job is None:  # the whole dead set, in one step of the store
            if action == "retry_dead":
                return await self.backend.retry_dead(None, _clock.now())
            return await self.backend.delete_dead(None)
        chosen: list[str] = []
        after: str | None = None
        while True:  # the dead set is capped (dead_max), so this ends
            page = await self.jobs("dead", queue=queue, job=job, after=after, limit=500)
            chosen += [j.id for j in page.jobs]
            after = page.next
            if after is None:
                break
        if not chosen:
            return 0
        # As for the whole dead set: a filter acts on what it can. An entry whose id
        # is live again stays dead (its retry would replace the live job), the rest go.
        if action == "retry_dead":
            return await self.backend.retry_dead(chosen, _clock.now())
        return await self.backend.delete_dead(chosen)

    async def _act(self, action: str, ids: str | Iterable[str]) -> int:
        chosen = [ids] if isinstance(ids, str) else list(dict.fromkeys(ids))
        if not chosen:
            return 0
        verb, done = _WORDS[action]
        for job_id in chosen:
            where = f"admin.{action}({short_repr(job_id)})"
            fix = f"nothing was {done}; check the ids (`{_LISTS.get(action, 'batchy jobs list')}`)"
            check_lookup(job_id, "job id", where, fix)
        refused = await self.backend.act(action, chosen, _clock.now())
        if not refused:
            return len(chosen)
        now = _clock.now()
        for job_id in [i for i, state in refused.items() if state == "unknown"]:
            # A store of an older contract said "unknown" for a done job: say what it is.
            found = await self.backend.job(job_id, now)
            if found is not None:
                refused[job_id] = found.state
        missing = [i for i, state in refused.items() if state == "unknown"]
        if missing:
            which = (
                f"job {missing[0]} is" if len(missing) == 1 else f"jobs {', '.join(missing)} are"
            )
            raise JobNotFound(
                f"{which} not in {self.store}, so nothing was {done}; check the ids "
                f"(`{_LISTS.get(action, 'batchy jobs list')}`) and that the app points at "
                "the store that holds them"
            )
        allowed = ", ".join(self.backend.actions[action])
        why = "; ".join(f"job {i} is {s}{self._instead(action, i, s)}" for i, s in refused.items())
        raise JobStateError(
            f"cannot {verb} on {self.store}: {why}. Only {allowed} jobs can be {done}; "
            "nothing was changed"
        )

    @staticmethod
    def _instead(action: str, job_id: str, state: str) -> str:
        hint = _INSTEAD.get((action, state))
        if hint is None and action == "cancel" and state in _WAITING:
            hint = _FOR_WAITING
        if hint is None and state in ("done", "cancelled"):
            hint = "it has finished"
        if state.startswith("dead and "):  # see Backend.refusals
            hint = (
                "its id was enqueued again; delete the dead entry "
                "(`batchy dead delete {id}`), or retry it once that job has finished"
            )
        return f": {hint.format(id=job_id)}" if hint else ""
