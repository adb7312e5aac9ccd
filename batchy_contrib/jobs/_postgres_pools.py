"""The PostgreSQL store's connection pools: psycopg_pool's, which give up on a server that is down.

psycopg_pool connects in background tasks and tries a refused connect again on
its own; a call waiting for a connection hears nothing of it. While the server
was down (a restart, a crash, a failover) an enqueue waited the pool's whole
timeout (30 s) for a ``PoolTimeout`` that named neither the server nor why. So
each connection here notes whether its connect failed, and why (:class:`Reach`),
and a call whose wait for a connection outlasts :data:`RECONNECT_WITHIN` while
connects fail gives up then, with an error saying where and why; a pool that is
merely busy is waited for as long as before.

Both pools also drop a connection the server ended while it was idle, as it is
taken (a restart ends them all), rather than hand it to a call that would fail.

Every connect of the store is bounded (:data:`CONNECT_WITHIN`, unless the DSN
sets ``connect_timeout``): a server that accepts connections and never answers
(a stopped process, a wrong port behind a proxy) held a first enqueue for
psycopg's default of 130 s. A first connect that fails says which store and
why (:meth:`Reach.refused`), as a call that finds no connection does.

And psycopg_pool logs a warning for every connect that fails, every connection
it discards and every reconnect it gives up on; during an outage each of a
worker's tries (its turns, heartbeats, ticks) starts such connects: a line or two
a second per process, thousands in an hour, where the worker says once that the
store is down and once that it is back, and an enqueue raises its error. For the
store's own pools those lines are kept at DEBUG (:class:`Quiet`); other pools'
are left alone.

And every connection of the store's (:func:`connect_async`, :func:`connect_sync`,
both pools) first sets what its steps rely on (:func:`session`), whatever an
``ALTER ROLE`` or ``ALTER DATABASE ... SET`` of the DBA's says.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from .._pg_idle import server_ended
from ._postgres_sql import RECONNECT_WITHIN

__all__ = [
    "CONNECT_WITHIN",
    "Quiet",
    "Reach",
    "StorePool",
    "StoreSyncPool",
    "async_pool",
    "connect_async",
    "connect_options",
    "connect_sync",
    "session",
    "settled",
    "settled_sync",
    "sync_pool",
]


#: Seconds a connect of the store may take (libpq's ``connect_timeout``: whole
#: seconds) when neither the DSN nor ``PGCONNECT_TIMEOUT`` sets one.
CONNECT_WITHIN = 10

_ENDED = "the server ended this connection while idle"
#: The start of the store's pools' names, as psycopg_pool's log lines show them.
NAME = "batchy-jobs"


def connect_options(dsn: str) -> dict[str, Any]:
    """The options of the store's connections: autocommit, and a connect that gives up."""
    options: dict[str, Any] = {"autocommit": True}
    given = psycopg.conninfo.conninfo_to_dict(dsn)
    if "connect_timeout" not in given and not os.environ.get("PGCONNECT_TIMEOUT"):
        options["connect_timeout"] = CONNECT_WITHIN
    return options


def session(server_version: int) -> str:
    """The settings a connection of the store's takes first, for a server of ``server_version``.

    A role's or database's defaults apply to every session, the store's too, and
    the store's steps were written for PostgreSQL's own:

    - READ COMMITTED. Under SERIALIZABLE or REPEATABLE READ concurrent cycles,
      heartbeats and pushes failed with serialization errors (a worker said the
      store was unreachable, an enqueue raised), and workers creating the schema
      together saw it missing in their snapshot, then found its tables taken.
    - ``search_path`` of the catalog alone: every table of the store's is named
      with its schema, and a function of another schema (``public.unnest(text[])``)
      matches its arguments more closely than the catalog's and would be called.
    - ``extra_float_digits`` above 0: times are float8 seconds, read back as text,
      and at -15 a time of 1.7e9 s read back as 2e9.
    - No ``lock_timeout`` or ``statement_timeout``: the steps bound their own waits
      (an ordering key's, a migration's); a DBA's 10 ms failed commits that queue
      for the server's NOTIFY lock, and 50 ms a busy heartbeat.
    - No idle timeouts: the listening connection is idle by design.

    ``default_transaction_read_only`` is left alone: a database made read-only is
    refused with a message (see ``_postgres_push``), not written behind its back.
    """
    sets = [
        "default_transaction_isolation = 'read committed'",
        "search_path = pg_catalog, pg_temp",
        "extra_float_digits = 3",
        "lock_timeout = 0",
        "statement_timeout = 0",
        "idle_in_transaction_session_timeout = 0",
    ]
    if server_version >= 140000:
        sets.append("idle_session_timeout = 0")  # (new in PostgreSQL 14)
    return "; ".join("SET " + s for s in sets)


