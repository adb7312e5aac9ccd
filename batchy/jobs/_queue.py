"""The queue object users declare jobs on, enqueue through, and hand to workers.

::

    from batchy.jobs import Queue

    queue = Queue("jobs.db")     # a SQLite file; or Queue(MemoryBackend()), RedisBackend(url)

    @queue.job(retries=5, timeout=30)
    async def send_welcome(user_id: int) -> None:
        user = await users_by_id(user_id)    # batched with every other running job's loads
        ...

    handle = await send_welcome.enqueue(42)
    await queue.enqueue_many(send_welcome.call(uid) for uid in new_users)
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

import batchy

from . import _clock
from ._admin import Admin
from ._backend import Backend
from ._cron import Cron, Every, Schedule
from ._errors import ConfigError, JobDefinitionError, JobError, TextError
from ._handle import Handle
from ._hooks import JobEvent, emit
from ._job import JobCall, JobType, check_queue_name
from ._model import DeadJob, Envelope, Info, Message, encode
from ._retry import DEFAULT_RETRIES, Backoff, sidekiq_backoff
from ._screen import check_lookup
from ._serializer import JSONSerializer, Serializer
from ._sharded import SHARD_KEEP, ShardedJob
from ._sqlite import SQLiteBackend

if TYPE_CHECKING:
    from ._hooks import JobHook

__all__ = ["Periodic", "Queue"]

P = ParamSpec("P")
T = TypeVar("T")
E = TypeVar("E", bound=JobError)


class Periodic(Generic[P, T]):
    """A job type enqueued by workers on a schedule, once per tick across all workers."""

    def __init__(self, job: JobType[P, T], schedule: Schedule) -> None:
        self.job = job
        self.schedule = schedule

    def __repr__(self) -> str:
        return f"<batchy.jobs.Periodic {self.job.name} {self.schedule!r}>"


# The stores a URL names, by scheme: Queue(str) takes a SQLite path only, so that
# batchy.jobs imports no store driver, and a URL there would be opened as a file.
_STORE_FOR = {
    "redis": (
        "Redis", "from batchy_contrib.jobs.redis import RedisBackend", "RedisBackend", "redis",
    ),
    "postgresql": (
        "PostgreSQL", "from batchy_contrib.jobs.postgres import PostgresBackend",
        "PostgresBackend", "postgres",
    ),
}  # fmt: skip
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+://")  # two letters at least: C://x is a path
_STORE_FOR["rediss"] = _STORE_FOR["unix"] = _STORE_FOR["redis"]
_STORE_FOR["postgres"] = _STORE_FOR["postgresql"]


def _url_for_a_path(url: str) -> str:
    """Why ``Queue(url)`` is refused, and the store to pass instead."""
    shown = Backend.redact(url)
    scheme = url.partition("://")[0].lower()
    head = f"Queue({shown!r}): a string is the path of a SQLite file, not a URL"
    if scheme in _STORE_FOR:
        kind, imports, cls, extra = _STORE_FOR[scheme]
        return (
            f"{head}; for {kind}, pass the store: {imports}, then Queue({cls}({shown!r})) "
            f"(pip install 'batchy[{extra}]')"
        )
    if scheme == "sqlite":
        return f"{head}; write the file's path: Queue('jobs.db')"
    return (
        f"{head}; write a SQLite file's path (Queue('jobs.db')), or pass a store: "
        "RedisBackend(url) or PostgresBackend(url) from batchy_contrib.jobs"
    )


class Queue:
    """Job types, a store and the settings they share.

    ``backend`` is a :class:`Backend`, or a path for a SQLite file (the default,
    ``batchy-jobs.db``). ``default_queue`` is the queue of job types declared
    without one. Results are kept ``keep_result`` seconds (0: not kept).
    """

    def __init__(
        self,
        backend: Backend | str | Path | None = None,
        *,
        default_queue: str = "default",
        serializer: Serializer | None = None,
        keep_result: float = 3600.0,
        hooks: Iterable[JobHook] = (),
    ) -> None:
        if isinstance(backend, str) and _URL.match(backend):
            raise ConfigError(_url_for_a_path(backend))
        if backend is None or isinstance(backend, (str, Path)):
            backend = SQLiteBackend(backend or "batchy-jobs.db")
        if not isinstance(backend, Backend):
            raise JobDefinitionError(
                f"Queue(backend={backend!r}): expected a batchy.jobs Backend "
                "(MemoryBackend(), SQLiteBackend(path), RedisBackend(url)) or a SQLite path"
            )
        self.backend = backend
        self.default_queue = check_queue_name(default_queue, "Queue(default_queue=...)")
        self.serializer: Serializer = serializer or JSONSerializer()
        self.keep_result = keep_result
        self.hooks: list[JobHook] = list(hooks)
        self.jobs: dict[str, JobType[Any, Any]] = {}
        self.periodics: list[Periodic[Any, Any]] = []
        self.sharded_jobs: dict[str, ShardedJob] = {}
        #: Management of the store: list, inspect, cancel, delete and retry jobs.
        self.admin = Admin(self)

    def __repr__(self) -> str:
        return f"<batchy.jobs.Queue {self.backend!r} jobs={len(self.jobs)}>"

    # -- declaring -------------------------------------------------------------------

    @overload
    def job(self, fn: Callable[P, Any], /) -> JobType[P, Any]: ...
    @overload
    def job(
        self,
        *,
        name: str | None = None,
        queue: str | None = None,
        retries: int = DEFAULT_RETRIES,
        timeout: float | None = None,
        backoff: Backoff = sidekiq_backoff,
        keep_result: float | None = None,
        ordered_by: str | Callable[..., Any] | None = None,
        order_group: str | None = None,
    ) -> Callable[[Callable[P, Any]], JobType[P, Any]]: ...
    def job(  # type: ignore[misc]  # mypy cannot match ParamSpec overloads here
        self,
        fn: Callable[P, Any] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str | None = None,
        retries: int = DEFAULT_RETRIES,
        timeout: float | None = None,
        backoff: Backoff = sidekiq_backoff,
        keep_result: float | None = None,
        ordered_by: str | Callable[..., Any] | None = None,
        order_group: str | None = None,
    ) -> JobType[P, Any] | Callable[[Callable[P, Any]], JobType[P, Any]]:
        """Declare a job type from a generator handler or an ``async def``.

        Options: ``name`` (default: ``module.qualname``), ``queue``, ``retries``
        (default 25), ``timeout`` (seconds per attempt), ``backoff``
        (``(retries_done, error) -> seconds``) and ``keep_result`` (seconds).
        ``ordered_by`` (a parameter name, or a function of the arguments returning
        a str or int) makes jobs with the same key run one at a time in enqueue
        order; ``order_group`` lets job types share keys (default: the job name).
        """

        options: dict[str, Any] = {
            "name": name,
            "queue": queue,
            "retries": retries,
            "timeout": timeout,
            "backoff": backoff,
            "keep_result": keep_result,
            "ordered_by": ordered_by,
            "order_group": order_group,
        }

        def declare(f: Callable[P, Any]) -> JobType[P, Any]:
            return self._register(JobType(self, f, **options))

        return declare(fn) if fn is not None else declare

    def periodic(
        self, schedule: str | float | Schedule, **options: Any
    ) -> Callable[[Callable[[], Any]], JobType[[], Any]]:
        """Declare a job type that workers enqueue on ``schedule``, once per tick.

        ``schedule`` is a cron expression (``"*/5 * * * *"``, UTC), a number of
        seconds, or a :class:`Cron` / :class:`Every`. The handler takes no arguments.
        """
        if isinstance(schedule, str):
            sched: Schedule = Cron(schedule)
        elif isinstance(schedule, (int, float)):
            sched = Every(schedule)
        else:
            sched = schedule

        def declare(f: Callable[[], Any]) -> JobType[[], Any]:
            job: JobType[[], Any] = JobType(self, f, **options)
            problem = job.binding_problem((), {})
            if problem is not None:
                raise JobDefinitionError(
                    f"periodic job {job.name!r}: a tick calls its handler with no arguments, "
                    f"but it takes {job.describe_parameters()} ({problem}); give its "
                    "parameters defaults"
                )
            self._register(job)
            self.periodics.append(Periodic(job, sched))
            return job

        return declare

    def sharded(
        self,
        *,
        shards: int,
        name: str | None = None,
        queue: str | None = None,
        retries: int = DEFAULT_RETRIES,
        backoff: Backoff = sidekiq_backoff,
        keep_result: float | None = None,
    ) -> Callable[[Callable[[int, int, Any], Any]], ShardedJob]:
        """Declare a sharded job: ``handler(shard, shards, cursor) -> next cursor or None``.

        See :class:`ShardedJob`; ``await job.start(run)`` enqueues one job per shard.
        """

        def declare(f: Callable[[int, int, Any], Any]) -> ShardedJob:
            sharded = ShardedJob(
                self, f, shards=shards, name=name, queue=queue, retries=retries,
                backoff=backoff, keep_result=SHARD_KEEP if keep_result is None else keep_result,
            )  # fmt: skip
            self._register(sharded.job)
            self.sharded_jobs[sharded.name] = sharded
            return sharded

        return declare

    def _register(self, job: JobType[P, T]) -> JobType[P, T]:
        other = self.jobs.get(job.name)
        if other is not None and other.fn is not job.fn:
            raise JobDefinitionError(
                f"job name {job.name!r} is declared twice on {self!r} (by {other.fn!r} and "
                f"{job.fn!r}); pass name= to one of them"
            )
        self.jobs[job.name] = job
        return job

    # -- enqueuing -------------------------------------------------------------------

    async def enqueue_many(
        self, calls: Iterable[JobCall], *, connection: Any = None
    ) -> list[Handle]:
        """Enqueue many jobs in one round trip; all or none (a bad argument enqueues nothing).

        ``connection``: your own connection to the store's database (a psycopg
        connection for PostgreSQL, a ``sqlite3`` one on the same file): the jobs
        are written in its open transaction and exist only if it commits.
        """
        now = _clock.now()
        given = list(calls)
        connection = _joined(given, connection)
        envelopes = [self._envelope(call, now) for call in given]
        if envelopes:
            try:
                if connection is None:  # stores of older code may not take the keyword
                    await self.backend.push(envelopes, now)
                else:
                    await self.backend.push(envelopes, now, connection=connection)
            except (ConfigError, TextError) as error:
                raise _named(error, given, envelopes) from None
        return [Handle(self, e.id, e.queue) for e in envelopes]

    def enqueue_many_sync(
        self, calls: Iterable[JobCall], *, connection: Any = None
    ) -> list[Handle]:
        """:meth:`enqueue_many` for code without an event loop (web views, scripts)."""
        now = _clock.now()
        given = list(calls)
        connection = _joined(given, connection)
        envelopes = [self._envelope(call, now) for call in given]
        if envelopes:
            try:
                if connection is None:
                    self.backend.push_sync(envelopes, now)
                else:
                    self.backend.push_sync(envelopes, now, connection=connection)
            except (ConfigError, TextError) as error:
                raise _named(error, given, envelopes) from None
        return [Handle(self, e.id, e.queue) for e in envelopes]

    def _envelope(self, call: JobCall, now: float) -> Envelope:
        # Checked here, not in the worker: a call that cannot bind would otherwise
        # be retried for weeks before anyone saw its TypeError.
        call.job.check_arguments(call)
        message = call.message(now)
        key = call.job.order_key(call)
        self._announce(message)  # before encoding: a hook may write headers (a trace context)
        return Envelope(
            message.id, message.queue, encode(message, self.serializer), call.due(now), key=key
        )

    def _announce(self, message: Message) -> None:
        """Tell the hooks a job is being enqueued (every path that enqueues calls this)."""
        if self.hooks:
            event = JobEvent(
                message.id, message.job, message.queue, 0, "enqueued", headers=message.headers
            )
            emit(self.hooks, "job_enqueued", event)

    def handle(self, job_id: str) -> Handle:
        """A handle for a job enqueued earlier (e.g. by another process).

        Raises :class:`TextError` for an id no store can keep (not a str, a NUL
        character, a lone surrogate): no job has it, and reading it failed with each
        store's own error (psycopg's DataError, a UnicodeEncodeError) or said unknown.
        """
        where = f"queue.handle({batchy.short_repr(job_id)})"
        check_lookup(job_id, "job id", where, "pass the id that enqueue's handle had (handle.id)")
        return Handle(self, job_id, "")

    def check_runnable(self, who: str) -> None:
        """Raise :class:`ConfigError` if a worker of this queue could run no job type."""
        if not self.jobs:
            # Jobs are often declared in other modules than the queue: a worker of a queue
            # whose modules were not imported would send each job it claimed to the dead set.
            raise ConfigError(
                f"{who}: the queue on {self.backend.describe()} declares no job types, so "
                "this worker could run none (each job it claimed would go to the dead set as "
                "unknown); import the modules that declare them (@queue.job) before it runs"
            )

    # -- operating -------------------------------------------------------------------

    async def info(self) -> Info:
        """Per-queue counts, dead jobs and live workers (what ``batchy info`` prints)."""
        return await self.backend.info(_clock.now())

    async def dead_jobs(self, limit: int = 100) -> list[DeadJob]:
        """The most recent dead jobs, newest first."""
        return await self.backend.dead_jobs(limit)

    async def retry_dead(self, ids: Iterable[str] | None = None) -> int:
        """Put dead jobs (all when ``ids`` is None) back on their queues for one more run.

        An id that is not in the dead set raises :class:`JobNotFound` (or
        :class:`JobStateError`), and none of the jobs moves.
        """
        return await self.admin.retry_dead(None if ids is None else list(ids))

    async def delete_dead(self, ids: Iterable[str] | None = None) -> int:
        """Delete dead jobs (all when ``ids`` is None); unknown ids raise, and nothing goes."""
        return await self.admin.delete_dead(None if ids is None else list(ids))

    async def close(self) -> None:
        """Close the store's connections."""
        await self.backend.close()


