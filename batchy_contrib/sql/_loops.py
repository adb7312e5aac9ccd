"""One connection pool per event loop: opened by the first call in a loop, closed as that loop ends.

Why per loop: an asyncio connection belongs to the loop that opened it; used
from another loop it fails ("Event loop is closed") or, worse, half works. A
database declared at import time (``mysql.Database.from_url``) is used by
whatever loop runs its loaders: an ASGI server's one long-lived loop, a new
loop per ``batchy.run`` in a Flask or Django view, a worker's, a test's. So
:class:`PerLoop` keeps one pool per running loop, opened on the first call in
that loop; a pool is only ever handed to callers in its own loop.

Why an async generator closes it: asyncio has no "loop closing" callback, but
``asyncio.run`` and ``asyncio.Runner`` (so ``batchy.run``, uvicorn, asgiref,
pytest-asyncio) call ``loop.shutdown_asyncgens()`` before closing a loop, and
that closes every async generator started in the loop and still suspended,
while the loop still runs. Each pool is watched by one such generator; its
``finally`` closes the pool in its own loop, so the connections say goodbye
and nothing warns. A loop closed by hand without that step (``loop.close()``
alone) leaves its pool behind: the next pool opened in a new loop first drops
the sockets of pools whose loops have closed, without touching those loops.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Generic, TypeVar

from batchy import UsageError

__all__ = ["EventLoopError", "PerLoop", "foreign_loop", "running_loop"]

T = TypeVar("T")


class EventLoopError(UsageError):
    """A database was used outside the event loop its connections belong to, or with no loop."""


def running_loop(what: str) -> asyncio.AbstractEventLoop:
    """The running loop, or an :class:`EventLoopError` saying how to get one."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise EventLoopError(
            f"{what} was used with no running asyncio event loop. From sync code (a Flask "
            "or Django view, a script), run the handler with batchy.run(handler(...)); in "
            "async code, await it."
        ) from None


def foreign_loop(host: str, home: asyncio.AbstractEventLoop, *, driver: str, module: str) -> str:
    """Why a pool made by ``<module>.connect()`` cannot serve the running loop, and the fix.

    ``driver`` names the pool (``aiomysql``), ``module`` the backend (``mysql``).
    """
    if home.is_closed():
        where = (
            f"in an event loop that has closed since (asyncio.run({module}.connect(...)) at "
            "startup, then batchy.run(...) per request?)"
        )
    else:
        where = "in another event loop (another thread's, or one not running now)"
    # No final period: the engine appends "while loading keys [...]" for a loader.
    return (
        f"the {driver} pool for {host} was made {where}, and a connection works only in "
        f"the loop that opened it; declare the database with {module}.Database.from_url(url) "
        f"instead of {module}.connect(url): it opens a pool per event loop on first use and "
        "closes it with its loop"
    )


class _Entry(Generic[T]):
    """One loop's pool: being opened, then open and watched until the loop shuts down."""

    __slots__ = ("opening", "value", "watch")

    def __init__(self) -> None:
        self.value: T | None = None
        self.opening: asyncio.Task[T] | None = None
        self.watch: AsyncGenerator[None, None] | None = None


def _retrieve(task: asyncio.Task[object]) -> None:
    # The callers that waited on the opening got its error; if all of them gave
    # up first, asyncio must not log it as never retrieved.
    if not task.cancelled():
        task.exception()


class PerLoop(Generic[T]):
    """One ``T`` (a pool) per running event loop, opened on first use there, closed with the loop.

    ``open()`` makes one in the running loop; ``close(value)`` closes it in its
    loop and must not raise (it runs while the loop shuts down); ``abandon(value)``
    frees one whose loop has closed, without using that loop.
    """

    def __init__(
        self,
        what: str,
        open: Callable[[], Awaitable[T]],
        close: Callable[[T], Awaitable[None]],
        abandon: Callable[[T], None],
    ) -> None:
        self.what = what
        self._open = open
        self._close = close
        self._abandon = abandon
        self._entries: dict[asyncio.AbstractEventLoop, _Entry[T]] = {}
        # Loops of other threads open and sweep entries too; the fast path
        # (here()) only reads its own loop's entry, so it takes no lock.
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Loops that have a pool (open or being opened)."""
        return len(self._entries)

    def here(self) -> T | None:
        """The running loop's pool, or None if it is not open yet."""
        entry = self._entries.get(running_loop(self.what))
        return entry.value if entry is not None else None

    def current(self) -> T | None:
        """:meth:`here`, but None also when no loop is running."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        entry = self._entries.get(loop)
        return entry.value if entry is not None else None

    async def open_here(self) -> T:
        """The running loop's pool, opened now if needed (concurrent callers share one opening)."""
        loop = running_loop(self.what)
        entry = self._entries.get(loop)
        if entry is None:
            self.sweep()
            entry = _Entry()
            # A task of its own: a caller that times out or is cancelled does
            # not cancel the opening the other callers of this round wait on.
            entry.opening = loop.create_task(self._open_in(loop, entry))
            entry.opening.add_done_callback(_retrieve)
            with self._lock:
                self._entries[loop] = entry
        if entry.value is not None:
            return entry.value
        if entry.opening is None:  # closed while we looked: open anew
            return await self.open_here()
        return await asyncio.shield(entry.opening)

    async def _open_in(self, loop: asyncio.AbstractEventLoop, entry: _Entry[T]) -> T:
        try:
            value = await self._open()
        except BaseException:
            # Failed (server down) or cancelled: the next call tries again.
            self._forget(loop, entry)
            raise
        watch = self._watch(loop, entry, value)
        # Started here, in its loop: the loop's asyncgen hooks register it, so
        # shutdown_asyncgens() closes it. No await happens before its yield.
        await anext(watch)
        entry.value, entry.watch = value, watch
        return value

    async def _watch(
        self, loop: asyncio.AbstractEventLoop, entry: _Entry[T], value: T
    ) -> AsyncGenerator[None, None]:
        try:
            yield  # suspended until the loop shuts down, or close_here()
        finally:
            self._forget(loop, entry)
            await self._close(value)

    def _forget(self, loop: asyncio.AbstractEventLoop, entry: _Entry[T]) -> None:
        with self._lock:
            if self._entries.get(loop) is entry:
                del self._entries[loop]
        entry.value = entry.opening = None

    async def close_here(self) -> None:
        """Close the running loop's pool now; the next call in this loop opens a new one."""
        self.sweep()
        entry = self._entries.get(running_loop(self.what))
        if entry is None:
            return
        if entry.watch is None and entry.opening is not None:
            # Still opening: let it finish (or fail), then close what it opened.
            await asyncio.wait([entry.opening])
        if entry.watch is not None:
            await entry.watch.aclose()  # runs _watch's finally: one way to close

    def sweep(self) -> None:
        """Drop the pools of loops that were closed without shutting them down."""
        with self._lock:
            dead = [(loop, e) for loop, e in self._entries.items() if loop.is_closed()]
            for loop, _ in dead:
                del self._entries[loop]
        for _, entry in dead:
            if entry.value is not None:
                self._abandon(entry.value)
            entry.value = entry.opening = entry.watch = None
