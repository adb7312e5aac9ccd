"""The store's clock decides, on every store: a worker or client whose clock is 10 s off changes nothing.

Each test shifts the clock of one party only (a worker, an enqueuing client):
:func:`batchy.jobs._clock.now` reads a context variable that the party's task
(and every task it starts) carries, so the others in the process keep the true time.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import time
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

import pytest

from batchy.jobs import Queue, Worker, _clock

from .conftest import fast_worker

pytestmark = pytest.mark.timeout(60)

T = TypeVar("T")

SKEW: contextvars.ContextVar[float] = contextvars.ContextVar("skew", default=0.0)


@pytest.fixture(autouse=True)
def skewable_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(_clock, "now", lambda: time.time() + SKEW.get())
    yield


def skewed(coro: Awaitable[T], skew: float) -> asyncio.Task[T]:
    """Run ``coro`` in a task whose clock (and its tasks' clocks) is ``skew`` seconds off."""
    context = contextvars.copy_context()
    context.run(SKEW.set, skew)

    async def run() -> T:
        return await coro

    return asyncio.create_task(run(), context=context)


async def stop(*pairs: tuple[Worker, asyncio.Task[Any]]) -> None:
    for worker, task in pairs:
        worker.stop()
    for _, task in pairs:
        await task


@pytest.mark.parametrize("skew", [10.0, -10.0])
async def test_a_skewed_worker_never_takes_a_live_workers_job(queue: Queue, skew: float) -> None:
    """10 s fast, it used to see every other worker's lease as run out; 10 s slow,
    its own leases looked run out to every other worker."""
    runs: list[int] = []

    @queue.job
    async def slow(n: int) -> None:
        runs.append(n)
        await asyncio.sleep(0.8)

    await queue.enqueue_many(slow.call(n) for n in range(4))
    honest = fast_worker(queue, lease=0.5, heartbeat=0.1, concurrency=2)
    off = fast_worker(queue, lease=0.5, heartbeat=0.1, concurrency=2)
    honest_task = asyncio.create_task(honest.run())
    off_task = skewed(off.run(), skew)
    while len(runs) < 4:
        await asyncio.sleep(0.02)
    info = await queue.info()
    assert {w.id for w in info.workers} == {honest.id, off.id}  # both alive to `batchy info`
    await asyncio.sleep(1.2)
    await stop((honest, honest_task), (off, off_task))
    assert sorted(runs) == [0, 1, 2, 3]  # each once: no lease was taken from a live worker


@pytest.mark.parametrize("skew", [10.0, -10.0])
async def test_delays_count_on_the_stores_clock(queue: Queue, skew: float) -> None:
    ran: list[str] = []

    @queue.job
    async def remind(who: str) -> None:
        ran.append(who)

    # A client with a wrong clock enqueues "in 0.5 s"; so does an honest one, and an
    # honest worker and a wrong one both look for work at once.
    await skewed(remind.options(delay=0.5).enqueue("from a skewed client"), skew)
    await remind.options(delay=0.5).enqueue("from an honest client")
    await fast_worker(queue, burst=True).run()
    await skewed(fast_worker(queue, burst=True).run(), skew)
    assert ran == []
    info = (await queue.info()).queues[0]
    assert (info.size, info.scheduled) == (0, 2)
    await asyncio.sleep(0.6)
    await skewed(fast_worker(queue, burst=True).run(), skew)
    assert sorted(ran) == ["from a skewed client", "from an honest client"]


@pytest.mark.parametrize("skew", [10.0, -10.0])
async def test_a_retry_backs_off_on_the_stores_clock(queue: Queue, skew: float) -> None:
    runs: list[float] = []

    @queue.job(retries=1, backoff=lambda n, e: 0.5)
    async def flaky() -> None:
        runs.append(time.monotonic())
        if len(runs) == 1:
            raise RuntimeError("once")

    handle = await flaky.enqueue()
    off = fast_worker(queue)
    off_task = skewed(off.run(), skew)
    assert await handle.result(timeout=5) is None
    await stop((off, off_task))
    assert 0.45 <= runs[1] - runs[0] < 1.5


@pytest.mark.parametrize("skew", [10.0, -10.0])
async def test_ordered_keys_never_overlap_with_a_skewed_worker(queue: Queue, skew: float) -> None:
    spans: dict[int, list[tuple[float, float]]] = {}

    @queue.job(ordered_by="key")
    async def step(key: int, seq: int) -> None:
        start = time.monotonic()
        await asyncio.sleep(0.15)
        spans.setdefault(seq, []).append((start, time.monotonic()))

    await queue.enqueue_many(step.call(1, seq) for seq in range(6))
    honest = fast_worker(queue, lease=0.5, heartbeat=0.1)
    off = fast_worker(queue, lease=0.5, heartbeat=0.1)
    honest_task = asyncio.create_task(honest.run())
    off_task = skewed(off.run(), skew)
    while len(spans) < 6:
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)
    await stop((honest, honest_task), (off, off_task))
    assert all(len(runs) == 1 for runs in spans.values()), spans  # each ran once
    order = [spans[seq][0] for seq in range(6)]
    assert all(before[1] <= after[0] for before, after in itertools.pairwise(order)), order
