"""How a worker's calls reach the store: started, limited in time, and logged when it is down.

Whether the store answers: one log line when it stops, one when it is back.
While the store is unreachable the worker waits longer between tries (doubling
from ``poll_interval`` up to a second, or ten poll intervals if that is less;
one poll interval if that is more; with a little jitter so a fleet does not come
back in lockstep) and logs nothing per try: an hour-long outage is two lines,
not thousands of tracebacks. The wait stops growing at a second: the worker
sleeps it out even once the store is back, so it is how late a job enqueued
then may start. Its tries cost the store no more than its polling when it is up.

A store that stops answering without an error (a connection dropped without a
word, a paused server) is an outage too: :func:`within` gives each call a time
limit, and does not wait for the call's own clean-up once it is over (a driver
cancelling a query on a dead connection may take seconds more).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from . import _clock
from ._errors import JobError
from ._failure import describe
from ._hooks import log

__all__ = ["NoAnswer", "Outage", "ensure_quiet", "launch", "pause", "within"]

T = TypeVar("T")

#: The longest wait between two tries for a poll interval under it (seconds): the
#: longest a worker may take to notice the store is back, beyond its poll interval.
RESUME_WITHIN = 1.0


class Outage:
    """The store's state as worker ``worker`` sees it; ``base`` is its poll interval.

    Each kind of call (``what``: the turn's cycle, the heartbeat) fails and
    recovers on its own: the store is back when every kind that failed went
    through again, so a store that answers cycles but not heartbeats is one
    outage, not one per turn.
    """

    def __init__(self, worker: str, base: float) -> None:
        self.worker = worker
        self.base = base
        # Not ten poll intervals (up to 30 s): the worker slept that out with the
        # store back, and a job enqueued meanwhile waited for it to end.
        self.cap = max(base, min(RESUME_WITHIN, 10 * base))
        self.failing: dict[str, int] = {}  # kind of call -> failures in a row
        self.failures = 0  # during this outage, all kinds
        self._since = 0.0  # time.monotonic() of the first failure

    def failed(self, error: BaseException, what: str = "cycle") -> float:
        """A ``what`` call to the store raised ``error``: seconds to wait before the next."""
        if not self.failing:
            self._since = time.monotonic()
            since = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(_clock.now()))
            log.error(
                "worker %s: store unreachable since %s (%s failed): %s; trying again with "
                "backoff (up to %gs apart)",
                self.worker,
                since,
                what,
                describe(error),
                self.cap,
            )
        else:
            log.debug("worker %s: store still unreachable: %s", self.worker, describe(error))
        self.failures += 1
        streak = self.failing[what] = self.failing.get(what, 0) + 1
        delay: float = min(self.cap, self.base * 2.0 ** min(streak - 1, 32))
        return delay * random.uniform(0.75, 1.0)

    def ok(self, what: str = "cycle") -> None:
        """A ``what`` call to the store went through."""
        if self.failing.pop(what, None) is not None and not self.failing:
            log.warning(
                "worker %s: store back after %.1fs (%d failed tries)",
                self.worker,
                time.monotonic() - self._since,
                self.failures,
            )
            self.failures = 0


#: Seconds a store call's timer may fire late before the loop counts as blocked.
_LATE = 0.05


class NoAnswer(JobError, TimeoutError):
    """A store call a worker gave up on: no answer within its time limit."""


async def within(
    call: Awaitable[T], seconds: float, late: Callable[[], str], *, shielded: bool = False
) -> T:
    """``call``'s result, or :class:`NoAnswer` (saying ``late()``) after ``seconds``.

    Past the limit the call is cancelled and left to end on its own, unheard.
    ``shielded``: a cancel of the caller leaves the call running (a stopping
    worker's last words to the store), rather than cancelling it too. Built on
    bare callbacks, not ``asyncio.wait``: a worker with one slot makes a turn per job.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(call)
    if not task.done():
        waiter = loop.create_future()

        def wake(_: object = None) -> None:
            if not waiter.done():
                waiter.set_result(None)

        task.add_done_callback(wake)
        timer = loop.call_later(seconds, wake)
        deadline = loop.time() + seconds
        try:
            await waiter
            blocked = loop.time() - deadline
            if not task.done() and blocked > _LATE:
                # The timer fired late: the loop itself was blocked (a handler that
                # did not await), and the answer may be waiting in its socket. The
                # store gets back the time the loop took from it.
                await asyncio.wait([task], timeout=min(blocked, seconds))
        except asyncio.CancelledError:
            _abandon(task, cancel=not shielded)
            raise
        finally:
            timer.cancel()
            task.remove_done_callback(wake)
        if not task.done():
            _abandon(task, cancel=True)
            raise NoAnswer(late())
    return task.result()


def _abandon(task: asyncio.Future[T], *, cancel: bool) -> None:
    if cancel:
        task.cancel()
    # Whatever it ends with, nobody waits for it: retrieved, so asyncio logs nothing.
    task.add_done_callback(_retrieve)


async def launch(call: Awaitable[T]) -> asyncio.Future[T]:
    """``call`` as a task that has taken its first step; a cancel meanwhile cancels it too.

    ``ensure_future`` only schedules a call; whatever the caller does before its
    next ``await`` runs first. A worker that starts a batch of jobs (about 10 µs
    of CPU each) while its turn travels must let the turn leave first, or the
    store waits for those starts. One step is enough where a store's call sends
    its request at once (PostgreSQL, and the stores that run a turn in-process);
    redis-py takes a few more before it writes, so on Redis the batch still
    starts first (a step costs microseconds, a turn hundreds of them).
    """
    task = asyncio.ensure_future(call)
    try:
        await asyncio.sleep(0)
    except asyncio.CancelledError:
        _abandon(task, cancel=True)
        raise
    return task


def ensure_quiet(call: Awaitable[T]) -> asyncio.Future[T]:
    """``call`` as a task whose failure nobody need await (it is retrieved, not logged)."""
    task = asyncio.ensure_future(call)
    task.add_done_callback(_retrieve)
    return task


def _retrieve(task: asyncio.Future[T]) -> None:
    if not task.cancelled():
        task.exception()


async def pause(seconds: float, until: asyncio.Event) -> None:
    """Wait ``seconds``, or until ``until`` is set (a back-off a stop ends, an idle
    wait a finished job ends).

    asyncio.wait, not wait_for: on 3.11 wait_for returns normally when it is
    cancelled just as the event is set (kill() cancels the jobs, whose end sets
    the worker's event, and the worker's task), and the worker would run on.
    """
    woken = asyncio.ensure_future(until.wait())
    try:
        await asyncio.wait([woken], timeout=seconds)
    finally:
        woken.cancel()
