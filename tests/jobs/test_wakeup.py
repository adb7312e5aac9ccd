"""Idle workers wake on new work: a push, a due time, a burst for many workers; never a lost wake-up.

Every worker here polls only every 5 s (``poll_interval=5``), so a test that
sees a job start well within a second shows the wake-up, not the poll. These
check that wake-ups happen, not how fast: the bounds are generous.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from batchy.jobs import Backend, Queue, Retry, SQLiteBackend, Worker

pytestmark = pytest.mark.timeout(60)

POLL = 5.0  # the old worker found new work only this often
PROMPT = 1.0  # a woken worker starts the job long before that


async def started_within(events: list[float], count: int, timeout: float) -> None:
    """Until ``count`` jobs have started (fails after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while len(events) < count:
        assert time.monotonic() < deadline, f"only {len(events)} of {count} jobs started"
        await asyncio.sleep(0.005)


class Running:
    """Workers on ``queue`` for the length of an ``async with`` block, given time to go idle."""

    def __init__(self, queue: Queue, count: int = 1, **options: object) -> None:
        options.setdefault("poll_interval", POLL)
        options.setdefault("concurrency", 10)
        self.workers = [Worker(queue, **options) for _ in range(count)]  # type: ignore[arg-type]
        self.tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> list[Worker]:
        self.tasks = [asyncio.create_task(w.run()) for w in self.workers]
        await asyncio.sleep(0.3)  # each has looked at the store and waits
        return self.workers

    async def __aexit__(self, *exc: object) -> None:
        for worker in self.workers:
            worker.stop()
        await asyncio.wait_for(asyncio.gather(*self.tasks), 10)


async def test_an_idle_worker_starts_a_job_enqueued_in_its_process(queue: Queue) -> None:
    lags: list[float] = []

    @queue.job
    async def stamp(sent: float) -> None:
        lags.append(time.time() - sent)

    async with Running(queue):
        for _ in range(3):
            await stamp.enqueue(time.time())
            await started_within(lags, len(lags) + 1, PROMPT)
            await asyncio.sleep(0.1)  # idle again
    assert max(lags) < PROMPT


async def test_a_delayed_job_starts_at_its_due_time_not_at_the_next_poll(queue: Queue) -> None:
    started: list[float] = []

    @queue.job
    async def later() -> None:
        started.append(time.time())

    async with Running(queue):
        due = time.time() + 0.4
        await later.options(at=due).enqueue()
        await started_within(started, 1, 3.0)
    assert due - 0.05 <= started[0] < due + 0.5


async def test_a_retry_runs_at_its_due_time(queue: Queue) -> None:
    started: list[float] = []

    @queue.job(retries=1)
    async def flaky() -> None:
        started.append(time.time())
        if len(started) == 1:
            raise Retry(delay=0.3)

    async with Running(queue):
        await flaky.enqueue()
        await started_within(started, 2, 3.0)
    assert 0.25 <= started[1] - started[0] < 0.3 + PROMPT


async def test_a_burst_reaches_every_idle_worker(queue: Queue) -> None:
    # Three workers with room for two jobs each; one already runs a long job, so
    # its wait on the store is out while it has room for one more. Five more long
    # jobs arrive at once: whoever takes the wake-up cannot take them all, and
    # must pass it on, or some would wait for a poll or the first job's end.
    started: list[float] = []

    @queue.job
    async def long(tag: int) -> None:
        started.append(time.time())
        await asyncio.sleep(3.0)

    async with Running(queue, 3, concurrency=2, shutdown_timeout=0):
        await long.enqueue(0)
        await started_within(started, 1, PROMPT)
        await asyncio.sleep(0.1)
        sent = time.time()
        await queue.enqueue_many(long.call(i) for i in range(1, 6))
        await started_within(started, 6, 2.0)
    assert max(started) - sent < PROMPT


async def test_no_wake_up_is_lost(queue: Queue) -> None:
    # Pushes land at random points of the worker's turn: while it settles the
    # last job, between its look at the store and its wait, while it waits.
    rng = random.Random(12)
    lags: list[float] = []

    @queue.job
    async def stamp(sent: float) -> None:
        lags.append(time.time() - sent)

    sent = 0
    async with Running(queue, concurrency=2):
        for i in range(40):
            await asyncio.sleep(rng.choice([0, 0, 0.0005, 0.002, 0.01]))
            for _ in range(1 if rng.random() < 0.7 else 2):  # sometimes two in a row
                await stamp.enqueue(time.time())
                sent += 1
            await started_within(lags, sent, PROMPT)
            if i % 10 == 9:
                await asyncio.sleep(0.05)
    assert max(lags) < PROMPT


# -- another process enqueues ---------------------------------------------------------

ENQUEUE = """
import sys, time
from batchy.jobs import Queue, SQLiteBackend
store, prefix = sys.argv[1], sys.argv[2]
if store.startswith("redis://"):
    from batchy_contrib.jobs.redis import RedisBackend
    backend = RedisBackend(store, prefix=prefix)
else:
    backend = SQLiteBackend(store)
queue = Queue(backend)

@queue.job(name="stamp")
async def stamp(sent: float) -> None: ...

for _ in range(3):
    stamp.enqueue_sync(time.time())
    time.sleep(0.2)
"""


@pytest.fixture(params=["sqlite", "redis"])
async def shared(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """A store two processes can share: a SQLite file, or Redis db 11 under a fresh prefix."""
    prefix = f"wtest:{uuid.uuid4().hex[:8]}:"
    if request.param == "sqlite":
        yield str(tmp_path / "jobs.db"), prefix
        return
    host, port = request.getfixturevalue("redis_server")
    yield f"redis://{host}:{port}/11", prefix
    import redis

    client = redis.Redis(host=host, port=port, db=11)
    keys = list(client.scan_iter(match=prefix + "*"))
    if keys:
        client.delete(*keys)
    client.close()


async def test_an_idle_worker_starts_a_job_enqueued_by_another_process(
    shared: tuple[str, str],
) -> None:
    store, prefix = shared
    if store.startswith("redis://"):
        from batchy_contrib.jobs.redis import RedisBackend

        queue = Queue(RedisBackend(store, prefix=prefix))
    else:
        queue = Queue(SQLiteBackend(store))
    lags: list[float] = []

    @queue.job(name="stamp")
    async def stamp(sent: float) -> None:
        lags.append(time.time() - sent)

    try:
        async with Running(queue, 2):
            root = Path(__file__).resolve().parents[2]
            env = {**os.environ, "PYTHONPATH": str(root)}
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", ENQUEUE, store, prefix, env=env,
                stderr=subprocess.PIPE,
            )  # fmt: skip
            _, err = await asyncio.wait_for(proc.communicate(), 30)
            assert proc.returncode == 0, err.decode()
            await started_within(lags, 3, PROMPT)
    finally:
        await queue.backend.close()
    assert max(lags) < PROMPT


# -- Redis: what an idle worker costs --------------------------------------------------


async def test_an_idle_worker_has_one_blocking_command_in_redis(
    redis_server: tuple[str, int],
) -> None:
    import redis.asyncio as aioredis

    from batchy_contrib.jobs.redis import RedisBackend

    host, port = redis_server
    name = f"wtest-{uuid.uuid4().hex[:8]}"
    client = aioredis.Redis(host=host, port=port, db=11, decode_responses=True, client_name=name)
    backend = RedisBackend(client, prefix=f"wtest:{uuid.uuid4().hex[:8]}:")
    queue = Queue(backend)

    @queue.job
    async def noop() -> None:
        return None

    admin = aioredis.Redis(host=host, port=port, decode_responses=True)
    blocked: list[int] = []
    try:
        # A short poll interval: the wait is renewed several times while we look.
        async with Running(queue, 2, poll_interval=0.2):
            for _ in range(30):
                clients = await admin.client_list()
                mine = [c for c in clients if c.get("name") == name]
                blocked.append(sum("b" in c["flags"] for c in mine))
                await asyncio.sleep(0.05)
    finally:
        keys = [k async for k in client.scan_iter(match=backend.prefix + "*")]
        if keys:
            await client.delete(*keys)
        await backend.close()
        await admin.aclose()
    # Two idle workers: one blocking command each, never more, and nothing else.
    assert max(blocked) == 2, blocked
    assert blocked.count(2) > len(blocked) / 2, blocked


async def test_an_idle_worker_wakes_when_a_dead_workers_lease_runs_out(backend: Backend) -> None:
    """Nobody rings when a lease runs out: the idle worker wakes for it, not at its next poll."""
    queue = Queue(backend)

    @queue.job(name="lease_noted")
    async def noted() -> None:
        return None

    handle = await noted.enqueue()
    # A worker that claims the job with a short lease and then dies.
    claimed = await backend.cycle([], ["default"], 1, "dead-worker", 0.3, time.time())
    assert [c.id for c in claimed] == [handle.id]
    survivor = Worker(queue, poll_interval=30.0, lease=5.0)
    running = asyncio.ensure_future(survivor.run())
    start = time.monotonic()
    try:
        while (await handle.status()).state != "done":
            assert time.monotonic() - start < 3.0, "the job waited for the survivor's next poll"
            await asyncio.sleep(0.02)
    finally:
        survivor.stop()
        await running
