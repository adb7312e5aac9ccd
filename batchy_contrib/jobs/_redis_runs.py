"""The Redis store's record of sharded runs: a sorted set per sharded job, scored by start.

``{prefix}runs:{name}`` holds each run of job ``name`` scored by when it was
(last) started. A start is one pipeline (``ZADD``, a ``ZREMRANGEBYSCORE`` of the
runs past their keep, an ``EXPIREAT`` so a job never started again leaves
nothing behind); listing is one ``ZRANGE`` by score, never a scan.
"""

from __future__ import annotations

import redis.asyncio as aioredis

__all__ = ["note_run", "run_started", "runs"]


def _key(prefix: str, name: str) -> str:
    return f"{prefix}runs:{name}"


async def note_run(
    client: aioredis.Redis, prefix: str, name: str, run: str, now: float, keep: float
) -> None:
    """Record the start of ``run``; forget the job's runs started more than ``keep`` ago."""
    key = _key(prefix, name)
    async with client.pipeline(transaction=True) as pipe:
        pipe.zadd(key, {run: now})
        pipe.zremrangebyscore(key, "-inf", f"({now - keep}")
        pipe.expireat(key, int(now + keep) + 1)
        await pipe.execute()


async def runs(
    client: aioredis.Redis, prefix: str, name: str, now: float, keep: float, limit: int
) -> list[tuple[str, float]]:
    """Up to ``limit`` runs of ``name`` started in the last ``keep`` seconds, latest first."""
    found = await client.zrevrangebyscore(
        _key(prefix, name), "+inf", now - keep, start=0, num=limit, withscores=True
    )
    return [(r.decode() if isinstance(r, bytes) else str(r), float(t)) for r, t in found]


async def run_started(client: aioredis.Redis, prefix: str, name: str, run: str) -> float | None:
    """When ``run`` of ``name`` was last started, ``None`` if it never was (or is forgotten)."""
    started = await client.zscore(_key(prefix, name), run)
    return None if started is None else float(started)