async def settled(conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncConnection[Any]:
    """``conn``, its settings set (see :func:`session`); closed if that fails."""
    try:
        await conn.execute(session(conn.info.server_version))
    except BaseException:
        await conn.close()
        raise
    return conn


def settled_sync(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    """:func:`settled` for a blocking connection."""
    try:
        conn.execute(session(conn.info.server_version))
    except BaseException:
        conn.close()
        raise
    return conn


async def connect_async(dsn: str) -> psycopg.AsyncConnection[Any]:
    """An autocommit connection of the store's, its settings set."""
    return await settled(await psycopg.AsyncConnection.connect(dsn, **connect_options(dsn)))


def connect_sync(dsn: str) -> psycopg.Connection[Any]:
    """:func:`connect_async` for a blocking connection."""
    return settled_sync(psycopg.Connection.connect(dsn, **connect_options(dsn)))


class Ours:
    """The store's connections (a base of their classes), for :class:`Quiet` to tell apart."""


class Quiet(logging.Filter):
    """On psycopg_pool's logger: its lines about the store's pools and connections, at DEBUG.

    A filter may change the record it passes on: such a line goes on as a DEBUG
    one, to whoever shows psycopg_pool's DEBUG lines, and to nobody else.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if record.levelno <= logging.DEBUG or not any(map(_ours, args)):
            return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


def _ours(arg: object) -> bool:
    return isinstance(arg, Ours) or (isinstance(arg, str) and arg.startswith(NAME))


def _quiet(name: str) -> str:
    """``name``, for a pool of the store's; psycopg_pool's logger filtered by then."""
    logger = logging.getLogger("psycopg.pool")
    if not any(isinstance(f, Quiet) for f in logger.filters):
        logger.addFilter(Quiet())
    return f"{NAME} {name}"


class Reach:
    """Whether the store's server takes connections: why the last try failed, if it did.

    ``where`` names the store in messages (its location, without a password).
    """

    def __init__(self, where: str) -> None:
        self.where = where
        self.error: str | None = None

    def connected(self, error: BaseException | None) -> None:
        """A connect ended: with ``error``, or (None) a connection."""
        self.error = None if error is None else " ".join(f"{type(error).__name__}: {error}".split())

    def refused(self, error: psycopg.Error) -> psycopg.OperationalError:
        """The error for a first connect that failed: the store, the driver's reason, the fix.

        A bare ``OperationalError``, as psycopg's own, so code that catches that, and
        the store's :meth:`unreachable`, still take it for a store out of reach."""
        self.connected(error)
        return psycopg.OperationalError(
            f"cannot reach {self.where}: {self.error}; this call sent nothing (an enqueue "
            "enqueued nothing), and the next one connects again. Check that the server is "
            "up and that the DSN points at it (host, port, database, user and password)"
        )

    def timed_out(self, waited: float, wait: float) -> None:
        """A call waited ``waited`` of its ``wait`` s for a connection, in vain: raise
        :class:`PoolTimeout` if connects fail, or if its time is up; else it waits on
        (the pool is only busy)."""
        if self.error is not None:
            raise PoolTimeout(
                f"{self.where} gave no connection within {waited:g}s: its last try to "
                f"connect failed ({self.error}). Check that the server is running and "
                "reachable; this call sent nothing (an enqueue enqueued nothing), and the "
                "next one connects again"
            ) from None
        if waited >= wait:
            raise PoolTimeout(f"couldn't get a connection after {wait:.2f} sec") from None


class StorePool(AsyncConnectionPool[Any]):
    """psycopg_pool's pool, whose callers give up on a server that refuses connections."""

    reach: Reach

    async def getconn(self, timeout: float | None = None) -> Any:
        wait = self.timeout if timeout is None else timeout
        first = min(wait, RECONNECT_WITHIN)
        try:
            return await super().getconn(first)
        except PoolTimeout:
            self.reach.timed_out(first, wait)
        return await super().getconn(wait - first)


class StoreSyncPool(ConnectionPool[Any]):
    """:class:`StorePool` for the blocking connections of ``push_sync``."""

    reach: Reach

    def getconn(self, timeout: float | None = None) -> Any:
        wait = self.timeout if timeout is None else timeout
        first = min(wait, RECONNECT_WITHIN)
        try:
            return super().getconn(first)
        except PoolTimeout:
            self.reach.timed_out(first, wait)
        return super().getconn(wait - first)


def async_pool(
    dsn: str,
    reach: Reach,
    max_size: int,
    configure: Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]],
) -> StorePool:
    """The store's pool for one event loop, not open yet."""

    class Noted(Ours, psycopg.AsyncConnection[Any]):
        @classmethod
        async def connect(cls, *args: Any, **kwargs: Any) -> Any:
            try:
                conn = await super().connect(*args, **kwargs)
            except psycopg.Error as error:
                reach.connected(error)
                raise
            reach.connected(None)
            return await settled(conn)

    async def still_open(conn: psycopg.AsyncConnection[Any]) -> None:
        if server_ended(conn):
            await conn.close()  # so the pool drops it (one given back open is served again)
            # A restart ends every idle connection: check the others now, rather
            # than each at its turn, after the pool's back-off (1, 2, 4 s...).
            await pool.check()
            raise psycopg.OperationalError(_ENDED)

    pool = StorePool(
        dsn,
        name=_quiet(reach.where),
        min_size=min(4, max_size),
        max_size=max_size,
        kwargs=connect_options(dsn),
        connection_class=Noted,
        configure=configure,
        check=still_open,
        # The pool's own reconnect waits 1, 2, 4, 8... s between tries, for up to
        # five minutes: after an outage the worker (which retries every few
        # seconds) found no connection for up to that long. Given up after a
        # moment, a connection is made again by the next call that needs one.
        reconnect_timeout=RECONNECT_WITHIN,
        open=False,
    )
    pool.reach = reach
    return pool


def sync_pool(dsn: str, reach: Reach, max_size: int) -> StoreSyncPool:
    """The blocking connections' pool, not open yet."""

    class Noted(Ours, psycopg.Connection[Any]):
        @classmethod
        def connect(cls, *args: Any, **kwargs: Any) -> Any:
            try:
                conn = super().connect(*args, **kwargs)
            except psycopg.Error as error:
                reach.connected(error)
                raise
            reach.connected(None)
            return settled_sync(conn)

    def still_open(conn: psycopg.Connection[Any]) -> None:
        if server_ended(conn):  # a restart, a failover: not handed out
            conn.close()
            raise psycopg.OperationalError(_ENDED)

    pool = StoreSyncPool(
        dsn,
        name=_quiet(f"{reach.where} (blocking)"),
        min_size=1,
        max_size=max_size,
        kwargs=connect_options(dsn),
        connection_class=Noted,
        check=still_open,
        reconnect_timeout=RECONNECT_WITHIN,  # as the store's own pool
        open=False,
    )
    pool.reach = reach
    return pool
