"""aiomysql pools for :mod:`batchy_contrib.sql.mysql`: options from a URL, opening in bounded time,
closing with the loop.

:func:`open_pool` makes a pool whose every connection (its first ones, and
those it makes as it grows) must be made within ``connect_timeout``, the
server's greeting included. :func:`close_pool`
closes a pool in its own loop as that loop shuts down
(:class:`._sql_loops.PerLoop` calls it). :func:`abandon_pool` is for a pool
whose loop was closed without that step: nothing may go through a closed loop,
so it closes the sockets directly. Those two must leave nothing that warns
("Unclosed connection", "unclosed transport") when collected.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any
from urllib.parse import unquote

import aiomysql
import pymysql
from pymysql.constants import CR

from batchy import UsageError

from ._errors import shown_url, url_parts

__all__ = ["abandon_pool", "acquire", "close_pool", "open_pool", "url_options"]

#: Seconds a shutting-down loop waits for its pool's connections to come back.
CLOSE_WAIT = 5.0
#: Tasks waiting for a connection (see :func:`acquire`).
_WAITING: set[asyncio.Task[Any]] = set()


async def acquire(pool: Any) -> Any:
    """A connection from ``pool``, the calling task held alive until it has one.

    Why: a connection being opened is held only by the coroutine opening it
    (asyncio's stream protocol keeps its reader weakly), and the event loop
    keeps tasks weakly too. A task that nothing else references (a batch
    call's, an aiodataloader dispatch) forms, with the half-open connection, a
    cycle the garbage collector may free mid-handshake: it never resumes, and
    its keys wait forever. Once the connection is in the pool's hands, the pool
    (held by the database) keeps it and its reader alive.
    """
    task = asyncio.current_task()
    if task is None:
        return await pool.acquire()
    _WAITING.add(task)
    try:
        return await pool.acquire()
    finally:
        _WAITING.discard(task)


def url_options(
    who: str, url: str, minsize: int, maxsize: int, timeout: float | None
) -> tuple[str, dict[str, Any]]:
    """``host:port`` and :func:`aiomysql.create_pool`'s options for ``url`` (autocommit on)."""
    parts = url_parts(url, ("mysql", "mariadb"))
    if parts is None:
        raise UsageError(
            f"{who} takes a URL like 'mysql://user:password@host:3306/database', got "
            f"{shown_url(url)}"
        )
    if type(minsize) is not int or type(maxsize) is not int or minsize < 0 or maxsize < 0:
        raise UsageError(
            f"{who} needs minsize and maxsize as ints >= 0, got minsize={minsize!r}, "
            f"maxsize={maxsize!r}"
        )
    if maxsize and minsize > maxsize:
        raise UsageError(
            f"{who} got minsize={minsize} above maxsize={maxsize}: the pool would open more "
            "connections than it may hold (maxsize=0 means no limit)"
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
    return f"{host}:{port}", options


async def open_pool(options: dict[str, Any]) -> Any:
    """A new aiomysql pool whose every connection is made within ``connect_timeout``:
    its ``minsize`` first ones, and those it makes as it grows (or refills).

    Why the time limit is ours: aiomysql's ``connect_timeout`` bounds only the
    TCP connect, not the wait for the server's greeting that follows. A server
    that accepts connections and says nothing (overloaded, a proxy whose
    backend is gone) held the opening forever, and every call of a loop waits
    on its one opening; a connection made later, for a call that found the
    others in use, held that call forever (with no ``timeout=``) and the pool's
    lock with it, so every later call of the loop waited too. Cancelled
    mid-greeting, aiomysql closes the half-open connection itself. The error is
    aiomysql's own for a server it cannot reach, so the loaders tell it as one.
    """
    seconds, host = options.get("connect_timeout"), options.get("host")
    try:
        async with asyncio.timeout(seconds):
            pool = await aiomysql.create_pool(**options)
    except TimeoutError as error:
        raise _no_greeting(host, seconds) from error
    fill = pool._fill_free_pool  # where the pool connects, holding its lock

    async def fill_in_time(override_min: bool) -> None:
        try:
            async with asyncio.timeout(seconds):
                await fill(override_min)
        except TimeoutError as error:
            raise _no_greeting(host, seconds) from error

    pool._fill_free_pool = fill_in_time
    return pool


def _no_greeting(host: object, seconds: float | None) -> pymysql.err.OperationalError:
    return pymysql.err.OperationalError(
        CR.CR_CONN_HOST_ERROR,
        f"Can't connect to MySQL server on {host!r}: no greeting within {seconds} s "
        "(connect_timeout)",
    )


async def close_pool(pool: Any) -> None:
    """Close a pool in its own loop, in bounded time; never raises (the loop is shutting down)."""
    try:
        async with asyncio.timeout(CLOSE_WAIT):
            with contextlib.suppress(Exception):
                # COM_QUIT on the idle connections: the server sees a goodbye, not
                # an aborted connection. A server already gone is no reason to stop.
                await pool.clear()
            pool.close()
            await pool.wait_closed()  # a connection still in use closes on its return
    except Exception:  # TimeoutError (one never came back), or a pool in a bad state
        with contextlib.suppress(Exception):
            pool.terminate()  # close those where they are
    # A closed transport ends on the loop's next pass: take it now, before the
    # loop closes with the socket still open ("unclosed transport").
    await asyncio.sleep(0)


def abandon_pool(pool: Any) -> None:
    """Close the sockets of a pool whose loop was closed without shutting the pool down.

    Nothing may go through that loop (it raises "Event loop is closed"), so
    each socket is closed directly and its connection and transport marked
    closed, or they would warn when collected.
    """
    for conn in [*pool._free, *pool._used]:
        writer = conn._writer
        conn._writer = conn._reader = None  # aiomysql's "closed"
        transport = getattr(writer, "transport", None)
        if transport is None:
            continue
        with contextlib.suppress(RuntimeError):
            transport.close()  # marks it closing; ending it on the closed loop then raises
        sock = getattr(transport, "_sock", None)
        if sock is not None:
            transport._sock = None
            sock.close()
    pool._free.clear()
    pool._used.clear()