def _jobs(calls: list[JobCall], envelopes: list[Envelope] | None = None) -> str:
    if len(calls) == 1:
        named = f"job {calls[0].job.name!r}"
        return f"{named} (id {envelopes[0].id})" if envelopes else named
    names = sorted({call.job.name for call in calls})
    return f"{len(calls)} jobs ({', '.join(repr(n) for n in names)})"


def _named(error: E, calls: list[JobCall], envelopes: list[Envelope]) -> E:
    """A copy of ``error`` (its type and traceback kept) with the jobs named at its front.

    A copy: the store may raise one error to every caller waiting on the same
    thing (its schema check), and each names its own jobs.
    """
    named = copy.copy(error)
    named.args = (f"cannot enqueue {_jobs(calls, envelopes)}: {error}", *error.args[1:])
    return named.with_traceback(error.__traceback__)


def _joined(calls: list[JobCall], connection: Any) -> Any:
    """The one connection whose transaction ``calls`` join (``connection=`` or their own).

    A batch is all or none, so it joins one transaction or none: calls that carry
    different connections, or some one and some none, are refused rather than
    guessed at (a job meant to commit on its own would die with a rollback).
    """
    carried = [call.connection for call in calls]
    if connection is None and all(c is None for c in carried):
        return None
    chosen = connection if connection is not None else next(c for c in carried if c is not None)
    if any(c is not None and c is not chosen for c in carried) or (
        connection is None and any(c is None for c in carried)
    ):
        raise ConfigError(
            f"cannot enqueue {_jobs(calls)} together: their calls carry different "
            "connections (options(connection=...)), or some carry one and some none, and "
            "a batch joins one transaction or none; pass connection= to enqueue_many for "
            "all of them, or enqueue each group on its own; nothing was enqueued"
        )
    return chosen
