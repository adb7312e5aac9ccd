"""Jobs claimed ahead of a free slot (``Worker(prefetch=N)``), on every store."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any

import pytest

import batchy
from batchy.jobs import ConfigError, JobEvent, JobHook, Queue, Worker
from batchy.jobs._outage import launch
from batchy.testing import record

from .conftest import fast_worker

pytestmark = pytest.mark.timeout(60)


async def wait_until(check: Any, timeout: float = 10.0) -> None:
    """Until ``check()`` (a bool, or an awaitable of one) is true."""
    deadline = time.monotonic() + timeout
    while not ((await result) if inspect.isawaitable(result := check()) else result):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def states(queue: Queue, handles: list[Any]) -> list[str]:
    return [(await h.status()).state for h in handles]


async def test_jobs_claimed_ahead_still_batch_their_loads_in_full(queue: Queue) -> None:
    @batchy.batched
    async def users_by_id(ids: list[int]) -> list[int]:
        await asyncio.sleep(0.001)
        return list(ids)

    @queue.job
    async def load_user(uid: int) -> int:
        return await users_by_id(uid)  # type: ignore[no-any-return]

    claims: list[int] = []
    cycle = queue.backend.cycle

    async def counted(*args: Any, **kwargs: Any) -> Any:
        got = await cycle(*args, **kwargs)
        claims.append(len(got))
        return got

    queue.backend.cycle = counted  # type: ignore[method-assign]
    await queue.enqueue_many(load_user.call(i) for i in range(1000))
    worker = fast_worker(queue, burst=True, concurrency=100, prefetch=100)
    with record() as rec:
        await worker.run()
    assert worker.processed == 1000
    assert max(claims) == 200  # the first turn claimed a slot's worth ahead
    calls = rec.calls(users_by_id)
    assert sorted(k for c in calls for k in c) == list(range(1000))
    assert len(calls) <= 13, rec.report()


async def test_jobs_claimed_ahead_run_while_the_next_turn_travels(queue: Queue) -> None:
    """What prefetch is for: a batch of claims waits until the next turn is on its way.

    Before, the claims a turn brought back began at once, before the next turn
    left: that batch ran while no turn was in flight, and the store sat idle.
    """
    in_flight = [0]
    cycle = queue.backend.cycle

    async def slow_turn(*args: Any, **kwargs: Any) -> Any:
        in_flight[0] += 1
        try:
            await asyncio.sleep(0.005)  # a round trip to a store on another machine
            return await cycle(*args, **kwargs)
        finally:
            in_flight[0] -= 1

    queue.backend.cycle = slow_turn  # type: ignore[method-assign]
    began: list[bool] = []

    class Began(JobHook):
        # A run's first step (decoding, hooks) is work too: it must overlap as well.
        def job_started(self, event: JobEvent) -> None:
            began.append(in_flight[0] > 0)

    @queue.job
    async def tick(i: int) -> None:
        pass

    await queue.enqueue_many(tick.call(i) for i in range(600))
    worker = fast_worker(queue, burst=True, concurrency=50, prefetch=50, hooks=[Began()])
    await worker.run()
    assert worker.processed == 600
    # Every batch but the last began while a turn travelled (before: half of them).
    assert began.count(False) <= 50, began.count(False)


async def test_a_turn_leaves_before_the_jobs_claimed_ahead_begin(queue: Queue) -> None:
    """The turn takes its first step before the worker starts the batch ahead.

    That step sends the request on PostgreSQL (redis-py writes a few steps later).

    Starting a run costs about 10 µs of CPU; before, a batch of 100 was started
    between making the turn and its first step, so every turn reached the store
    a millisecond late (on PostgreSQL, 1.2 ms between turns, now 0.3 ms).
    """
    made, stepped = [0], [0]
    cycle = queue.backend.cycle

    def turn(*args: Any, **kwargs: Any) -> Any:
        made[0] += 1
        return first_step(*args, **kwargs)

    async def first_step(*args: Any, **kwargs: Any) -> Any:
        stepped[0] += 1  # where a store sends its request
        return await cycle(*args, **kwargs)

    queue.backend.cycle = turn  # type: ignore[method-assign]

    @queue.job
    async def tick(i: int) -> None:
        pass

    await queue.enqueue_many(tick.call(i) for i in range(300))
    worker = fast_worker(queue, burst=True, concurrency=50, prefetch=50)
    begin = worker._running.begin
    late: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> None:
        if stepped[0] < made[0]:
            late.append(made[0])
        begin(*args, **kwargs)

    worker._running.begin = counted  # type: ignore[method-assign]
    await worker.run()
    assert worker.processed == 300
    assert made[0] >= 6
    assert late == []


async def test_a_turn_whose_worker_is_killed_as_it_leaves_ends_with_it() -> None:
    """A cancel during launch's one step cancels the turn too, and nothing is left to log."""
    reported: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: reported.append(context))
    worker: list[asyncio.Future[None]] = []

    async def turn() -> None:
        worker[0].cancel()  # killed as the turn leaves: launch has not returned yet
        await asyncio.sleep(10)

    async def worker_loop() -> None:
        call = await launch(turn())
        await call

    worker.append(asyncio.ensure_future(worker_loop()))
    with pytest.raises(asyncio.CancelledError):
        await worker[0]
    await asyncio.sleep(0.01)
    left = [t for t in asyncio.all_tasks() if getattr(t.get_coro(), "__name__", "") == "turn"]
    assert left == [] and reported == []


