"""The store reads that ``result()``'s waiters share: one poller per store and event loop.

Each ``result()`` used to read its job on its own, every ``poll`` seconds: 200
waiters read the store 200 times a poll (3,800 reads a second on SQLite). Now a
waiter joins the poller of its store (of its queue's ``backend``) in its event
loop, which reads every job its waiters wait for in one
:meth:`~batchy.jobs.Backend.statuses` call, and hands each waiter its job's
status, keyed by the id it asked for.

When it reads: each waiter wants a read ``poll`` seconds after its last one
ended (its first at once), and one at its deadline (the read ``result()`` makes
before it times out). A read is made when the first of those falls due, but no
sooner than the smallest ``poll`` of the waiters after the last read ended,
except for a deadline, which waits for nothing. Each read takes every waiter
whose next read would otherwise fall before the next read can be made. So a
waiter's job is read at least once per its ``poll`` (a finished job is seen
within ``poll`` and a read, as before), and the store is read at most once per
the smallest ``poll`` (plus one read per deadline), however many wait. One
poller at the fastest rate serves slower waiters at their own rate or better
for no extra store call, where a poller per ``poll`` value would add a call per
value.

Nothing outlives the waiters: the last one to leave (its result came, it timed
out or was cancelled) cancels the poller, as cancelling ``result()`` cancelled
its read. A failed read fails the waiters it was made for, as a read of their
own would have, and the poller goes on for the others; one that stops for any
other reason fails or cancels the waiters it holds, so none hangs.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from . import _clock
from ._errors import ConfigError

if TYPE_CHECKING:
    from ._backend import Backend
    from ._model import JobStatus

__all__ = ["Waiter"]


class Waiter:
    """One ``result()`` call's place at its store's poller: ``await next()`` for each read."""

    __slots__ = ("backend", "deadline", "due", "job_id", "poll", "poller", "seen")

    def __init__(self, backend: Backend, job_id: str, poll: float, deadline: float) -> None:
        self.backend = backend
        self.job_id = job_id
        self.poll = poll
        self.deadline = deadline  # time.monotonic(); math.inf: none
        self.due = -math.inf  # the next read it wants (time.monotonic()): the first at once
        self.seen: asyncio.Future[JobStatus] = asyncio.get_running_loop().create_future()
        self.poller: _Poller | None = None

    async def next(self) -> JobStatus:
        """The job's status at the next read made for this waiter."""
        if self.seen.done():
            self.seen = asyncio.get_running_loop().create_future()
        # The poller of the moment: one that stopped (see _Poller._run) has left it.
        self.poller = _Poller.of(self.backend)
        self.poller.arm(self)
        return await self.seen

    def leave(self) -> None:
        """Stop waiting; the poller stops with its last waiter."""
        if self.poller is not None:
            self.poller.leave(self)


class _Poller:
    """Reads the jobs of one store's waiters in one event loop (see the module)."""

    def __init__(self, backend: Backend, loop: asyncio.AbstractEventLoop) -> None:
        self.backend = backend
        self.key = (loop, id(backend))
        self.waiters: set[Waiter] = set()
        self.last = -math.inf  # when the last read ended
        self.news = asyncio.Event()  # a waiter came, or wants its next read
        self.task = loop.create_task(self._run(), name=f"batchy result() reads of {backend!r}")

    @classmethod
    def of(cls, backend: Backend) -> _Poller:
        loop = asyncio.get_running_loop()
        poller = _pollers.get((loop, id(backend)))
        if poller is None:
            poller = _pollers[loop, id(backend)] = cls(backend, loop)
        return poller

    def arm(self, waiter: Waiter) -> None:
        self.waiters.add(waiter)
        self.news.set()

    def leave(self, waiter: Waiter) -> None:
        self.waiters.discard(waiter)
        if not self.waiters:
            self._close()
            self.task.cancel()

    def _close(self) -> None:
        if _pollers.get(self.key) is self:
            del _pollers[self.key]  # a waiter that comes now starts a new poller

    async def _run(self) -> None:
        try:
            while self.waiters:
                await self._step()
        except Exception as error:  # (a bug here): the waiters' error, not the loop's log
            self._end(error)
        finally:
            self._close()
            self._end(None)

    async def _step(self) -> None:
        armed = [w for w in self.waiters if not w.seen.done()]
        gap = min(w.poll for w in self.waiters)
        next_read = min(
            (min(max(self.last + gap, w.due), w.deadline) for w in armed), default=math.inf
        )
        now = time.monotonic()
        if next_read > now:
            self.news.clear()
            try:
                async with asyncio.timeout(None if next_read == math.inf else next_read - now):
                    await self.news.wait()
            except TimeoutError:
                pass
            return
        batch = [w for w in armed if w.due < now + gap or w.deadline <= now]
        ids = list(dict.fromkeys(w.job_id for w in batch))
        try:
            found = await self.backend.statuses(ids, _clock.now())
            if len(found) != len(ids):
                raise ConfigError(
                    f"{self.backend!r}.statuses() returned {len(found)} statuses for "
                    f"{len(ids)} job ids; it must return one per id, in the order given"
                )
        except Exception as error:  # as a read of their own would: theirs, the others wait on
            self._end(error, batch)
            return
        finally:
            self.last = time.monotonic()
        by_id = dict(zip(ids, found, strict=True))
        for w in batch:
            w.due = self.last + w.poll
            if not w.seen.done():  # (a cancelled waiter is leaving)
                w.seen.set_result(by_id[w.job_id])

    def _end(self, error: Exception | None, waiters: Iterable[Waiter] | None = None) -> None:
        """End the reads ``waiters`` (all) still wait for: with ``error``, or cancelled."""
        for w in self.waiters if waiters is None else waiters:
            if not w.seen.done():
                if error is None:
                    w.seen.cancel()
                else:
                    w.seen.set_exception(error)


#: The running pollers, by event loop and store (its id: the poller holds the store).
_pollers: dict[tuple[asyncio.AbstractEventLoop, int], _Poller] = {}
