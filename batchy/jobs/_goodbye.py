"""How a stopping worker takes its leave of the store: each step bounded, none raised.

A stop is not the place to fail or to hang. What the worker could not hand in
is not lost (its leases run out and the jobs run again, as after a crash), so a
store that fails or stops answering at this point is logged, and the worker goes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence

from . import _clock
from ._backend import Backend
from ._failure import describe
from ._hooks import log
from ._leases import Leases
from ._model import Outcome
from ._outage import no_answer, within

__all__ = ["end_background", "hand_in_last", "last_word"]


async def hand_in_last(
    backend: Backend, worker: str, outcomes: Sequence[Outcome], lease: float, leases: Leases
) -> None:
    """``outcomes`` in, in one last turn that claims nothing; logged if the store cannot."""
    try:
        turn = backend.cycle(outcomes, [], 0, worker, lease, _clock.now())
        done = await within(turn, lease, no_answer(backend, lease))
    except Exception as error:
        log.error(
            "worker %s stopped without handing in %d outcome(s) (jobs %s): %s; those jobs "
            "run again once their leases run out (within %gs)",
            worker, len(outcomes), ", ".join(o.id for o in outcomes), describe(error), lease,
            exc_info=error,
        )  # fmt: skip
        return
    leases.settle(outcomes, done.refused)


async def last_word(worker: str, call: Awaitable[None], what: str, seconds: float) -> None:
    """One of the store calls a stopping worker makes: left running if the stop is
    cancelled, given up (with a warning) if the store does not answer in time."""
    try:
        late = f"the store did not answer the worker's {what} within {seconds:g}s"
        await within(call, seconds, late, shielded=True)
    except TimeoutError as error:
        log.warning("worker %s: %s; stopping without it", worker, error)


async def end_background(tasks: Sequence[asyncio.Task[None] | None], seconds: float) -> None:
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
