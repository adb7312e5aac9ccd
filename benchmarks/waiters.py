"""``result()`` waiters: the store reads they cost while they wait, and how soon they see a result.

For 1, 10 and 200 waiters, each on a job of its own (running: claimed by this
process, so no worker's reads mix in), with the default ``poll=0.05``, on
SQLite and on Redis:

- reads/s: calls the store received (``status`` and ``statuses``) per second
  over one second of waiting;
- latency: from the moment a job's outcome is sent to the store until its
  ``result()`` returns, the median over the waiters; the jobs end in up to 10
  groups (one ``cycle`` each), each at a random point of the poll.

Each figure is the median of ``RUNS`` runs. ``python -m benchmarks waiters``;
``BATCHY_BENCH_REDIS_URL`` names the Redis database (keys under a fresh prefix,
deleted after).
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from batchy.jobs import Backend, Envelope, JobStatus, Outcome, Queue, SQLiteBackend

from ._util import table

REDIS_URL = os.environ.get("BATCHY_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12")
WAITERS = (1, 10, 200)
RUNS = int(os.environ.get("BATCHY_BENCH_RUNS", "5"))
POLL = 0.05
WINDOW = 1.0  # seconds of waiting counted


def _backend(store: str) -> Backend:
    if store == "redis":
        from batchy_contrib.jobs.redis import RedisBackend

        return RedisBackend(REDIS_URL, prefix=f"bench-waiters:{uuid.uuid4().hex[:8]}:")
    return SQLiteBackend(Path(tempfile.mkdtemp(prefix="batchy-bench-waiters-")) / "jobs.db")


def _count_reads(backend: Backend) -> list[int]:
    """A list that grows by one for each read ``backend`` receives from now on."""
    reads: list[int] = []
    status = backend.status
    statuses = getattr(backend, "statuses", None)  # (not in every version measured)

    async def one(job_id: str, now: float) -> JobStatus:
        reads.append(1)
        return await status(job_id, now)

    async def many(job_ids: Sequence[str], now: float) -> list[JobStatus]:
        reads.append(1)
        return await statuses(job_ids, now)  # type: ignore[misc]

    backend.status = one  # type: ignore[method-assign]
    if statuses is not None:
        backend.statuses = many  # type: ignore[method-assign]
    return reads


async def _run(store: str, waiters: int) -> tuple[float, float]:
    """(reads/s while waiting, median seconds from outcome to result) of one run."""
    backend = _backend(store)
    try:
        now = time.time()
        await backend.push([Envelope(f"w{i}", "q", "{}") for i in range(waiters)], now)
        claims = await backend.cycle([], ["q"], waiters, "bench", 600.0, now)
        reads = _count_reads(backend)
        queue = Queue(backend)
        returned: dict[str, float] = {}

        async def wait(job_id: str) -> None:
            await queue.handle(job_id).result(poll=POLL)
            returned[job_id] = time.monotonic()

        tasks = [asyncio.create_task(wait(c.id)) for c in claims]
        await asyncio.sleep(0.2)  # every waiter in its stride
        counted, started = len(reads), time.monotonic()
        await asyncio.sleep(WINDOW)
        rate = (len(reads) - counted) / (time.monotonic() - started)
        # The jobs end in up to 10 groups, each at a random point of the poll.
        finished: dict[str, float] = {}
        for group in range(min(waiters, 10)):
            await asyncio.sleep(random.uniform(0, POLL))
            ending = claims[group::10]
            done = [Outcome(c.id, "done", "q", result="1", keep=60, token=c.token) for c in ending]
            finished.update(dict.fromkeys([c.id for c in ending], time.monotonic()))
            await backend.cycle(done, [], 0, "bench", 600.0, time.time())
        await asyncio.gather(*tasks)
        return rate, statistics.median(returned[i] - finished[i] for i in finished)
    finally:
        if store == "redis":
            keys = [k async for k in backend.redis.scan_iter(match=backend.prefix + "*")]  # type: ignore[attr-defined]
            if keys:
                await backend.redis.delete(*keys)  # type: ignore[attr-defined]
        await backend.close()


def measure(runs: int = RUNS) -> dict[str, tuple[float, float]]:
    """``"store n"`` -> (median reads/s, median latency in seconds) over ``runs`` runs."""
    found: dict[str, list[tuple[float, float]]] = {}
    for _ in range(runs):  # the configurations interleaved: noise hits them alike
        for store in ("sqlite", "redis"):
            for n in WAITERS:
                found.setdefault(f"{store} {n}", []).append(asyncio.run(_run(store, n)))
    return {
        k: (statistics.median(r for r, _ in v), statistics.median(lat for _, lat in v))
        for k, v in found.items()
    }


def main() -> None:
    results = measure()
    rows: list[list[Any]] = [
        [key, f"{rate:.0f}", f"{latency * 1000:.1f} ms"] for key, (rate, latency) in results.items()
    ]
    print(table(f"result() waiters, poll={POLL}s", ["store, waiters", "reads/s", "latency"], rows))


if __name__ == "__main__":
    main()
