"""The PostgreSQL store's activity counters: a ``counts`` table summed by upserts as workers add.

The table lives in the store's schema and is made on a backend's first write
(``CREATE TABLE IF NOT EXISTS``, outside the versioned job tables: a schema made
by an older release gains it without a migration, and a reader finds no table
before any worker wrote). Its primary key ``(minute, name)`` makes the upsert,
the range read of the last hour and the prune of old minutes index work.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from batchy.jobs import COUNTS_KEPT

from ._postgres_schema import Names

__all__ = ["add_counts", "read_counts"]

_TABLE = """
CREATE TABLE IF NOT EXISTS {s}.counts (
    minute bigint NOT NULL, name text NOT NULL, n bigint NOT NULL, PRIMARY KEY (minute, name)
)"""

_ADD = """
INSERT INTO {s}.counts (minute, name, n)
SELECT * FROM unnest(%s::bigint[], %s::text[], %s::bigint[])
ON CONFLICT (minute, name) DO UPDATE SET n = {s}.counts.n + excluded.n"""


async def add_counts(
    pool: AsyncConnectionPool[Any],
    names: Names,
    counts: Mapping[tuple[int, str], int],
    now: float,
    *,
    create: bool,
) -> None:
    """Add ``counts`` in one transaction (making the table first when ``create``)."""
    keys = sorted(counts)  # one lock order for every writer: no deadlock between workers
    async with pool.connection() as conn, conn.transaction():
        if create:
            await conn.execute(names.sql(_TABLE))
        await conn.execute(
            names.sql(_ADD),
            ([m for m, _ in keys], [n for _, n in keys], [int(counts[k]) for k in keys]),
        )
        await conn.execute(
            names.sql("DELETE FROM {s}.counts WHERE minute < %s"),
            (int(now // 60) - COUNTS_KEPT,),
        )


async def read_counts(
    pool: AsyncConnectionPool[Any], names: Names, since: int
) -> dict[tuple[int, str], int]:
    """The counters of minute ``since`` and later (none before any worker wrote one)."""
    try:
        async with pool.connection() as conn:
            cursor = await conn.execute(
                names.sql("SELECT minute, name, n FROM {s}.counts WHERE minute >= %s"), (since,)
            )
            rows = await cursor.fetchall()
    except psycopg.errors.UndefinedTable:
        return {}
    return {(int(minute), str(name)): int(n) for minute, name, n in rows}
