"""A worker's stop under a failing store: it always returns, raises nothing, and loses no job.

Whatever the store does while the worker runs and stops (a call that raises, a
call that is slow, a call that never answers, at any of its steps: turns, heartbeats, counters, the
last goodbye), ``stop()`` makes ``run()`` return within a bound, without an
exception; and once the store answers again, every job enqueued ends done,
having run at least once (a job whose outcome the store never took runs again
after its lease).
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchy.jobs import Queue

from .conftest import FaultyStore, fast_worker

pytestmark = pytest.mark.timeout(120)

FAULTS = st.lists(st.sampled_from([None, None, "raise", "slow", "hang"]), min_size=1, max_size=40)
LEASE = 0.3
# The longest a stop may take: the running jobs' grace (shutdown_timeout), the
# worker's end (one heartbeat or 1 s for the background tasks, as much for the
# runs' clean-up) and slow store calls on the way.
BOUND = 4.0


class FailingStore(FaultyStore):
    """A memory store whose steps fail or dawdle as ``faults`` says, one fault per call."""

    def __init__(self, faults: list[str | None]) -> None:
        super().__init__()
        self.faults = faults
        self.calls = 0
        self.healthy = False

    async def fault(self, step: str) -> None:
        if self.healthy:
            return
        fault = self.faults[self.calls % len(self.faults)]
        self.calls += 1
        if fault == "slow":
            await asyncio.sleep(0.05)
        elif fault == "raise":
            raise ConnectionError(f"{step}: connection refused")
        elif fault == "hang":  # a connection dropped without a word: no answer, ever
            await asyncio.Event().wait()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    faults=FAULTS,
    jobs=st.integers(1, 12),
    work=st.sampled_from([0.0, 0.05, 0.2, 0.6]),
    stop_after=st.floats(0.0, 0.3),
)
async def test_a_stop_returns_and_loses_nothing_whatever_the_store_does(
    faults: list[str | None], jobs: int, work: float, stop_after: float
) -> None:
    store = FailingStore(faults)
    queue = Queue(store)
    runs: dict[int, int] = {}

    @queue.job(name="work")
    async def work_job(i: int) -> None:
        runs[i] = runs.get(i, 0) + 1
        await asyncio.sleep(work)

    handles = await queue.enqueue_many(work_job.call(i) for i in range(jobs))
    worker = fast_worker(queue, lease=LEASE, shutdown_timeout=0.2, concurrency=4)
    task = asyncio.create_task(worker.run())
    await asyncio.sleep(stop_after)
    worker.stop()
    began = time.monotonic()
    # Store errors are logged, as they should be; none may escape run().
    logging.getLogger("batchy.jobs").setLevel(logging.CRITICAL)
    try:
        await asyncio.wait_for(task, BOUND + 2)
    finally:
        logging.getLogger("batchy.jobs").setLevel(logging.NOTSET)
    assert time.monotonic() - began < BOUND
    # Nothing lost: with the store back and the leases run out, all end done.
    store.healthy = True
    await asyncio.sleep(LEASE + 0.05)
    await fast_worker(queue, burst=True, lease=LEASE).run()
    assert sorted(runs) == list(range(jobs))
    assert [(await h.status()).state for h in handles] == ["done"] * jobs


def test_the_store_used_above_fails_as_drawn() -> None:
    # The test above means something only if the faults reach the worker.
    store = FailingStore(["raise"])
    with pytest.raises(ConnectionError, match="cycle: connection refused"):
        asyncio.run(store.cycle([], [], 0, "w", 1.0, 0.0))
    assert store.calls == 1
