"""Redis-only checks: data written straight into Redis, and the key layout staying tidy."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import pytest

from batchy.jobs import Queue, Worker

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def rqueue(redis_server: tuple[str, int]) -> AsyncIterator[Queue]:
    from batchy_contrib.jobs.redis import RedisBackend

    host, port = redis_server
    backend = RedisBackend(f"redis://{host}:{port}/11", prefix=f"rtest:{uuid.uuid4().hex[:8]}:")
    yield Queue(backend)
    keys = [k async for k in backend.redis.scan_iter(match=backend.prefix + "*")]
    if keys:
        await backend.redis.delete(*keys)
    await backend.close()


async def test_raw_redis_writes_never_crash_a_worker(rqueue: Queue) -> None:
    backend = rqueue.backend
    r, p = backend.redis, backend.prefix  # type: ignore[attr-defined]

    @rqueue.job
    async def ok() -> str:
        return "fine"

    handle = await ok.enqueue()
    # An id with no payload (someone deleted it by hand), a garbage payload, and
    # a payload naming a job nobody declares.
    await r.rpush(p + "q:default", "orphan")
    await r.hset(p + "jobs", "garbage", "\x00\x01 not json")
    await r.hset(p + "meta", "garbage", f"default\t{time.time()}")
    await r.rpush(p + "q:default", "garbage")
    await r.hset(p + "jobs", "ghost", '{"job": "ghost", "args": [], "kwargs": {}}')
    await r.hset(p + "meta", "ghost", f"default\t{time.time()}")
    await r.rpush(p + "q:default", "ghost")
    await Worker(rqueue, burst=True, poll_interval=0.01).run()
    assert await handle.result() == "fine"
    reasons = {d.id: d.reason for d in await rqueue.dead_jobs()}
    assert set(reasons) == {"garbage", "ghost"}
    assert "cannot be decoded" in reasons["garbage"] and "'ghost'" in reasons["ghost"]


async def test_finished_jobs_leave_only_their_kept_result(rqueue: Queue) -> None:
    backend = rqueue.backend
    r, p = backend.redis, backend.prefix  # type: ignore[attr-defined]

    @rqueue.job(keep_result=0)
    async def noop(i: int) -> None:
        return None

    await rqueue.enqueue_many(noop.call(i) for i in range(100))
    await Worker(rqueue, burst=True, poll_interval=0.01, concurrency=50).run()
    assert await r.hlen(p + "jobs") == 0
    assert await r.hlen(p + "meta") == 0
    assert await r.zcard(p + "leases") == 0
    assert await r.hlen(p + "owner") == 0
    assert [k async for k in r.scan_iter(match=p + "result:*")] == []
