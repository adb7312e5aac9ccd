"""SQLite loaders, the embedded default: the same factories as MySQL, on the standard library.

::

    from batchy_contrib import sqlite

    db = sqlite.Database("blog.db")
    users_by_id = db.one("users")
    comments_by_post = db.many("comments", "post_id", order_by="id")

sqlite3 blocks, so every statement runs on the database's own worker threads,
never on the event loop: while SQLite works, other batches of the round (an
HTTP call, memcached) go on. Each worker thread owns one connection, so a
connection is never used by two threads or coroutines at once. An in-memory
database lives in one connection, so it gets exactly one worker.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from batchy import LoaderError, UsageError

from ._source import DataSourceError
from ._sql import Dialect, Row, SQLDatabase, identifier

__all__ = ["DataSourceError", "Database", "LoaderError", "identifier"]

SQLITE = Dialect("sqlite", '"', "?")


def _param_limit() -> int:
    conn = sqlite3.connect(":memory:")
    try:
        return conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    finally:
        conn.close()


class Database(SQLDatabase):
    """Loader factories (:meth:`one`, :meth:`many`, :meth:`query`) over an SQLite file.

    ``threads`` worker threads (one connection each) run the statements;
    ``trace`` is called with the text of every statement SQLite runs (its
    ``set_trace_callback``), which is how the blog example counts queries.
    Statements autocommit.
    """

    dialect = SQLITE
    kind = "SQLite"
    #: This SQLite's limit on bound parameters per statement (999 on old builds,
    #: 32,766 since 3.32), capped: one statement per round for any usual page.
    default_batch_size = min(_param_limit(), 10_000)

    def __init__(
        self,
        path: str = ":memory:",
        *,
        threads: int = 4,
        trace: Callable[[str], object] | None = None,
        timeout: float | None = 30.0,
    ) -> None:
        if type(threads) is not int or threads < 1:
            raise UsageError(f"sqlite.Database threads= must be a positive int, got {threads!r}")
        if path == ":memory:" or path.startswith("file::memory:"):
            threads = 1  # every connection to :memory: would be a different, empty database
        super().__init__(path, timeout=timeout)
        self.path = path
        self.trace = trace
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="batchy-sqlite")
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<batchy_contrib.sqlite.Database {self.path}>"

    # -- the worker threads ---------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            # check_same_thread=False only so close() can close it from another
            # thread; statements run on this worker thread alone.
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            if self.trace is not None:
                conn.set_trace_callback(self.trace)
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    def _run(self, sql: str, params: Sequence[Any]) -> tuple[list[Row], int]:
        cur = self._conn().execute(sql, params)
        if cur.description is None:
            return [], cur.rowcount
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()], cur.rowcount

    async def _call(self, sql: str, params: Sequence[Any]) -> tuple[list[Row], int]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._run, sql, params)

    # -- SQLDatabase ----------------------------------------------------------------

    async def _rows(self, sql: str, params: Sequence[Any]) -> list[Row]:
        return (await self._call(sql, list(params)))[0]

    def _connection_lost(self, error: BaseException) -> bool:
        # An SQLite "server" cannot go away; a file that cannot be opened can.
        return isinstance(error, sqlite3.OperationalError) and "unable to open" in str(error)

    # -- writes and lifecycle -------------------------------------------------------

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one write statement; return the number of affected rows."""
        return (await self._call(sql, list(params)))[1]

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """Run one write statement for many parameter rows, in one transaction."""

        def run() -> int:
            conn = self._conn()
            with conn:  # one transaction: thousands of rows in milliseconds
                conn.execute("BEGIN")
                return conn.executemany(sql, [list(r) for r in rows]).rowcount

        return await asyncio.get_running_loop().run_in_executor(self._executor, run)

    async def executescript(self, script: str) -> None:
        """Run several statements (a schema file)."""

        def run() -> None:
            self._conn().executescript(script)

        await asyncio.get_running_loop().run_in_executor(self._executor, run)

    async def close(self) -> None:
        """Close every connection and stop the worker threads (async, like MySQL's)."""
        self.close_now()

    def close_now(self) -> None:
        """:meth:`close` for code with no event loop."""
        self._executor.shutdown(wait=True)
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()
