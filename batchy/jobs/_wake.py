"""Wake-ups of idle workers: a worker's wait on its store, in-process signals, SQLite's FIFOs.

A wake-up names a queue and means "a job may be ready there (or a new due time
was set)". Two rules keep it cheap and safe, as on Redis (see
:mod:`batchy_contrib.jobs.redis`):

- one wake-up wakes one idle worker, not all of them (no thundering herd); the
  store's ``cycle`` passes it on when the worker that took it left ready jobs
  behind (it had no room for them);
- a wake-up with nobody waiting is kept for the next waiter, so a worker that is
  between its look at the store and its wait still gets it: none is ever lost.

:class:`Signals` does this for the waiters of one process. :class:`Bells` carries
wake-ups between processes that share a SQLite file: one named pipe (FIFO) per
queue in a directory next to the database. A pipe is a counter the kernel keeps
for free: a push writes one byte (non-blocking; a full pipe already holds plenty
of wake-ups), and an idle process sleeps in its event loop on the read end, so
nobody polls. Every process with a worker keeps the read ends of its queues
open, so a byte written while all workers are busy stays in the pipe until one
of them waits again; only processes with a waiting worker read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import _clock
from ._hooks import log

if TYPE_CHECKING:
    from ._backend import Backend

__all__ = ["ABSENT_RETRY", "Bells", "Signals", "StoreWait", "Wakeups"]

#: Seconds a process that found no listening worker waits before it tries again.
ABSENT_RETRY = 0.005


@dataclass(eq=False, slots=True)
class _Waiter:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]
    woken: bool = False


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Signals:
    """Per queue, the idle waiters of this process and a wake-up kept for the next one.

    :meth:`wake` may be called from any thread (``push_sync`` in a web thread):
    a waiter on another thread's loop is woken through ``call_soon_threadsafe``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, list[_Waiter]] = {}
        self._kept: set[str] = set()

    def wake(self, queue: str) -> bool:
        """Wake one waiter of ``queue`` (True), or keep the wake-up for the next one (False)."""
        with self._lock:
            waiters = self._waiters.get(queue)
            while waiters:
                waiter = waiters.pop(0)
                if waiter.woken or waiter.future.done():
                    continue  # woken through another of its queues, or gone
                waiter.woken = True
                try:
                    running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
                except RuntimeError:
                    running = None
                if running is waiter.loop:
                    waiter.future.set_result(None)
                else:
                    with contextlib.suppress(RuntimeError):  # its loop closed: it waits no more
                        waiter.loop.call_soon_threadsafe(_resolve, waiter.future)
                return True
            self._kept.add(queue)
            return False

    def take(self, queues: Iterable[str]) -> bool:
        """Take a kept wake-up of one of ``queues``, if there is one."""
        with self._lock:
            for queue in queues:
                if queue in self._kept:
                    self._kept.discard(queue)
                    return True
        return False

    async def wait(self, queues: Sequence[str], timeout: float) -> None:
        """Until one of ``queues`` is woken (or a kept wake-up is taken), at most ``timeout``."""
        loop = asyncio.get_running_loop()
        waiter = _Waiter(loop, loop.create_future())
        with self._lock:
            if any(q in self._kept for q in queues):
                self._kept.difference_update(queues)
                return
            for queue in queues:
                self._waiters.setdefault(queue, []).append(waiter)
        try:
            await asyncio.wait([waiter.future], timeout=timeout)
        finally:
            waiter.future.cancel()
            with self._lock:
                for queue in queues:
                    line = self._waiters.get(queue)
                    if line is not None and waiter in line:
                        line.remove(waiter)


def _is_fifo(path: str) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except FileNotFoundError:
        return False


@dataclass(slots=True)
class _Pipe:
    fd: int
    watchers: int = 0
    loop: asyncio.AbstractEventLoop | None = field(default=None)


