"""The dashboard's shards page: how long one view takes, and the store calls it makes.

A sharded job of ``SHARDS`` shards with ``RUNS_KEPT`` runs started (the page
lists the last 20), a quarter of each run's shards running and a quarter done,
on SQLite, PostgreSQL and Redis. Each figure is the median of ``REPEAT`` views
(after one unmeasured view), with the calls the store received for one view:
the page refreshes itself every 5 s, so a view must take well under that.

``python -m benchmarks shards``; ``BATCHY_BENCH_PG`` names the PostgreSQL
server (a fresh schema in its ``test`` database, dropped after),
``BATCHY_BENCH_REDIS_URL`` the Redis database (keys under a fresh prefix,
deleted after).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from batchy.jobs import Backend, Outcome, Queue, SQLiteBackend
from batchy_contrib.dashboard import create_app

from ._util import table

SERVER = os.environ.get("BATCHY_BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
REDIS_URL = os.environ.get("BATCHY_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
SHARDS = 256
RUNS_KEPT = 20
REPEAT = int(os.environ.get("BATCHY_BENCH_RUNS", "7"))
#: The store calls counted: the reads a page of runs may make.
READS = ("runs", "job", "jobs", "status", "statuses")


def _backend(store: str) -> Backend:
    tag = uuid.uuid4().hex[:8]
    if store == "postgres":
        from batchy_contrib.jobs.postgres import PostgresBackend

        return PostgresBackend(f"{SERVER}/test", schema=f"bench_shards_{tag}")
    if store == "redis":
        from batchy_contrib.jobs.redis import RedisBackend

        return RedisBackend(REDIS_URL, prefix=f"bench-shards:{tag}:")
    return SQLiteBackend(Path(tempfile.mkdtemp(prefix="batchy-bench-shards-")) / "jobs.db")


def _count_calls(backend: Backend) -> Counter[str]:
    """A counter of the calls ``backend`` receives from now on, by method name."""
    calls: Counter[str] = Counter()
    for name in READS:
        original = getattr(backend, name, None)
        if original is None:  # (not in every version measured)
            continue

        async def counted(*args: Any, _original: Any = original, _name: str = name) -> Any:
            calls[_name] += 1
            return await _original(*args)

        setattr(backend, name, counted)
    return calls


async def _fill(backend: Backend) -> Queue:
    queue = Queue(backend)

    @queue.sharded(shards=SHARDS, name="reindex")
    async def reindex(shard: int, shards: int, cursor: object) -> None:
        return None

    for run in range(RUNS_KEPT):
        await reindex.start(f"run-{run}")
    now = time.time()
    # Half of every run's shards claimed, half of those then done.
    claims = await backend.cycle([], ["default"], RUNS_KEPT * SHARDS // 2, "bench", 3600.0, now)
    done = [
        Outcome(c.id, "done", "default", result='{"batches": 1}', keep=3600, token=c.token)
        for c in list(claims)[::2]
    ]
    await backend.cycle(done, [], 0, "bench", 3600.0, now)
    return queue


async def _run(store: str) -> tuple[float, Counter[str]]:
    """(median seconds of a view of /shards, the store calls of one view)."""
    backend = _backend(store)
    try:
        if store == "postgres":
            await backend.migrate()  # type: ignore[attr-defined]
        queue = await _fill(backend)
        app = create_app(queue, secret_key="s" * 32, refresh=0)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://dash") as client:
            assert (await client.get("/shards")).status_code == 200
            calls = _count_calls(backend)
            times = []
            for _ in range(REPEAT):
                started = time.perf_counter()
                page = await client.get("/shards")
                times.append(time.perf_counter() - started)
                assert page.status_code == 200
            return statistics.median(times), Counter({k: v // REPEAT for k, v in calls.items()})
    finally:
        await _clean(store, backend)


async def _clean(store: str, backend: Backend) -> None:
    if store == "redis":
        keys = [k async for k in backend.redis.scan_iter(match=backend.prefix + "*")]  # type: ignore[attr-defined]
        if keys:
            await backend.redis.delete(*keys)  # type: ignore[attr-defined]
    await backend.close()
    if store == "postgres":
        import psycopg

        async with await psycopg.AsyncConnection.connect(f"{SERVER}/test", autocommit=True) as c:
            await c.execute(f'DROP SCHEMA "{backend.schema}" CASCADE')  # type: ignore[attr-defined]


def main() -> None:
    rows = []
    for store in ("sqlite", "postgres", "redis"):
        seconds, calls = asyncio.run(_run(store))
        made = ", ".join(f"{n} {name}" for name, n in sorted(calls.items()) if n)
        rows.append([store, f"{seconds * 1000:.0f} ms", made])
    title = f"/shards: {RUNS_KEPT} runs of {SHARDS} shards, median of {REPEAT} views"
    print(table(title, ["store", "view", "store calls per view"], rows))


if __name__ == "__main__":
    main()
