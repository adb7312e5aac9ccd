"""Ordered and sharded jobs: what per-key order costs, and how sharded work scales with workers.

- no-op jobs/s in one worker (concurrency 100) on Redis and on SQLite: unordered,
  ordered over 200 active keys, and ordered on 1 hot key (strictly one at a time,
  so one store round trip per job: the floor of per-key order);
- sharded rows/s marking 100,000 MariaDB orders (examples/sharded_orders.py) with
  1, 2 and 3 worker processes.

``python -m benchmarks ordered``
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from batchy.jobs import Backend, Queue, SQLiteBackend, Worker

from ._util import table

ROOT = Path(__file__).resolve().parents[1]
REDIS_URL = "redis://127.0.0.1:6379/12"
JOBS = 5_000
HOT_JOBS = 2_000  # one key runs one job per round trip: fewer jobs, same measure
CONCURRENCY = 100
ROWS = 100_000


def _backend(store: str) -> Backend:
    if store == "redis":
        from batchy_contrib.jobs.redis import RedisBackend

        return RedisBackend(REDIS_URL, prefix=f"bench-ordered:{uuid.uuid4().hex[:8]}:")
    path = Path(tempfile.mkdtemp(prefix="batchy-bench-ordered-")) / "jobs.db"
    return SQLiteBackend(path)


async def _jobs_per_s(store: str, keys: int | None, n: int) -> float:
    queue = Queue(_backend(store))

    @queue.job(name="noop", ordered_by="key" if keys else None)
    async def noop(key: int) -> None:
        return None

    try:
        calls = [noop.call(i % keys if keys else i) for i in range(n)]
        for i in range(0, n, 1000):
            await queue.enqueue_many(calls[i : i + 1000])
        worker = Worker(queue, concurrency=CONCURRENCY, poll_interval=0.01, burst=True)
        started = time.perf_counter()
        await worker.run()
        elapsed = time.perf_counter() - started
        if worker.processed != n:
            raise RuntimeError(f"{store} keys={keys}: {worker.processed} of {n} jobs ran")
        return n / elapsed
    finally:
        redis = getattr(queue.backend, "redis", None)
        if redis is not None:
            found = [k async for k in redis.scan_iter(match=queue.backend.prefix + "*")]  # type: ignore[attr-defined]
            if found:
                await redis.delete(*found)
        await queue.close()


def _ordered_table() -> str:
    body = []
    for store in ("redis", "sqlite"):
        unordered = asyncio.run(_jobs_per_s(store, None, JOBS))
        keyed = asyncio.run(_jobs_per_s(store, 200, JOBS))
        hot = asyncio.run(_jobs_per_s(store, 1, HOT_JOBS))
        body.append(
            [
                store,
                f"{unordered:,.0f}",
                f"{keyed:,.0f} ({keyed / unordered:.0%})",
                f"{hot:,.0f}",
            ]
        )
    return table(
        f"no-op jobs/s, one worker process, concurrency {CONCURRENCY} ({JOBS:,} jobs; "
        f"hot key {HOT_JOBS:,})",
        ["store", "unordered", "ordered, 200 keys", "ordered, 1 hot key"],
        body,
    )


def _sharded_table() -> str:
    sys.path.insert(0, str(ROOT / "examples"))
    import sharded_orders

    async def measure(workers: int) -> dict[str, Any]:
        try:
            return await sharded_orders.run(ROWS, workers)
        finally:
            await sharded_orders.close()

    body = []
    for workers in (1, 2, 3):
        figures = asyncio.run(measure(workers))
        if figures["missed"] or figures["updates"] != ROWS:
            raise RuntimeError(f"sharded run with {workers} workers: {figures}")
        body.append([workers, f"{figures['seconds']:.2f} s", f"{figures['rows_per_s']:,.0f}"])
    return table(
        f"sharded job: mark {ROWS:,} MariaDB orders ({sharded_orders.SHARDS} shards, batches "
        f"of {sharded_orders.BATCH}, a customer lookup per row, batched)",
        ["worker processes", "time", "rows/s"],
        body,
    )


def main() -> None:
    print(_ordered_table(), flush=True)
    print(_sharded_table(), flush=True)


if __name__ == "__main__":
    main()
