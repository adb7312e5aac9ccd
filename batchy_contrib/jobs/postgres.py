"""The PostgreSQL store of :mod:`batchy.jobs`: workers on many machines, a step one function call.

Tables live in a schema of their own (``schema=``, default ``batchy``), created
on first use and versioned (:mod:`batchy_contrib.jobs._postgres_schema`); the SQL is
in :mod:`batchy_contrib.jobs._postgres_sql`. A job is a row of ``jobs``: waiting
(``state 0``, claimable once ``due`` has passed), running (``state 1``, with an
``owner``, a ``lease`` expiry and a lease ``token``) or waiting behind the head
of its ordering key (``state 2``). A claim never deletes a row, so a worker that
dies leaves its jobs running until their lease runs out, and the next ``cycle``
of any worker gives them back.

Each step is one call of a PL/pgSQL function, so one round trip and one
transaction: ``cycle`` applies the outcomes whose token still holds (all the
``done`` ones in one ``DELETE``), gives back expired leases, and claims with
``FOR UPDATE SKIP LOCKED`` (concurrent workers skip each other's rows instead
of waiting for them, and never claim a row twice). Every time is the server's
``clock_timestamp()``; the caller's ``now`` only turns due times into offsets.

Wake-ups are ``LISTEN``/``NOTIFY`` (:mod:`batchy_contrib.jobs._postgres_listen`): a
push notifies on commit, an idle worker waits on its process's one listening
connection, and also for the next due time or lease expiry of its queues.

Transactional enqueue: :meth:`PostgresBackend.push` with ``connection=`` (an
application's psycopg connection) writes the jobs in that connection's open
transaction: a rollback leaves no job; a commit sends the wake-up, and the
worker then sees every row the transaction wrote.

::

    from batchy_contrib.jobs.postgres import PostgresBackend
    queue = batchy.jobs.Queue(PostgresBackend("postgresql://app@db/app"))
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from .._extras import extra

with extra(__name__, "'batchy[postgres]'", "psycopg", "psycopg_pool"):
    import psycopg
    from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from batchy.jobs import (
    DEAD_MAX,
    DEAD_MAX_AGE,
    Backend,
    Claimed,
    Claims,
    ConfigError,
    Info,
    JobStatus,
    KeyInfo,
    Outcome,
    WorkerInfo,
)

from . import _postgres_counts as _counts
from . import _postgres_read as _read
from . import _postgres_runs as _runs
from ._locations import check_postgres_dsn
from ._postgres_admin import PostgresOperating
from ._postgres_later import PutOff
from ._postgres_listen import Listener
from ._postgres_pools import Reach, async_pool, connect_async
from ._postgres_push import OPENING, PUSH, PUSH_ONE, PostgresPushing, writable
from ._postgres_schema import MigrationTimeout, Names, SchemaVersionError, ensure_async
from ._postgres_sql import VERSION

__all__ = ["MigrationTimeout", "PostgresBackend", "SchemaVersionError"]

_CYCLE = "SELECT * FROM {s}.cycle(%s::jsonb, %s::text[], %s, %s, %s, %s, %s, %s, %s)"

# Compact, no NaN, as the payloads; and no search for cycles, which the rows made
# below (lists of strings and numbers) cannot hold: a tenth of the encoding's time.
_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False, check_circular=False).encode


def _outcomes_json(outcomes: Sequence[Outcome], now: float) -> str:
    """The cycle's outcomes parameter: one JSON array of each outcome's fields."""
    rows = [
        # Only a retry's due counts, sent as an offset the function adds to its clock.
        [o.kind, o.id, o.token, o.queue, o.payload, o.due - now if o.kind == "retry" else 0.0,
         o.result, o.keep, o.reason, o.traceback]
        for o in outcomes
    ]  # fmt: skip
    text = _dumps(rows)
    if "\\u0000" in text:
        # PostgreSQL text holds no NUL character, and an error message may (a
        # handler's exception): such a character is kept as U+FFFD, or the cycle
        # would fail for good and the worker hand in no outcome again.
        text = _dumps([[_no_nul(v) for v in row] for row in rows])
    return text


def _no_nul(value: object) -> object:
    return value.replace("\x00", "\ufffd") if isinstance(value, str) else value


# A cycle that changes no job: one release outcome for an id no job can have.
_WARM: tuple[object, ...] = (_outcomes_json([Outcome("\x01warm-up", "release")], 0.0), [])
_WARM += (0, "", 0.0, DEAD_MAX, DEAD_MAX_AGE, 0, False)


class PostgresBackend(PostgresPushing, PostgresOperating, Backend):
    """Jobs in PostgreSQL (psycopg 3, a connection pool); any number of workers on any machines.

    ``dsn`` is a libpq connection string or URL. ``schema`` holds the store's
    tables (one per app or environment). ``pool_size`` (at least 2) is the
    process's connections; outcomes waiting for an ordering key that an
    application's transaction holds use at most half. ``prune_batch`` caps the expired
    results and unique keys one cycle deletes (at most every ``prune_every``
    seconds per process): finished work leaves in small batches, never one
    long delete.
    """

    def __init__(
        self,
        dsn: str = "postgresql://localhost/postgres",
        *,
        schema: str = "batchy",
        pool_size: int = 10,
        dead_max: int = DEAD_MAX,
        dead_max_age: float = DEAD_MAX_AGE,
        prune_batch: int = 1000,
        prune_every: float = 5.0,
    ) -> None:
        self.names = Names(schema)
        check_postgres_dsn(dsn)
        self.dsn = dsn
        self.schema = schema
        if type(pool_size) is not int or pool_size < 2:
            raise ConfigError(
                f"PostgresBackend pool_size={pool_size!r} must be an int >= 2: a worker's "
                "turns, heartbeats and hand-ins of outcomes waiting for an ordering key "
                "each need a connection at times, and one would make them wait in turn; "
                "the default is 10"
            )
        self.pool_size = pool_size
        self.dead_max = dead_max
        self.dead_max_age = dead_max_age
        self.prune_batch = prune_batch
        self.prune_every = prune_every
        self._pool: AsyncConnectionPool[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]] | None = None
        self._listener: Listener | None = None
        self._due: dict[str, tuple[float, int]] = {}  # worker -> (loop time due, epoch)
        self._pruned = -math.inf
        self._own: set[int] = set()  # server pids of the pool's connections
        self._cycling = asyncio.Lock()  # made again for each event loop (see pool())
        self._sync: ConnectionPool[Any] | None = None  # push_sync's connections
        self._sync_lock = threading.Lock()
        self._schema_ready = False
        self._database: str | None = None  # the database's name, once connected
        self._server: str | None = None  # and its server's identity (see _postgres_push)
        self._vouched: weakref.WeakSet[Any] = weakref.WeakSet()
        self._reach = Reach(self.describe())  # why the last connect failed, if it did
        self._queues: set[str] = set()  # queue names noted by this process
        # Outcomes whose key a transaction held; their hand-ins keep half the pool free.
        self._put_off = PutOff(self._hand_in, self.pool_size // 2)
        self._sql = {
            "push": self.names.sql(PUSH),
            "push_one": self.names.sql(PUSH_ONE),
            "cycle": self.names.sql(_CYCLE),
        }

    def __repr__(self) -> str:
        return f"<PostgresBackend schema={self.schema!r}>"

    def describe(self) -> str:
        return f"PostgreSQL {self.redact(self.dsn)} schema {self.schema!r}"

    # -- connections -----------------------------------------------------------------

    def connect_error(self) -> str | None:
        # The pools retry a refused connect on their own, and a call waiting for a
        # connection hears nothing of it: the worker asks here when one did not
        # answer in time.
        return self._reach.error

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await connect_async(self.dsn)

    async def _configure(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._own.add(conn.info.backend_pid)
        if self._schema_ready:
            await self._warm(conn)

    async def _warm(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Run the cycle's paths once (an outcome no job has, no claim), changing nothing.

        PL/pgSQL plans a statement on its first run in each session (ms): now,
        not in the first real cycle of this connection. Rolled back, as a cycle
        also hands back expired leases: a read-only ``batchy info`` or dashboard
        would otherwise change the store, and never show a key stalled by a
        dead worker. The plans stay with the session.
        """
        async with conn.transaction(force_rollback=True):
            await conn.execute(self._sql["cycle"], _WARM)

    async def pool(self) -> AsyncConnectionPool[Any]:
        """The connection pool of this event loop, opened (and the schema made) on first use."""
        loop = asyncio.get_running_loop()
        if self._pool is not None and self._loop is loop:
            return self._pool
        # A pool belongs to the loop that opened it (asyncio.run() twice, tests): a
        # new loop gets a new pool and listener. Tasks that ask at once share one opening.
        if self._opening is None or self._opening[0] is not loop:
            self._opening = (loop, asyncio.ensure_future(self._open()))
        opening = self._opening[1]
        pool: AsyncConnectionPool[Any] = await asyncio.shield(opening)
        if self._opening is not None and self._opening[1] is opening:
            self._pool, self._loop, self._listener, self._opening = pool, loop, None, None
            self._cycling = asyncio.Lock()
            self._put_off.new_loop()
        return pool

    async def _open(self) -> AsyncConnectionPool[Any]:
        pool = async_pool(self.dsn, self._reach, self.pool_size, self._configure)
        try:
            try:
                first = await self._connect()
            except psycopg.OperationalError as error:
                raise self._reach.refused(error) from error
            async with first as conn:
                self._database = conn.info.dbname
                self._server = writable(self, await (await conn.execute(OPENING)).fetchone())
                if not self._schema_ready:
                    await ensure_async(conn, self.names)
                    self._schema_ready = True
                # Once here, where an error is raised: in the pool's configure
                # it is only logged, and the pool retries until its timeout.
                await self._warm(conn)
            await pool.open(wait=True)
        except BaseException:
            await pool.close()
            self._opening = None
            raise
        return pool

    async def migrate(self) -> str:
        """Create the schema or bring it to this release's version (done on first use anyway).

        Run it at deploy time (``batchy migrate app.jobs:queue``), as a role that may
        create and alter the store's tables; it says the version the schema is at."""
        await self.pool()
        return f"job schema {self.schema!r} is at version {VERSION}, this release's"

    async def _one(self, query: str, params: Sequence[Any] = ()) -> Any:
        async with (await self.pool()).connection() as conn:
            row = await (await conn.execute(query, params)).fetchone()
        return None if row is None else row[0]

    async def _all(self, query: str, params: Sequence[Any] = ()) -> list[Any]:
        async with (await self.pool()).connection() as conn:
            rows: list[Any] = await (await conn.execute(query, params)).fetchall()
        return rows

    # -- writing ---------------------------------------------------------------------

    async def cycle(
        self,
        outcomes: Sequence[Outcome],
        queues: Sequence[str],
        limit: int,
        worker: str,
        lease: float,
        now: float,
    ) -> Claims:
        given = self.screen_outcomes(outcomes)
        loop = asyncio.get_running_loop()
        prune = 0
        if loop.time() - self._pruned >= self.prune_every:
            self._pruned, prune = loop.time(), self.prune_batch
        params = (
            _outcomes_json(given, now),
            list(queues),
            limit,
            worker,
            lease,
            self.dead_max,
            self.dead_max_age,
            prune,
            False,  # a key held by an open transaction puts its outcomes off (_put_off)
        )
        # One process's cycles go to the server one at a time, in call order (as
        # over the Redis store's one connection): whoever asks first claims first,
        # rather than whichever connection happens to be quicker.
        # A worker listens before its first look at the store: nothing pushed
        # after that look goes unheard.
        listener = await self._listening()
        async with self._cycling:
            rows = await self._all(self._sql["cycle"], params)
        # One pass over the rows, by kind (see the cycle function in _postgres_cycle).
        claims, more, later = Claims(), [], set()
        for kind, i, q, p, t in rows:
            if kind == "c":
                claims.append(Claimed(i, q, p, t))
            elif kind == "r":
                claims.refused.append(i)
            elif kind == "x":
                claims.cancel.append((i, t))
            elif kind == "w":
                later.add(i)
            elif kind == "m":
                more.append(q)
        if more:  # no room for all of their ready jobs: their wake-up goes on
            listener.pass_on(more)
        if later:
            self._put_off.add(worker, [o for o in given if o.id in later], lease)
        return claims

    async def _hand_in(self, worker: str, outcomes: list[Outcome], wait: float) -> bool:
        """Put-off outcomes in, waiting up to ``wait`` s for their keys (p_wait), claiming
        nothing; false if the keys were still held then (nothing applied).

        Outside the process's turn order: it claims nothing, and may wait."""
        text = _outcomes_json(outcomes, time.time())
        params: tuple[object, ...] = (
            text,
            [],
            0,
            worker,
            0.0,
            self.dead_max,
            self.dead_max_age,
            0,
            True,
        )
        async with (await self.pool()).connection() as conn:
            try:
                async with conn.transaction():
                    # The wait for the keys' locks, in their fair queue, ends after
                    # `wait` (lock_timeout), so the connection goes back to the pool.
                    # A statement_timeout of the role or database would cut the wait
                    # short (QueryCanceled): this statement's bound is the lock's.
                    timeout = f"{max(1, round(wait * 1000))}ms"
                    await conn.execute(
                        "SELECT set_config('lock_timeout', %s, true), "
                        "set_config('statement_timeout', %s, true)",
                        (timeout, f"{round(wait * 1000) + 30_000}ms"),
                    )
                    await conn.execute(self._sql["cycle"], params)
            except psycopg.errors.LockNotAvailable:
                return False
        return True

    async def heartbeat(
        self, worker: WorkerInfo, held: Sequence[tuple[str, str]], lease: float, now: float
    ) -> list[str]:
        claims = [*held, *self._put_off.claims(worker.id)]
        rows = await self._all(
            self.names.sql("SELECT * FROM {s}.heartbeat(%s, %s, %s, %s::text[], %s::text[])"),
            (worker.id, worker.to_json(), lease, [i for i, _ in claims], [t for _, t in claims]),
        )
        # Pair by pair: a call may name a job twice, the live claim and an ended one.
        lost = {(i, t) for i, t in rows}
        self._put_off.lost(worker.id, [i for i, _ in lost])
        return [i for i, t in held if (i, t) in lost]

    async def save_progress(
        self, job_id: str, token: str, payload: str, lease: float, now: float
    ) -> bool:
        saved = await self._one(
            self.names.sql(
                "UPDATE {s}.jobs SET payload = %s, lease = {s}.clock() + %s "
                "WHERE id = %s AND token = %s RETURNING 1"  # by token: see _postgres_cycle
            ),
            (payload, lease, job_id, token),
        )
        return saved is not None

    # -- waiting ---------------------------------------------------------------------

    async def _listening(self) -> Listener:
        """This loop's listener; the first call waits (a few seconds at most) until it listens."""
        await self.pool()
        listener = self._listener
        if listener is None:
            listener = self._listener = Listener(self._connect, self.names.channel)
            listener.own = self._own
            listener.start()
        if not listener.ever:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(listener.ready.wait(), 5.0)
        return listener

    async def wait_for_work(self, worker: str, queues: Sequence[str], timeout: float) -> None:
        listener = await self._listening()
        if listener.take(queues):
            return  # news that came while this worker was busy: look now
        loop = asyncio.get_running_loop()
        # The next due time (on the loop's clock) is read again only when it may
        # have changed: at first, after a 'd' notification or a reconnect (the
        # epoch moved), or once it passed.
        cached = self._due.get(worker)
        if cached is None or cached[1] != listener.epoch or cached[0] <= loop.time():
            epoch = listener.epoch
            due_in = await self._one(
                self.names.sql("SELECT {s}.next_due(%s::text[])"), (list(queues),)
            )
            due_at = math.inf if due_in is None else loop.time() + max(due_in, 0.0)
            cached = self._due[worker] = (due_at, epoch)
        wait = min(timeout, cached[0] - loop.time())
        if wait <= 0:
            return  # due already: the next cycle moves it
        if not await listener.wait(queues, wait) and wait >= timeout:
            self._due.pop(worker, None)  # a whole poll without news: read it again next time

    async def forget_worker(self, worker_id: str) -> None:
        self._due.pop(worker_id, None)
        await self._put_off.settle(worker_id)  # its last outcomes: in before it goes
        await self._one(
            self.names.sql("DELETE FROM {s}.workers WHERE id = %s RETURNING 1"), (worker_id,)
        )

    # -- reading ---------------------------------------------------------------------

    async def keys(self, now: float, limit: int = 10) -> tuple[list[KeyInfo], list[KeyInfo]]:
        async with _read.indexed(await self.pool()) as conn:
            return self.rank_keys(await _read.keys(conn, self.names, now), limit)

    async def status(self, job_id: str, now: float) -> JobStatus:
        return (await self.statuses([job_id], now))[0]

    async def statuses(self, job_ids: Sequence[str], now: float) -> list[JobStatus]:
        if not job_ids:
            return []  # (no round trip for nothing)
        async with _read.by_id(await self.pool()) as conn:
            return await _read.statuses(conn, self.names, job_ids)

    async def info(self, now: float) -> Info:
        async with (await self.pool()).connection() as conn:
            return await _read.info(conn, self.names)

    async def add_counts(self, counts: Mapping[tuple[int, str], int], now: float) -> None:
        await _counts.add_counts(await self.pool(), self.names, counts, now)

    async def read_counts(self, since: int, now: float) -> dict[tuple[int, str], int]:
        return await _counts.read_counts(await self.pool(), self.names, since)

    async def note_run(self, name: str, run: str, now: float, keep: float) -> None:
        await _runs.note_run(await self.pool(), self.names, name, run, now, keep)

    async def runs(
        self, name: str, now: float, keep: float, limit: int = 50
    ) -> list[tuple[str, float]]:
        return await _runs.runs(await self.pool(), self.names, name, now, keep, limit)

    async def run_started(self, name: str, run: str) -> float | None:
        return await _runs.run_started(await self.pool(), self.names, name, run)

    def unreachable(self, error: BaseException) -> bool:
        # A failed connection is the bare OperationalError (its subclasses carry a
        # server's SQLSTATE: a statement failed); a pool that could get none, PoolTimeout.
        return type(error) is psycopg.OperationalError or isinstance(error, PoolTimeout)

    async def close(self) -> None:
        self._put_off.cancel()
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        if self._pool is not None:
            if self._loop is asyncio.get_running_loop():
                await self._pool.close()
            self._pool = None
        with self._sync_lock:
            if self._sync is not None:
                self._sync.close()
                self._sync = None
