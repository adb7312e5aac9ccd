"""Outcomes the PostgreSQL store's cycle put off: handed in again by tasks of their own.

A job's outcome that ends its ordering key's head (done or dead) needs the
key's lock, which a push holds until its transaction ends; pushed inside an
application's transaction (``connection=``), that may be a while. The worker's
turn does not wait for it: the cycle only tries such locks and returns the
outcomes it could not apply. Each batch of them is then handed in by a task
that waits for the keys in the lock's fair queue, as the key's next push does,
so the key goes on at the pace of its transactions and the worker's turns go
on meanwhile. Until then their leases are renewed with the worker's heartbeat
(the worker itself settled them); one whose lease was lost is dropped, as the
store would refuse it.

A stopping worker waits for its put-off outcomes, but not for ever: once its
heartbeat has stopped, their leases run out within one lease, after which the
store would refuse them anyway. So it waits one lease, then gives them up (their
jobs run again, as after a crash) rather than hang on a transaction that never ends.

A hand-in waiting for its key holds one of the store's pooled connections, so
only so many wait at once (half the pool): keys held by many open transactions
must not take every connection from the turns, heartbeats and enqueues. Each
waits a while (0.25 s, then twice as long each time, up to 8 s), then gives its
place to the next: a key held long does not hold up the hand-ins of keys
already free, and a wait that grows outlasts any one transaction holding its key.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from batchy.jobs import Outcome

__all__ = ["PutOff"]

log = logging.getLogger("batchy.jobs")

# A hand-in that fails (the store went away) is tried again, a little later each
# time up to _LONGEST_PAUSE, for as long as its leases hold; a warning says so
# once per _TRIES failures. At most a second, as a worker's own tries: the pause
# is slept out with the store back, and the key's next job waits for it (at 5 s,
# it started up to 5 s after the store was back).
_TRIES, _LONGEST_PAUSE = 5, 1.0
# How long one try waits for the keys, at first and at most.
_FIRST_WAIT, _LONGEST_WAIT = 0.25, 8.0


class PutOff:
    """The put-off outcomes of each worker of one store, and the tasks handing them in."""

    def __init__(
        self, hand_in: Callable[[str, list[Outcome], float], Awaitable[bool]], at_once: int
    ) -> None:
        # (worker, outcomes, seconds): one cycle that waits that long for their keys;
        # false when they were still held.
        self._hand_in = hand_in
        self._at_once = max(1, at_once)
        self._room = asyncio.Semaphore(self._at_once)  # hand-ins waiting at once
        self._held: dict[str, list[Outcome]] = {}
        self._tasks: dict[str, set[asyncio.Future[None]]] = {}
        self._lease: dict[str, float] = {}  # the worker's lease: how long settle waits

    def add(self, worker: str, outcomes: list[Outcome], lease: float) -> None:
        """Hand ``outcomes`` in as soon as their keys are free, off the worker's turn."""
        self._held.setdefault(worker, []).extend(outcomes)
        self._lease[worker] = lease
        task = asyncio.ensure_future(self._run(worker, outcomes))
        tasks = self._tasks.setdefault(worker, set())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def new_loop(self) -> None:
        """The store serves another event loop: a semaphore belongs to the one it waited on."""
        self._room = asyncio.Semaphore(self._at_once)

    def claims(self, worker: str) -> list[tuple[str, str]]:
        """``(id, token)`` of the worker's put-off outcomes: their leases to renew."""
        return [(o.id, o.token) for o in self._held.get(worker, ())]

    def lost(self, worker: str, ids: Sequence[str]) -> None:
        """Their leases moved on: the store would refuse them now."""
        held = self._held.get(worker)
        if held:
            gone = set(ids)
            self._held[worker] = [o for o in held if o.id not in gone]

    async def settle(self, worker: str) -> None:
        """Wait until the worker's put-off outcomes are in (it stops), up to one lease."""
        tasks = list(self._tasks.get(worker, ()))
        if not self._held.get(worker):  # none left to hand in (their leases were lost)
            for task in tasks:
                task.cancel()
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self._lease.get(worker, 0.0))
            if late:
                ids = sorted(o.id for o in self._held.get(worker, ()))
                log.warning(
                    "worker %s stopped with %d outcome(s) still waiting for their ordering "
                    "key, held by a transaction that has not ended (jobs %s); their leases "
                    "have run out, so their jobs run again once the key is free. Keep "
                    "transactions that enqueue ordered jobs short",
                    worker, len(ids), ", ".join(ids),
                )  # fmt: skip
                for task in late:
                    task.cancel()
                await asyncio.wait(late)
        self._held.pop(worker, None)
        self._tasks.pop(worker, None)
        self._lease.pop(worker, None)

    def cancel(self) -> None:
        """The store closes: hand-ins still waiting stop (their jobs run again after
        their leases), rather than be left pending on a loop that may close."""
        for tasks in self._tasks.values():
            for task in tasks:
                task.cancel()

    async def _run(self, worker: str, outcomes: list[Outcome]) -> None:
        wait, failures = _FIRST_WAIT, 0
        try:
            while True:
                # Only the ones still held: a lost lease's outcome would be refused.
                left = self._left(worker, outcomes)
                if not left:
                    return
                try:
                    async with self._room:
                        left = self._left(worker, outcomes)
                        if not left or await self._hand_in(worker, left, wait):
                            return
                    wait = min(2 * wait, _LONGEST_WAIT)  # still held: others' turn first
                    continue
                except Exception as error:
                    # Tried again for as long as the leases hold (the heartbeat renews
                    # them, and drops the outcomes of one lost): giving up here ran a
                    # finished job again on a live worker after a few seconds of
                    # failover. Said once per _TRIES failures.
                    failures += 1
                    if failures % _TRIES == 0:
                        log.warning(
                            "worker %s: %d outcome(s) put off while their ordering key was "
                            "held could not be handed in yet (%s); trying again while "
                            "their leases hold",
                            worker, len(left), error,
                        )  # fmt: skip
                await asyncio.sleep(min(_LONGEST_PAUSE, 0.1 * 2**failures))
        finally:
            held = self._held.get(worker)
            if held is not None:
                self._held[worker] = [o for o in held if o not in outcomes]

    def _left(self, worker: str, outcomes: list[Outcome]) -> list[Outcome]:
        return [o for o in outcomes if o in self._held.get(worker, ())]