class Bells:
    """One FIFO per queue in ``directory``: wake-ups between processes on one machine."""

    def __init__(self, directory: str, signals: Signals) -> None:
        self.directory = directory
        self._signals = signals
        self._lock = threading.Lock()
        self._readers: dict[str, _Pipe] = {}  # queue -> read end (kept open; see the module)
        self._writers: dict[str, int] = {}
        self._absent: dict[str, float] = {}  # queue -> when to try opening its pipe again
        self._broken = False

    def _path(self, queue: str) -> str:
        # Queue names may be "." or "..": never a file name of their own.
        return os.path.join(self.directory, "q." + queue)

    def ring(self, queue: str) -> None:
        """Tell the other processes that ``queue`` may have work; never blocks, never fails."""
        with self._lock:
            fd = self._writers.get(queue)
            if fd is None:
                # A failed open costs a path lookup (the most expensive part of an
                # enqueue on some file systems), so with no worker listening we try
                # again only after ABSENT_RETRY; a new listener waits that long
                # before its first look at the store (see wait), so no push is missed.
                if self._absent.get(queue, 0.0) > (now := time.monotonic()):
                    return
                try:
                    fd = os.open(self._path(queue), os.O_WRONLY | os.O_NONBLOCK)
                except OSError:  # no pipe yet (no worker ever) or nobody has it open
                    self._absent[queue] = now + ABSENT_RETRY
                    return
                self._writers[queue] = fd
            try:
                os.write(fd, b"\0")
            except BlockingIOError:
                pass  # the pipe is full: plenty of wake-ups are pending already
            except OSError:  # every reader left (EPIPE): nobody to wake
                del self._writers[queue]
                os.close(fd)

    def listen(self, queues: Iterable[str]) -> bool:
        """Open the read ends of ``queues``; True when one was opened just now.

        A worker looks at the store once more after that: a job pushed before
        the pipe was open rang no bell.
        """
        opened = False
        for queue in queues:
            if queue in self._readers or self._broken:
                continue
            path = self._path(queue)
            try:
                os.makedirs(self.directory, exist_ok=True)
                with contextlib.suppress(FileExistsError):
                    os.mkfifo(path, 0o666)
                if not _is_fifo(path):
                    raise OSError(f"{path} exists and is not a FIFO")
                # O_RDWR, not O_RDONLY: the pipe never reads as closed (EOF, readable
                # forever) when the last writer goes, and keeps bytes while no one reads.
                fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
            except (OSError, AttributeError) as error:  # AttributeError: no os.mkfifo
                self._broken = True
                log.warning(
                    "batchy.jobs: no wake-ups between processes through %s (%s); workers "
                    "in other processes find new jobs every poll interval",
                    self.directory,
                    error,
                )
                continue
            self._readers[queue] = _Pipe(fd)
            opened = True
        return opened

    def _drain(self, queue: str) -> None:
        pipe = self._readers[queue]
        got = False
        with contextlib.suppress(BlockingIOError):
            while os.read(pipe.fd, 65536):
                got = True
        if got:  # this process took the wake-up: it must not be lost here
            self._signals.wake(queue)

    @contextlib.contextmanager
    def watching(self, queues: Iterable[str]) -> Iterator[None]:
        """While inside, a byte in the pipe of one of ``queues`` wakes a waiter of this process."""
        loop = asyncio.get_running_loop()
        pipes: list[tuple[str, _Pipe]] = []
        try:
            for queue in queues:
                pipe = self._readers.get(queue)
                if pipe is None:
                    continue
                if pipe.watchers == 0:
                    loop.add_reader(pipe.fd, self._drain, queue)
                    pipe.loop = loop
                pipe.watchers += 1
                pipes.append((queue, pipe))
            yield
        finally:
            for _, pipe in pipes:
                pipe.watchers -= 1
                if pipe.watchers == 0 and pipe.loop is not None:
                    pipe.loop.remove_reader(pipe.fd)
                    pipe.loop = None

    def close(self) -> None:
        with self._lock:
            for fd in self._writers.values():
                os.close(fd)
            self._writers.clear()
        for pipe in self._readers.values():
            if pipe.loop is not None and not pipe.loop.is_closed():
                pipe.loop.remove_reader(pipe.fd)
            os.close(pipe.fd)
        self._readers.clear()


class Wakeups:
    """A store's wake-ups on this machine: :class:`Signals`, and :class:`Bells` in ``directory``."""

    def __init__(self, directory: str | None) -> None:
        self.signals = Signals()
        self.bells = None if directory is None else Bells(directory, self.signals)

    def signal(self, queues: Iterable[str]) -> None:
        """Wake one worker of each queue: one waiting in this process, else through the bells."""
        for queue in queues:
            if not self.signals.wake(queue) and self.bells is not None:
                self.bells.ring(queue)

    async def wait(self, queues: Sequence[str], timeout: float, due: float | None) -> None:
        """Until a wake-up of ``queues``, the store's clock reaches ``due``, or ``timeout``."""
        if self.bells is not None and self.bells.listen(queues):
            # The pipes are open from now on. A push that found no pipe just before
            # rings again only after ABSENT_RETRY: let that pass, then look once
            # more for everything pushed before.
            await asyncio.sleep(2 * ABSENT_RETRY)
            return
        due_in = min(timeout, (math.inf if due is None else due) - _clock.store_now())
        if due_in <= 0:
            return  # a job is ready or due already: look now
        bells = contextlib.nullcontext() if self.bells is None else self.bells.watching(queues)
        with bells:
            await self.signals.wait(queues, due_in)

    def close(self) -> None:
        if self.bells is not None:
            self.bells.close()


class StoreWait:
    """A worker's one wait on its store for new work (``Backend.wait_for_work``), kept across turns.

    A job finishing does not end it (on Redis it is a blocking command). When it
    ends it sets :attr:`signalled` and calls ``poke``: the worker looks again.
    """

    def __init__(
        self,
        backend: Backend,
        worker: str,
        queues: Sequence[str],
        poll: float,
        poke: Callable[[], None],
    ) -> None:
        self.backend, self.worker, self.queues, self.poll = backend, worker, list(queues), poll
        self.poke = poke
        self.task: asyncio.Task[None] | None = None
        self.signalled = False  # it ended since the worker's last cycle began
        self._failed = False

    def start(self) -> None:
        if self.task is None:
            self.task = asyncio.create_task(self._wait())

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()

    async def _wait(self) -> None:
        try:
            await self.backend.wait_for_work(self.worker, self.queues, self.poll)
            self._failed = False
        except Exception:
            # Polling every poll_interval still finds the work; say so once.
            if not self._failed:
                log.warning(
                    "worker %s: waiting for new work failed; polling every %ss until it works",
                    self.worker,
                    self.poll,
                    exc_info=True,
                )
            self._failed = True
            await asyncio.sleep(self.poll)
        finally:
            self.task = None
        self.signalled = True
        self.poke()
