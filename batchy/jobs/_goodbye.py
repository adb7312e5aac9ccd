"""How a stopping worker takes its leave of the store: each step bounded, none raised.

A stop is not the place to fail or to hang. What the worker could not hand in
is not lost (its leases run out and the jobs run again, as after a crash), so a
store that fails or stops answering at this point is logged, and the worker goes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from . import _clock
from ._activity import Tally
from ._backend import Backend
from ._failure import describe
from ._hooks import log
from ._leases import Leases
from ._model import Claims, Outcome
from ._outage import within

__all__ = ["gave_up", "hand_in_last", "take_leave"]


async def hand_in_last(
    backend: Backend,
    worker: str,
    outcomes: Sequence[Outcome],
    lease: float,
    leases: Leases,
    bounded: Callable[[Awaitable[Claims]], Awaitable[Claims]],
) -> None:
    """``outcomes`` in, in one last turn that claims nothing (through ``bounded``, the
    worker's time limit); logged, not raised, if the store cannot take them."""
    try:
        done = await bounded(backend.cycle(outcomes, [], 0, worker, lease, _clock.now()))
    except Exception as error:
        gave_up(worker, outcomes, error, lease)
        return
    leases.settle(outcomes, done.refused)


def gave_up(worker: str, outcomes: Sequence[Outcome], error: BaseException, lease: float) -> None:
    # One line, as the outage's own: the error's name and words say what failed; a
    # traceback (a driver's connect, forty lines) would say it again at every stop.
    log.error(
        "worker %s stopped without handing in %d outcome(s) (jobs %s): %s; those jobs run "
        "again once their leases run out (within %gs)",
        worker, len(outcomes), ", ".join(o.id for o in outcomes), describe(error), lease,
    )  # fmt: skip


async def last_word(worker: str, call: Awaitable[None], what: str, seconds: float) -> None:
    """One of the store calls a stopping worker makes: left running if the stop is
    cancelled, given up (with a warning) if the store does not answer in time."""
    try:
        late = f"the store did not answer the worker's {what} within {seconds:g}s"
        await within(call, seconds, lambda: late, shielded=True)
    except TimeoutError as error:
        log.warning("worker %s: %s; stopping without it", worker, error)


async def end_background(tasks: Sequence[asyncio.Future[None] | None], seconds: float) -> None:
    """Let the worker's background tasks end, up to ``seconds``; then cancel them.

    Their store calls end before the worker's last ones and before its caller
    closes the store: a heartbeat's counter write is let finish, not cut off
    halfway (a transaction left open on a pooled connection holds its locks, and
    the counts it took were lost); a task that does not end in time is
    cancelled, and its clean-up awaited too.
    """
    running = {t for t in tasks if t is not None and not t.done()}
    if running:
        _, late = await asyncio.wait(running, timeout=seconds)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late, timeout=1.0)


async def take_leave(
    worker: str,
    backend: Backend,
    times: tuple[float, float],
    background: Sequence[asyncio.Future[None] | None],
    tally: Tally,
    *,
    gone: str | None,
) -> None:
    """The worker's background tasks end; then its counters and its goodbye go to the
    store, unless its last call did not get through (``gone`` says how: each would
    wait in vain). ``times``: the worker's lease and heartbeat."""
    lease, heartbeat = times
    grace = max(1.0, heartbeat)
    await end_background(background, grace)
    if gone is not None:
        log.warning("worker %s: the store %s; going without its counters and goodbye", worker, gone)
        return
    await last_word(worker, tally.flush(backend), "counters", grace)
    # forget_worker may wait a lease for outcomes put off (PostgreSQL).
    await last_word(worker, backend.forget_worker(worker), "goodbye", lease + heartbeat)
