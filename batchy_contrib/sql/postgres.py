"""PostgreSQL loaders over a psycopg 3 pool: one row per key, all rows per key, your own query.

::

    from batchy_contrib.sql import postgres

    db = postgres.Database.from_url("postgresql://app@127.0.0.1:5432/app")  # at import time
    users_by_id = db.one("users")   # SELECT t.* FROM "users" AS t WHERE t."id" = ANY(%s)
    comments_by_post = db.many("comments", "post_id", order_by="id")

The keys of a batch go as **one** array parameter, so the statement is the
same short text for 1 key or 50,000 (psycopg prepares it once); the server
reads each key as a value of the key column and matches rows to keys by their
positions in the array (:mod:`._build`, :mod:`._postgres_keys`), so a
``citext`` or nondeterministic-collation column compares as the server says.

:meth:`Database.from_url` connects lazily: one pool per event loop, opened by
the first call in that loop and closed when the loop shuts down
(:mod:`._loops`), so the same module-level loaders serve an ASGI server,
``batchy.run`` per request in Flask or Django, a worker and tests. ``await
connect(url)`` opens one pool now, in the running loop, and only that loop may
use it.

Each batch call takes one connection from the pool for exactly one statement
and gives it back, so the batches of one round run in parallel on as many
connections. A connection left mid-statement (lost server, cancellation the
server did not confirm) is closed instead of going back to the pool. The pools
are batchy's own, without background tasks (:mod:`._postgres_pools` says why);
``Database(pool)`` also takes a :class:`psycopg_pool.AsyncConnectionPool`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import decimal
import inspect
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from .._extras import extra

with extra(__name__, "'batchy[postgres]'", "psycopg", "psycopg_pool"):
    import psycopg
    from psycopg.adapt import PyFormat
    from psycopg.pq import TransactionStatus
    from psycopg.rows import dict_row
    from psycopg_pool import PoolClosed, PoolTimeout

from batchy import LoaderError, UsageError, short_repr

from ..errors import (
    ConnectionLostError,
    DataSourceError,
    KeyEncodingError,
    QueryInterruptedError,
    QueryRejectedError,
)
from ._build import POS
from ._core import CONNECTING, Dialect, KeysRejected, Row, SQLDatabase, identifier
from ._errors import CONTAINERS, Kind, pool_wait_hint, refusal
from ._loops import EventLoopError, PerLoop, foreign_loop, running_loop
from ._match import KeyTypeWarning, Match
from ._postgres_keys import client_side, key_array, misread, unencodable, unreadable
from ._postgres_pools import (
    Pool,
    PoolClosedError,
    abandon_pool,
    close_pool,
    open_pool,
    pool_host,
    url_options,
)

__all__ = [
    "ConnectionLostError",
    "DataSourceError",
    "Database",
    "EventLoopError",
    "KeyEncodingError",
    "KeyTypeWarning",
    "LoaderError",
    "QueryInterruptedError",
    "QueryRejectedError",
    "connect",
    "identifier",
]

POSTGRES = Dialect("postgres", '"', "%s", keys_table="array", in_filter=False)

_ACCEPTED = (
    "None, int, float, str, bytes, Decimal, UUID, date, datetime, time, timedelta or another "
    "type psycopg adapts"
)
#: Key types psycopg can dump (looked up once per type).
_DUMPABLE: dict[type, bool] = {}


class Database(SQLDatabase):
    """Loader factories (:meth:`one`, :meth:`many`, :meth:`query`) over psycopg connections.

    Make it with :meth:`from_url` (lazy: a pool per event loop, opened on first
    use) or :func:`connect` (a pool opened now, for the running loop only), or
    wrap a :class:`psycopg_pool.AsyncConnectionPool` you made:
    ``Database(pool)``; its connections must be in autocommit mode (ours are),
    or every ``SELECT`` would come with a ``BEGIN`` and a ``COMMIT``.
    ``timeout`` (seconds) bounds each batch call, connection included.
    """

    dialect = POSTGRES
    kind = "PostgreSQL"
    #: One array parameter has no count limit: 50,000 keys are one short statement.
    default_batch_size = 50_000
    plain_key_types = frozenset(
        {
            int,
            str,
            float,
            bytes,
            type(None),
            decimal.Decimal,
            uuid.UUID,
            datetime.date,
            datetime.datetime,
        }
    )
    killed_hint = (
        "it was cancelled on the server (pg_cancel_backend) or stopped by a time limit "
        "(statement_timeout, lock_timeout). The connection is still good; retry the keys, or "
        "find out what stopped the query."
    )
    timeout_hint = (
        "the statement was cancelled. Check the server, or raise timeout= if the query is slow."
    )
    connect_hint = pool_wait_hint("max_size")
    encode_hint = (
        "Pass a value the driver can encode: text without NUL characters or lone surrogates."
    )

    def __init__(self, pool: Any, *, host: str | None = None, timeout: float | None = 10.0) -> None:
        # from_url passes its PerLoop; anything else is one psycopg pool.
        self._per_loop: PerLoop[Any] | None = pool if isinstance(pool, PerLoop) else None
        if self._per_loop is None and not inspect.iscoroutinefunction(
            getattr(pool, "getconn", None)
        ):
            # A connection (or a blocking pool) failed only at the first loader call,
            # as "failed on PostgreSQL at ? (AttributeError: ... 'getconn')".
            raise UsageError(
                f"postgres.Database() takes a psycopg_pool.AsyncConnectionPool, got "
                f"{type(pool).__name__}: the batches of a round run in parallel, each on a "
                "connection of its own. Use postgres.Database.from_url(url) (a pool per event "
                "loop, opened on first use) or await postgres.connect(url), or wrap an "
                "AsyncConnectionPool(url, kwargs={'autocommit': True})"
            )
        self._fixed: Any = None if self._per_loop is not None else pool
        super().__init__(host or pool_host(self._fixed), timeout=timeout)
        #: The loop a fixed pool belongs to: connect()'s, or the first caller's.
        self._home: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float | None = 10.0,
        **connect_options: Any,
    ) -> Database:
        """A database for ``postgresql://user:password@host:port/db`` that connects on first use.

        Declare it at import time, with its loaders, in sync or async code::

            db = postgres.Database.from_url("postgresql://app@db:5432/app", max_size=10)
            users_by_id = db.one("users")

        Each event loop that uses it gets its own pool of at most ``max_size``
        connections (``min_size`` of them made when it opens), opened by the
        first call in that loop and closed when the loop shuts down: the one
        loop of an ASGI server, each ``batchy.run`` of a Flask view, a test's.
        Nothing connects here, so a server that is down fails the first loader
        call (and the next call tries again). ``connect_options`` go to
        :meth:`psycopg.AsyncConnection.connect` (``prepare_threshold=None``
        behind a pgbouncer in transaction mode); query parameters of the URL
        (``?options=-csearch_path%3Dapp``) to libpq.
        """
        host, options = url_options(
            "postgres.Database.from_url()", url, min_size, max_size, timeout, connect_options
        )

        async def open_here() -> Pool:
            return await open_pool(options)

        pools = PerLoop(f"the PostgreSQL database at {host}", open_here, close_pool, abandon_pool)
        return cls(pools, host=host, timeout=timeout)

    def __repr__(self) -> str:
        return f"<batchy_contrib.sql.postgres.Database {self.host}>"

    @property
    def pool(self) -> Any:
        """The pool calls use in the running loop (from_url: None until the first call)."""
        if self._per_loop is not None:
            return self._per_loop.current()
        return self._fixed

    async def _pool(self) -> Any:
        """The running loop's pool; from_url opens it on first use, a fixed pool must be at home."""
        if self._per_loop is not None:
            pool = self._per_loop.here()
            return pool if pool is not None else await self._per_loop.open_here()
        loop = running_loop(f"the PostgreSQL database at {self.host}")
        home = self._home
        if home is None:
            self._home = loop
        elif home is not loop:
            if home.is_closed() and isinstance(self._fixed, Pool):
                abandon_pool(self._fixed)  # nobody can close it in its loop any more
            raise EventLoopError(foreign_loop(self.host, home, driver="psycopg", module="postgres"))
        return self._fixed

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """One connection of the running loop's pool, for one statement."""
        CONNECTING.set(True)  # a timeout until the connection comes is no slow statement
        pool = await self._pool()
        conn = await pool.getconn()
        CONNECTING.set(False)
        try:
            if not conn.autocommit:
                raise UsageError(
                    f"the psycopg pool for {self.host} serves connections with autocommit off: "
                    "each batch call would send BEGIN and leave a transaction for the pool to "
                    "roll back. Create the pool with kwargs={'autocommit': True} "
                    "(batchy_contrib.sql.postgres.connect does)"
                )
            yield conn
        finally:
            # Anything but idle: lost, or left mid-statement (psycopg cancels a
            # cancelled statement on the server and waits for it, but not always
            # successfully). Its state is unknown, so it must never serve again.
            if conn.info.transaction_status != TransactionStatus.IDLE:
                await conn.close()
            await pool.putconn(conn)

    async def _rows(self, sql: str, params: Sequence[Any], *, repeat: int = 1) -> list[Row]:
        rows, _ = await self._described(sql, list(params) * repeat if repeat > 1 else params)
        return rows

    async def _described(self, sql: str, params: Sequence[Any]) -> tuple[list[Row], Any]:
        """The rows of one statement, and the description of its columns (None: no rows)."""
        async with self._connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await _execute(conn, cur, sql, params)
            if cur.description is None:
                return [], None
            return await cur.fetchall(), cur.description

    async def _key_rows(self, sql: str, keys: list[Any], repeat: int, match: Match) -> list[Row]:
        # One array, whatever the statement (module docstring of _postgres_keys).
        try:
            rows, columns = await self._described(sql, [key_array(keys)])
        except Exception as error:
            if client_side(error):
                bad = unencodable(keys)
                if bad:
                    raise KeysRejected(bad) from error
                # Every key encodes alone: psycopg could not build the statement itself.
                raise UsageError(
                    f"the statement {short_repr(sql)} cannot take its keys "
                    f"({type(error).__name__}: {error}): the placeholder is %s, and a "
                    "literal % is written %%"
                ) from error
            elif isinstance(error, (psycopg.DataError, psycopg.IntegrityError)):
                bad = await unreadable(self._rows, sql, keys)
                if bad:
                    # A key a domain of the column refuses (its CHECK, its NOT NULL)
                    # cannot be in the column: no row, as WHERE col = key says.
                    absent = {i for i, e in bad.items() if isinstance(e, psycopg.IntegrityError)}
                    raise KeysRejected(bad, by_server=True, absent=absent) from error
            raise
        if columns and columns[0].name == POS:
            # Matched by the server: keys it read only in part must not keep their rows.
            oid = next((c.type_code for c in columns if c.name == match.key), 0)
            bad, absent = misread(keys, match.key, oid)
            if bad:
                raise KeysRejected(bad, by_server=True, absent=absent)
        return rows

    def _bind_problem(self, key: Any) -> str | None:
        if key is None:
            return None
        kind = type(key)
        ok = _DUMPABLE.get(kind)
        if ok is None:
            try:
                psycopg.adapters.get_dumper(kind, PyFormat.TEXT)
                ok = not isinstance(key, CONTAINERS)  # psycopg writes lists as arrays
            except psycopg.ProgrammingError:
                ok = False
            _DUMPABLE[kind] = ok
        return None if ok else refusal(key, _ACCEPTED)

    def _classify(self, error: BaseException) -> Kind:
        if self._closed or isinstance(error, (PoolClosed, PoolClosedError)):
            return "closed"
        if isinstance(error, (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable)):
            return "killed"
        if isinstance(error, psycopg.Error):
            state = error.sqlstate
            if state is None:  # the client's own: can't connect, connection closed
                lost = isinstance(error, (psycopg.OperationalError, psycopg.InterfaceError))
                return "lost" if lost else "other"
            # 08: connection exceptions; 57P: terminated by an administrator, shutdown.
            return "lost" if state.startswith(("08", "57P")) else "rejected"
        if isinstance(error, (OSError, PoolTimeout)):
            return "lost"
        return "other"

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one write statement; return the number of affected rows."""
        async with self._connection() as conn, conn.cursor() as cur:
            await _execute(conn, cur, sql, params)
            return int(cur.rowcount)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """Run one write statement for many parameter rows (pipelined by psycopg)."""
        async with self._connection() as conn, conn.cursor() as cur:
            await cur.executemany(sql, [list(r) for r in rows])
            return int(cur.rowcount)

    async def close(self) -> None:
        """Close the pool and its connections.

        From :meth:`from_url`: close the running loop's pool (each loop's pool
        closes with its loop anyway); the next call opens a new one. From
        :func:`connect`: the database is closed for good.
        """
        if self._per_loop is not None:
            await self._per_loop.close_here()
            return
        self._closed = True
        await self._fixed.close()


async def _execute(
    conn: psycopg.AsyncConnection[Any], cur: psycopg.AsyncCursor[Any], sql: str, params: Any
) -> None:
    """``cur.execute``, again once when a table changed under the statement psycopg prepared.

    psycopg prepares a statement on a connection after its fifth run. Once a
    table it reads gains a column or changes a column's type (a migration, on
    another connection), the server refuses that prepared statement for good
    ("cached plan must not change result type"), before running anything: every
    later call on the connection would fail. ``DEALLOCATE ALL`` drops the
    connection's prepared statements, on the server and in psycopg's cache, so
    the statement is planned afresh.

    A prepared statement also keeps the type its parameter was given when it was
    planned: a loader's array, typed as the key column then (``date[]``), no
    longer meets the column once a migration made it ``text`` (CannotCoerce, on
    every call). Planned afresh, the array takes the column's new type; a
    statement that cannot coerce by itself fails again, and that error stands.
    """
    try:
        await cur.execute(sql, params)
    except (psycopg.errors.FeatureNotSupported, psycopg.errors.CannotCoerce) as error:
        prepared = conn.prepare_threshold is not None  # (None: psycopg prepares nothing)
        stale = isinstance(error, psycopg.errors.CannotCoerce) and prepared
        if not stale and "cached plan must not change result type" not in str(error):
            raise
        await conn.execute("DEALLOCATE ALL")
        await cur.execute(sql, params)


async def connect(
    url: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    timeout: float | None = 10.0,
    **connect_options: Any,
) -> Database:
    """A :class:`Database` over a new pool for ``postgresql://user:password@host:port/db``.

    Connections are in autocommit mode; ``connect_options`` go to
    :meth:`psycopg.AsyncConnection.connect`. The ``min_size`` first
    connections are made now, so a server that is down fails this call. The
    pool belongs to the running event loop: a call from any other loop fails
    with :class:`EventLoopError`. For a database declared at import time and
    used from any loop (``batchy.run`` per request), use
    :meth:`Database.from_url`.
    """
    host, options = url_options(
        "postgres.connect()", url, min_size, max_size, timeout, connect_options
    )
    try:
        pool = await open_pool(options)
    except (psycopg.Error, OSError) as error:
        error.add_note(f"batchy_contrib.sql.postgres.connect() could not reach {host}")
        raise
    db = Database(pool, host=host, timeout=timeout)
    db._home = asyncio.get_running_loop()
    return db
