"""SQLite loaders, the embedded default: the same factories as MySQL, on the standard library.

::

    from batchy_contrib.sql import sqlite

    db = sqlite.Database("blog.db")
    users_by_id = db.one("users")
    comments_by_post = db.many("comments", "post_id", order_by="id")

sqlite3 blocks, so every statement runs on the database's own worker threads,
never on the event loop: while SQLite works, other batches of the round (an
HTTP call, memcached) go on. Each worker thread owns one connection, so a
connection is never used by two threads or coroutines at once. An in-memory
database lives in one connection, so it gets exactly one worker. A statement
whose caller gave up (``timeout``, cancellation) is interrupted, so it does not
hold its worker for the rest of its run.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import sqlite3
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from batchy import LoaderError, UsageError

from ..errors import (
    ConnectionLostError,
    DatabaseOpenError,
    DataSourceError,
    KeyEncodingError,
    QueryInterruptedError,
    QueryRejectedError,
)
from ._core import CONNECTING, Dialect, KeysRejected, Row, SQLDatabase, identifier
from ._errors import Kind, refusal
from ._loops import EventLoopError, running_loop
from ._match import KeyTypeWarning

__all__ = [
    "ConnectionLostError",
    "DataSourceError",
    "Database",
    "DatabaseOpenError",
    "EventLoopError",
    "KeyEncodingError",
    "KeyTypeWarning",
    "LoaderError",
    "QueryInterruptedError",
    "QueryRejectedError",
    "identifier",
]


SQLITE = Dialect("sqlite", '"', "?", keys_table="cte", in_filter=False)

_BINDS = (int, float, str, bytes, bytearray, memoryview)
_ACCEPTED = "None, int, float, str or bytes (or a type given sqlite3.register_adapter)"
#: Primary result codes (sqlite3 error's sqlite_errorcode & 0xFF) and what they mean.
_KINDS: dict[int, Kind] = {5: "busy", 6: "busy", 9: "killed", 14: "cantopen", 26: "notadb"}


# Python 3.12 deprecated sqlite3's own date and datetime adapters (a
# DeprecationWarning for each value bound, and a later release drops them). A
# date is bound as the text they wrote, so a column of such text keeps matching
# on every Python; an adapter the application registered itself still decides.
_DATES = {datetime.date, datetime.datetime}


def _date_text(value: Any) -> Any:
    kind = type(value)
    if kind not in _DATES:
        return value
    adapter = sqlite3.adapters.get((kind, sqlite3.PrepareProtocol))
    if adapter is not None and getattr(adapter, "__module__", None) != "sqlite3.dbapi2":
        return value  # the application's own
    return value.isoformat(" ") if kind is datetime.datetime else value.isoformat()


class _Job:
    """One statement on a worker thread, so a caller that gives up can interrupt it."""

    __slots__ = ("conn", "gone", "lock", "started")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.conn: sqlite3.Connection | None = None  # set while the statement runs
        self.gone = False  # the caller stopped waiting
        self.started = False  # a worker thread took it

    def cancel(self) -> bool:
        """Stop the statement; False if no worker thread had taken it yet (it waited for one)."""
        with self.lock:
            self.gone = True
            if self.conn is not None:
                self.conn.interrupt()  # thread-safe: SQLite's way to stop a running statement
            return self.started


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
    #: A key is one parameter: its position is written into the SQL.
    default_batch_size = min(_param_limit(), 10_000)
    plain_key_types = frozenset({int, str, float, bytes, type(None)})
    killed_hint = (
        "it was interrupted (sqlite3.Connection.interrupt()). Nothing is wrong with the "
        "query; retry the keys."
    )
    timeout_hint = (
        "the statement was interrupted. Raise timeout= if the query is slow, or index the "
        "key column."
    )
    connect_hint = (
        "its worker threads (one connection each) were all busy with other statements, so "
        "this one was never sent. Raise threads= if they are all busy often, or raise timeout=."
    )

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
        self._closed = False
        # A database declared at import time is never closed by hand: close its
        # connections when it is collected or at exit (Python 3.13 warns about
        # unclosed sqlite3 connections). It holds no reference to self.
        self._release = weakref.finalize(self, _release, self._executor, self._conns, self._lock)

    def __repr__(self) -> str:
        return f"<batchy_contrib.sql.sqlite.Database {self.path}>"

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

    def _run(self, sql: str, params: Sequence[Any], job: _Job) -> tuple[list[Row], int]:
        conn = self._conn()
        with job.lock:
            if job.gone:  # waited in the queue past its caller's timeout: skip it
                return [], 0
            job.conn = conn
            job.started = True
        if not _DATES.isdisjoint(map(type, params)):
            params = [_date_text(p) for p in params]
        try:
            try:
                cur = conn.execute(sql, params)
            except Exception as error:
                bad = _unbindable(params) if _maybe_binding(error) else None
                if bad:
                    raise KeysRejected(bad) from error  # nothing ran: SQLite binds first
                raise
            if cur.description is None:
                return [], cur.rowcount
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()], cur.rowcount
        finally:
            with job.lock:
                job.conn = None  # an interrupt now must not hit the next statement

    async def _call(self, sql: str, params: Sequence[Any]) -> tuple[list[Row], int]:
        # Any running loop will do: the worker threads and their connections
        # belong to no loop, so a database made at import time serves them all.
        loop = running_loop(f"the SQLite database at {self.path}")
        job = _Job()
        try:
            return await loop.run_in_executor(self._executor, self._run, sql, params, job)
        except asyncio.CancelledError:
            # Still queued (every worker busy): a timeout now is no slow statement.
            CONNECTING.set(not job.cancel())
            raise

    # -- SQLDatabase ----------------------------------------------------------------

    async def _rows(self, sql: str, params: Sequence[Any], *, repeat: int = 1) -> list[Row]:
        try:
            return (await self._call(sql, list(params) * repeat))[0]
        except KeysRejected as rejected:
            if repeat == 1:
                raise
            raise KeysRejected({i % len(params): e for i, e in rejected.bad.items()}) from None

    def _bind_problem(self, key: Any) -> str | None:
        if key is None or isinstance(key, _BINDS) or type(key) in _DATES:
            return None
        if (type(key), sqlite3.PrepareProtocol) in sqlite3.adapters:
            return None
        if hasattr(type(key), "__conform__"):
            return None
        fix = None
        if isinstance(key, decimal.Decimal):
            fix = (
                "Pass str(key) or float(key) as the column stores it, or register an "
                "adapter once: sqlite3.register_adapter(Decimal, str)."
            )
        return refusal(key, _ACCEPTED, fix)

    def _classify(self, error: BaseException) -> Kind:
        if self._closed or (
            isinstance(error, sqlite3.ProgrammingError) and "closed database" in str(error)
        ):
            return "closed"
        if isinstance(error, sqlite3.Error):
            code = getattr(error, "sqlite_errorcode", None)
            if isinstance(code, int):
                return _KINDS.get(code & 0xFF, "rejected")
            return "rejected"
        return "other"

    # -- writes and lifecycle -------------------------------------------------------

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one write statement; return the number of affected rows."""
        try:
            return (await self._call(sql, list(params)))[1]
        except KeysRejected as rejected:
            raise next(iter(rejected.bad.values())) from None

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
        self._closed = True
        self._executor.shutdown(wait=True)
        self._release()