async def test_stop_hands_back_the_jobs_claimed_ahead_at_once(queue: Queue) -> None:
    started: list[int] = []

    @queue.job
    async def stuck(x: int) -> None:
        started.append(x)
        await asyncio.sleep(30)

    handles = [await stuck.enqueue(i) for i in range(4)]
    worker = fast_worker(queue, concurrency=1, prefetch=3, shutdown_timeout=0.1)
    task = asyncio.create_task(worker.run())
    await wait_until(lambda: worker.stats()["waiting"] == 3)
    assert started == [0] and await states(queue, handles) == ["running"] * 4

    # Leased to this worker, they count as its running jobs in `batchy info`.
    (info,) = await queue.admin.workers()
    assert sorted(info.running) == sorted(h.id for h in handles)
    worker.stop()
    await asyncio.wait_for(task, 10)
    assert started == [0]
    assert await states(queue, handles) == ["queued"] * 4  # not after a lease


async def test_quiet_hands_back_the_jobs_claimed_ahead(queue: Queue) -> None:
    gate = asyncio.Event()
    started: list[int] = []

    @queue.job
    async def held(x: int) -> None:
        started.append(x)
        await gate.wait()

    handles = [await held.enqueue(i) for i in range(3)]
    worker = fast_worker(queue, concurrency=1, prefetch=2)
    task = asyncio.create_task(worker.run())
    await wait_until(lambda: worker.stats()["waiting"] == 2)
    worker.quiet()

    async def handed_back() -> bool:
        return await states(queue, handles) == ["running", "queued", "queued"]

    await wait_until(handed_back)
    gate.set()
    await wait_until(lambda: worker.processed == 1)
    worker.stop()
    await asyncio.wait_for(task, 10)
    assert started == [0] and worker.stats()["waiting"] == 0


async def test_a_job_cancelled_while_claimed_ahead_ends_cancelled_and_never_runs(
    queue: Queue,
) -> None:
    gate = asyncio.Event()
    started: list[int] = []

    @queue.job(retries=5)
    async def held(x: int) -> None:
        started.append(x)
        await gate.wait()

    first, second = await held.enqueue(1), await held.enqueue(2)
    worker = fast_worker(queue, concurrency=1, prefetch=1)
    task = asyncio.create_task(worker.run())
    await wait_until(lambda: worker.stats()["waiting"] == 1)
    assert await queue.admin.cancel(second.id) == 1

    async def dead() -> bool:
        return (await second.status()).state == "dead"

    await wait_until(dead)
    shown = await queue.admin.job(second.id)
    assert shown.state == "cancelled" and shown.attempts == 1
    assert shown.error.startswith("cancelled by an operator")
    assert "CancelledError: before it began" in shown.traceback
    gate.set()
    await wait_until(lambda: worker.processed == 2)
    worker.stop()
    await asyncio.wait_for(task, 10)
    assert started == [1]  # the cancelled one never ran
    assert (await first.status()).state == "done"


async def test_the_heartbeat_keeps_jobs_claimed_ahead_leased(queue: Queue) -> None:
    # The second job waits 1.5 s for the slot, three leases long: renewed, no other
    # worker takes it, and it runs once.
    ran: list[int] = []

    @queue.job
    async def slow(x: int) -> None:
        ran.append(x)
        if x == 0:
            await asyncio.sleep(1.5)

    await slow.enqueue(0)
    await slow.enqueue(1)
    first = fast_worker(queue, concurrency=1, prefetch=1, lease=0.5)
    first_run = asyncio.create_task(first.run())
    await wait_until(lambda: first.stats()["waiting"] == 1)
    other = fast_worker(queue, concurrency=5, lease=0.5)
    other_run = asyncio.create_task(other.run())
    await wait_until(lambda: first.processed == 2)
    first.stop()
    other.stop()
    await asyncio.wait_for(asyncio.gather(first_run, other_run), 10)
    assert ran == [0, 1] and other.processed == 0


def test_prefetch_must_be_a_count(queue: Queue) -> None:
    with pytest.raises(ConfigError) as caught:
        Worker(queue, prefetch=-1)
    assert str(caught.value) == (
        "Worker prefetch=-1 must be an int >= 0 (jobs claimed ahead of a free slot; 0, "
        "the default, claims only for free slots)"
    )
