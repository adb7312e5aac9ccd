"""The Redis store's activity counters: one hash per minute, ``HINCRBY`` as workers add.

``{prefix}counts:{minute}`` maps counter names to counts; each hash expires
:data:`~batchy.jobs.COUNTS_KEPT` minutes after its minute ends, so Redis drops
old minutes by itself. A write is one pipeline (an ``HINCRBY`` per counter, an
``EXPIRE`` per minute); reading the last hour is one pipeline of an ``HGETALL``
per minute, never a scan.
"""

from __future__ import annotations

from collections.abc import Mapping

import redis.asyncio as aioredis

from batchy.jobs import COUNTS_KEPT

__all__ = ["add_counts", "read_counts"]


def _key(prefix: str, minute: int) -> str:
    return f"{prefix}counts:{minute}"


async def add_counts(
    client: aioredis.Redis, prefix: str, counts: Mapping[tuple[int, str], int]
) -> None:
    """Add ``counts``; each minute's hash lives ``COUNTS_KEPT`` minutes past its end."""
    async with client.pipeline(transaction=False) as pipe:
        for (minute, name), amount in counts.items():
            pipe.hincrby(_key(prefix, minute), name, amount)
        for minute in {m for m, _ in counts}:
            pipe.expireat(_key(prefix, minute), (minute + 1 + COUNTS_KEPT) * 60)
        await pipe.execute()


async def read_counts(
    client: aioredis.Redis, prefix: str, since: int, now: float
) -> dict[tuple[int, str], int]:
    """The counters of minute ``since`` (or ``COUNTS_KEPT`` minutes ago) up to ``now``'s."""
    last = int(now // 60)
    minutes = range(max(since, last - COUNTS_KEPT), last + 1)
    async with client.pipeline(transaction=False) as pipe:
        for minute in minutes:
            pipe.hgetall(_key(prefix, minute))
        found = await pipe.execute()
    return {
        (minute, name.decode() if isinstance(name, bytes) else name): int(n)
        for minute, counters in zip(minutes, found, strict=True)
        for name, n in counters.items()
    }
