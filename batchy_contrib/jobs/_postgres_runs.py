"""The PostgreSQL store's record of sharded runs: a ``runs`` table, one row per job and run.

The table is part of the versioned schema (version 4). A start is one
autocommit statement (drop the job's runs past their keep, upsert this one);
listing one job's runs reads its primary key range.
"""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool

from ._postgres_schema import Names

__all__ = ["note_run", "run_started", "runs"]

_NOTE = """
WITH pruned AS (DELETE FROM {s}.runs WHERE name = %(name)s AND started < %(old)s)
INSERT INTO {s}.runs (name, run, started) VALUES (%(name)s, %(run)s, %(now)s)
ON CONFLICT (name, run) DO UPDATE SET started = excluded.started"""

_LIST = """
SELECT run, started FROM {s}.runs WHERE name = %s AND started >= %s
ORDER BY started DESC, run LIMIT %s"""

_STARTED = "SELECT started FROM {s}.runs WHERE name = %s AND run = %s"


async def note_run(
    pool: AsyncConnectionPool[Any], names: Names, name: str, run: str, now: float, keep: float
) -> None:
    """Record the start of ``run``; forget the job's runs started more than ``keep`` ago."""
    async with pool.connection() as conn:
        await conn.execute(
            names.sql(_NOTE), {"name": name, "run": run, "now": now, "old": now - keep}
        )


async def runs(
    pool: AsyncConnectionPool[Any], names: Names, name: str, now: float, keep: float, limit: int
) -> list[tuple[str, float]]:
    """Up to ``limit`` runs of ``name`` started in the last ``keep`` seconds, latest first."""
    async with pool.connection() as conn:
        cursor = await conn.execute(names.sql(_LIST), (name, now - keep, limit))
        rows = await cursor.fetchall()
    return [(str(run), float(started)) for run, started in rows]


async def run_started(
    pool: AsyncConnectionPool[Any], names: Names, name: str, run: str
) -> float | None:
    """When ``run`` of ``name`` was last started, ``None`` if it never was (or is forgotten)."""
    async with pool.connection() as conn:
        cursor = await conn.execute(names.sql(_STARTED), (name, run))
        row = await cursor.fetchone()
    return None if row is None else float(row[0])
