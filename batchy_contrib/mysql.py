"""MySQL / MariaDB loaders over an aiomysql pool: one row per key, all rows per key, your own query.

::

    from batchy_contrib import mysql

    db = await mysql.connect("mysql://root@127.0.0.1:3306/test")
    users_by_id = db.one("users")   # SELECT * FROM `users` WHERE `id` IN (...)
    comments_by_post = db.many("comments", "post_id", order_by="id")

Each batch call takes one connection from the pool for exactly one statement
and gives it back, so a connection is never shared by two coroutines, and the
batches of one round run in parallel on as many connections. A connection that
failed mid-statement (lost server, timeout, cancellation) is closed instead of
going back to the pool, so the pool only ever holds healthy connections.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

import aiomysql
import pymysql

from batchy import LoaderError, UsageError

from ._source import DataSourceError
from ._sql import Dialect, Row, SQLDatabase, identifier

__all__ = ["DataSourceError", "Database", "LoaderError", "connect", "identifier"]

MYSQL = Dialect("mysql", "`", "%s")


class Database(SQLDatabase):
    """Loader factories (:meth:`one`, :meth:`many`, :meth:`query`) over an aiomysql pool.

    The pool must use ``autocommit=True`` (:func:`connect` does): otherwise every
    ``SELECT`` opens a transaction, aiomysql closes the connection when it comes
    back to the pool, and later reads see an old snapshot. ``timeout`` (seconds)
    bounds each batch call, connection included: a server that stops answering
    fails the waiting keys with :class:`DataSourceError` instead of hanging them.
    """

    dialect = MYSQL
    kind = "MySQL"
    #: 1,000 keys make a statement of a few kB, far below max_allowed_packet.
    default_batch_size = 1000

    def __init__(self, pool: Any, *, host: str | None = None, timeout: float | None = 10.0) -> None:
        super().__init__(host or _pool_host(pool), timeout=timeout)
        self.pool = pool
        self._shows: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

    def __repr__(self) -> str:
        return f"<batchy_contrib.mysql.Database {self.host}>"

    async def _rows(self, sql: str, params: Sequence[Any]) -> list[Row]:
        conn = await self.pool.acquire()
        healthy = False
        try:
            if not conn.get_autocommit():
                healthy = True
                raise UsageError(
                    f"the aiomysql pool for {self.host} has autocommit off: each SELECT "
                    "would leave a transaction open, so aiomysql closes the connection on "
                    "release and reads see a stale snapshot. Create the pool with "
                    "autocommit=True (batchy_contrib.mysql.connect does)."
                )
            async with conn.cursor(aiomysql.DictCursor) as cur:
                await cur.execute(sql, list(params) if params else None)
                rows = await cur.fetchall()
            healthy = True
            return list(rows)
        except pymysql.err.MySQLError as error:
            healthy = _server_answered(error)  # a rejected statement leaves the link in sync
            raise
        finally:
            # Not healthy: lost, timed out or cancelled mid-statement. Its protocol
            # state is unknown, so it must never serve another statement.
            if not healthy:
                conn.close()
            self.pool.release(conn)

    def _connection_lost(self, error: BaseException) -> bool:
        if isinstance(error, pymysql.err.MySQLError):
            return not _server_answered(error)
        return isinstance(error, (OSError, EOFError, asyncio.IncompleteReadError))

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one write statement; return the number of affected rows."""
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            return int(await cur.execute(sql, list(params) if params else None))

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """Run one write statement for many parameter rows (one multi-row INSERT)."""
        async with self.pool.acquire() as conn, conn.cursor() as cur:
            return int(await cur.executemany(sql, [list(r) for r in rows]))

    async def questions(self) -> int:
        """Statements received so far on this pool's connections, from the server's counters.

        Reads ``SHOW SESSION STATUS LIKE 'Questions'`` on every connection of the
        pool (its own statement not counted). The difference of two calls is the
        number of statements the server received in between, as long as no
        connection was closed meanwhile. Call it while the pool is idle.
        """
        if not self.pool.maxsize:
            raise UsageError(
                f"questions() reads every connection of the pool for {self.host}, so it needs "
                "a bounded pool; create it with maxsize > 0"
            )
        conns = [await self.pool.acquire() for _ in range(self.pool.maxsize)]
        total = 0
        try:
            for conn in conns:
                async with conn.cursor() as cur:
                    await cur.execute("SHOW SESSION STATUS LIKE 'Questions'")
                    (_, value) = await cur.fetchone()
                # The server counts every SHOW we sent on this connection, this one too.
                shows = self._shows[conn] = self._shows.get(conn, 0) + 1
                total += int(value) - shows
        finally:
            for conn in conns:
                self.pool.release(conn)
        return total

    async def close(self) -> None:
        """Close the pool and wait for its connections to close."""
        self.pool.close()
        await self.pool.wait_closed()


def _server_answered(error: BaseException) -> bool:
    # Server error codes are 1000-1999 and 3000+ (MariaDB 4000+); 2000-2999 are the
    # client's own (can't connect, lost connection), 0 is a broken protocol state.
    code = error.args[0] if error.args and isinstance(error.args[0], int) else 0
    return 1000 <= code < 2000 or code >= 3000


def _pool_host(pool: Any) -> str:
    kwargs = getattr(pool, "_conn_kwargs", None) or {}
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', 3306)}"


async def connect(
    url: str,
    *,
    minsize: int = 1,
    maxsize: int = 10,
    timeout: float | None = 10.0,
    **pool_options: Any,
) -> Database:
    """A :class:`Database` over a new aiomysql pool for ``mysql://user:password@host:port/db``.

    The pool uses ``autocommit=True``; ``pool_options`` go to
    :func:`aiomysql.create_pool`. With ``minsize=0`` no connection is opened
    until the first query, so a server that is down fails the first loader
    call instead of this one.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("mysql", "mariadb") or not parts.hostname:
        raise UsageError(
            f"mysql.connect() takes a URL like 'mysql://user:password@host:3306/database', "
            f"got {url!r}"
        )
    host, port = parts.hostname, parts.port or 3306
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
        "autocommit": True,
        "minsize": minsize,
        "maxsize": maxsize,
        "connect_timeout": timeout or 60,
    }
    if parts.path.strip("/"):
        options["db"] = parts.path.strip("/")
    options.update(pool_options)
    try:
        pool = await aiomysql.create_pool(**options)
    except (pymysql.err.MySQLError, OSError) as error:
        error.add_note(f"batchy_contrib.mysql.connect() could not reach {host}:{port}")
        raise
    return Database(pool, host=f"{host}:{port}", timeout=timeout)
