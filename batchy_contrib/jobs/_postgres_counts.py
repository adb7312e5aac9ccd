"""The PostgreSQL store's activity counters: a ``counts`` table summed by upserts as workers add.

The table is part of the versioned schema (version 3). Its primary key
``(minute, name)`` makes the upsert, the range read of the last hour and the
prune of old minutes index work. An add is one statement: with autocommit,
a worker stopped or cancelled halfway never leaves a transaction open (and its
row locks held) on a pooled connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psycopg_pool import AsyncConnectionPool

from batchy.jobs import COUNTS_KEPT

from ._postgres_schema import Names

__all__ = ["add_counts", "read_counts"]

_ADD = """
WITH pruned AS (DELETE FROM {s}.counts WHERE minute < %s)
INSERT INTO {s}.counts (minute, name, n)
SELECT * FROM unnest(%s::bigint[], %s::text[], %s::bigint[])
ON CONFLICT (minute, name) DO UPDATE SET n = {s}.counts.n + excluded.n"""


async def add_counts(
    pool: AsyncConnectionPool[Any], names: Names, counts: Mapping[tuple[int, str], int], now: float
) -> None:
    """Add ``counts`` and drop the minutes no one reads any more, in one statement."""
    keys = sorted(counts)  # one lock order for every writer: no deadlock between workers
    async with pool.connection() as conn:
        await conn.execute(
            names.sql(_ADD),
            (
                int(now // 60) - COUNTS_KEPT,
                [m for m, _ in keys],
                [n for _, n in keys],
                [int(counts[k]) for k in keys],
            ),
        )


async def read_counts(
    pool: AsyncConnectionPool[Any], names: Names, since: int
) -> dict[tuple[int, str], int]:
    """The counters of minute ``since`` and later."""
    async with pool.connection() as conn:
        cursor = await conn.execute(
            names.sql("SELECT minute, name, n FROM {s}.counts WHERE minute >= %s"), (since,)
        )
        rows = await cursor.fetchall()
    return {(int(minute), str(name)): int(n) for minute, name, n in rows}