def _release(
    executor: ThreadPoolExecutor, conns: list[sqlite3.Connection], lock: threading.Lock
) -> None:
    # wait=False: this may run on a worker thread (the last reference dropped
    # there), which cannot wait for itself; no statement is left to run.
    executor.shutdown(wait=False)
    with lock:
        for conn in conns:
            conn.close()
        conns.clear()


def _maybe_binding(error: BaseException) -> bool:
    # Binding fails with ProgrammingError / InterfaceError ("Error binding parameter"),
    # OverflowError, UnicodeEncodeError or whatever an adapter raises; never with
    # OperationalError (no such table, locked) or another DatabaseError (not a database).
    if isinstance(error, (sqlite3.ProgrammingError, sqlite3.InterfaceError)):
        return "closed database" not in str(error)
    return not isinstance(error, sqlite3.Error)


def _unbindable(params: Sequence[Any]) -> dict[int, BaseException]:
    """Which parameters SQLite refuses to bind, tried one by one on a private in-memory database.

    Only after a statement failed: the user's file never sees the probes (nor
    does its trace callback), and adapters are global, so the answer is the same.
    """
    conn = sqlite3.connect(":memory:")  # rare and cheap: no connection to keep open
    bad: dict[int, BaseException] = {}
    try:
        for i, p in enumerate(params):
            try:
                conn.execute("SELECT ?", (p,))
            except Exception as error:
                bad[i] = error
    finally:
        conn.close()
    return bad
