"""Fixtures of the job tests: one ``backend`` fixture run on memory, SQLite and Redis (db 11)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from batchy.jobs import Backend, MemoryBackend, Queue, SQLiteBackend, Worker

REDIS_DB = 11


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def backend(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[Backend]:
    if request.param == "memory":
        store: Backend = MemoryBackend()
    elif request.param == "sqlite":
        store = SQLiteBackend(tmp_path / "jobs.db")
    else:
        host, port = request.getfixturevalue("redis_server")
        from batchy_contrib.redis_jobs import RedisBackend

        store = RedisBackend(
            f"redis://{host}:{port}/{REDIS_DB}", prefix=f"test:{uuid.uuid4().hex[:8]}:"
        )
    yield store
    if request.param == "redis":
        keys = [k async for k in store.redis.scan_iter(match=store.prefix + "*")]  # type: ignore[attr-defined]
        if keys:
            await store.redis.delete(*keys)  # type: ignore[attr-defined]
    await store.close()


@pytest.fixture
def queue(backend: Backend) -> Queue:
    return Queue(backend)


def fast_worker(queue: Queue, **options):
    """A worker with test-sized intervals."""
    options.setdefault("poll_interval", 0.02)
    options.setdefault("lease", 2.0)
    options.setdefault("concurrency", 10)
    return Worker(queue, **options)
