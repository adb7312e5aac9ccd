"""The connection pool of :mod:`batchy_contrib.sql.postgres`: connections made by callers, no task.

Why not psycopg_pool's pool (which ``Database(pool)`` still accepts): it
connects in background tasks, and those tasks catch ``CancelledError`` to keep
the pool consistent. ``asyncio.run`` (so ``batchy.run``, uvicorn) cancels every
task of a loop before closing it and waits for them; a pool connecting at that
moment (growing for a page's second parallel batch, say) swallows the
cancellation and keeps its worker alive, and ``asyncio.run`` waits forever. A
pool per loop, one per ``batchy.run`` in a Flask view, hit it on every request
that needed a second connection. Also, a connection that fails in the
background is logged and retried, so a caller waiting for a server that is
down learns nothing until its timeout.

So :class:`Pool` runs nothing of its own: a caller that finds no idle
connection and room to grow connects, in its own task (a server that is down
fails that call with the reason, at once); otherwise it waits for the next
connection given back. Closing it is closing its connections, which needs no
task either, even after the loop has closed (:func:`abandon_pool`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import traceback
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from batchy import UsageError

from .._pg_idle import server_ended
from ._errors import shown_url, url_parts

__all__ = ["Pool", "abandon_pool", "close_pool", "pool_host", "url_options"]

Conn = psycopg.AsyncConnection[Any]


def _readable(conn: Conn) -> str:
    """What ``conn`` must set for psycopg to read dates and intervals: nothing, usually.

    psycopg parses them only in the ISO and postgres styles, and a role's or
    database's ``DateStyle`` of 'SQL, DMY' (ALTER ROLE ... SET) failed every batch
    with a timestamptz column. The server reports both styles as the connection
    starts, so the usual connection sends nothing more (a pool per request, as
    ``batchy.run`` in a Flask view makes, connects once per request).
    """
    sets = []
    if not (conn.info.parameter_status("DateStyle") or "ISO").startswith("ISO"):
        sets.append("SET DateStyle = 'ISO'")
    if (conn.info.parameter_status("IntervalStyle") or "postgres") != "postgres":
        sets.append("SET IntervalStyle = 'postgres'")
    return "; ".join(sets)


class PoolClosedError(RuntimeError):
    """The pool was closed: no connection is handed out any more."""


class Pool:
    """At most ``max_size`` psycopg connections in autocommit mode, made on demand by callers.

    Same calls as :class:`psycopg_pool.AsyncConnectionPool`'s: ``getconn()``,
    ``putconn(conn)``, ``close()``, ``closed``. A connection given back in any
    state but idle (lost, or left mid-statement) is closed and frees its place.
    """

    def __init__(self, conninfo: str, *, max_size: int, kwargs: dict[str, Any]) -> None:
        self.conninfo = conninfo
        self.where = conninfo_host(conninfo)  # for messages: never the password
        self.max_size = max_size
        self.kwargs = kwargs
        self.closed = False
        self._idle: collections.deque[Conn] = collections.deque()
        self._all: set[Conn] = set()  # idle, in use: what close() and abandon_pool() close
        self._opening = 0
        # Callers waiting for a connection; None wakes one to connect itself (a place freed).
        self._waiting: collections.deque[asyncio.Future[Conn | None]] = collections.deque()

    async def open(self, count: int) -> None:
        """Make ``count`` connections now (``min_size``), so a server that is down fails here.

        Those made before one failed are given back, so the caller's close() closes
        them (each holds one of the server's connection slots meanwhile).
        """
        conns: list[Conn] = []
        try:
            for _ in range(count):
                conns.append(await self.getconn())
        finally:
            for conn in conns:
                await self.putconn(conn)

    async def getconn(self) -> Conn:
        while True:
            if self.closed:
                raise PoolClosedError(f"the connection pool for {self.where} is closed")
            if self._idle:
                idle = self._idle.pop()  # the most recently used: the others may expire
                if not server_ended(idle):
                    return idle
                self._all.discard(idle)
                await idle.close()
                continue
            if len(self._all) + self._opening < self.max_size:
                return await self._connect()
            waiter: asyncio.Future[Conn | None] = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            try:
                conn = await waiter
            except BaseException:
                await self._pass_on(waiter)
                raise
            if conn is not None:
                return conn

    async def _pass_on(self, waiter: asyncio.Future[Conn | None]) -> None:
        """A waiter gave up (its timeout, a cancel): what it was handed goes to the next one.

        Handed a connection, it gives it back; handed the right to connect (a
        place freed), it hands that right on, or the place would stay free
        while the others waited for a connection nobody makes.
        """
        if waiter.cancelled() or not waiter.done():
            if waiter in self._waiting:
                self._waiting.remove(waiter)
        elif waiter.exception() is None:  # (an exception: the pool closed)
            handed = waiter.result()
            if handed is not None:
                await self.putconn(handed)
            elif self._waiting:
                self._wake(None)

    async def _connect(self) -> Conn:
        self._opening += 1
        try:
            conn = await psycopg.AsyncConnection.connect(self.conninfo, **self.kwargs)
            readable = _readable(conn)
            if readable:
                try:
                    await conn.execute(readable)
                except BaseException:
                    await conn.close()
                    raise
        except BaseException as error:
            # Cut short (a caller's time limit, a cancel), psycopg leaves the
            # half-made connection in a local of its finished frames, which the
            # error's traceback holds: whoever keeps the error (a loader's failure
            # does) would keep the server's connection slot until the garbage
            # collector found the cycle. Clearing those frames closes it now.
            traceback.clear_frames(error.__traceback__)
            self._wake(None)  # a waiter may try in our place
            raise
        finally:
            self._opening -= 1
        if self.closed:  # closed while we connected
            await conn.close()
            raise PoolClosedError(f"the connection pool for {self.where} is closed")
        self._all.add(conn)
        return conn

    async def putconn(self, conn: Conn) -> None:
        if self.closed or conn.info.transaction_status != TransactionStatus.IDLE:
            self._all.discard(conn)
            await conn.close()
            self._wake(None)
        elif not self._wake(conn):
            self._idle.append(conn)

    def _wake(self, conn: Conn | None) -> bool:
        """Hand ``conn`` (or, with None, the right to connect) to the first live waiter."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return True
        return False

    async def close(self) -> None:
        """Close the idle connections now, those in use when they come back; refuse new calls."""
        self.closed = True
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_exception(PoolClosedError(f"the pool for {self.where} closed"))
        while self._idle:
            conn = self._idle.pop()
            self._all.discard(conn)
            await conn.close()


def url_options(
    who: str, url: str, min_size: int, max_size: int, timeout: float | None, options: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """``host:port`` and :func:`open_pool`'s arguments for ``url`` (autocommit on)."""
    parts = url_parts(url, ("postgresql", "postgres"))
    if parts is None:
        raise UsageError(
            f"{who} takes a URL like 'postgresql://user:password@host:5432/database', got "
            f"{shown_url(url)}"
        )
    if type(min_size) is not int or type(max_size) is not int or min_size < 0 or max_size < 1:
        raise UsageError(
            f"{who} needs min_size as an int >= 0 and max_size as an int >= 1, got "
            f"min_size={min_size!r}, max_size={max_size!r}"
        )
    if min_size > max_size:
        raise UsageError(
            f"{who} got min_size={min_size} above max_size={max_size}: the pool would open "
            "more connections than it may hold"
        )
    kwargs = {**options, "autocommit": True}
    if timeout is not None:
        kwargs.setdefault("connect_timeout", max(2, math.ceil(timeout)))  # libpq: whole seconds
    pool = {"conninfo": url, "min_size": min_size, "max_size": max_size, "kwargs": kwargs}
    return f"{parts.hostname}:{parts.port or 5432}", pool


async def open_pool(options: dict[str, Any]) -> Pool:
    """A pool for the running loop, with its ``min_size`` connections made now."""
    pool = Pool(options["conninfo"], max_size=options["max_size"], kwargs=options["kwargs"])
    try:
        await pool.open(options["min_size"])
    except BaseException:
        await pool.close()
        raise
    return pool


def pool_host(pool: Any) -> str:
    """``host:port`` of a pool the application made (its conninfo), for error messages."""
    return conninfo_host(getattr(pool, "conninfo", None))


def conninfo_host(conninfo: object) -> str:
    """``host:port`` of a libpq URL or ``key=value`` string, for error messages."""
    if not isinstance(conninfo, str):
        return "?"
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "?"
    return f"{params.get('host', 'localhost')}:{params.get('port', 5432)}"


async def close_pool(pool: Pool) -> None:
    """Close a pool in its own loop as the loop shuts down; never raises."""
    with contextlib.suppress(Exception):
        await pool.close()


def abandon_pool(pool: Pool) -> None:
    """Close the connections of a pool whose loop was closed without shutting the pool down.

    Nothing may go through that loop, and nothing needs to: libpq closes each
    connection's socket directly (what psycopg's own ``close()`` does).
    """
    pool.closed = True
    for conn in list(pool._all):
        with contextlib.suppress(Exception):
            conn.pgconn.finish()
    pool._all.clear()
    pool._idle.clear()
