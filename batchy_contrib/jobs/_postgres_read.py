"""Reading the PostgreSQL job store for people: where a job is, ``batchy info``'s counts, the keys.

Nothing here changes a job; each function runs on a connection the store lends it.

The ordering keys are read as the store's functions read (see the note in
``_postgres_cycle``), on a connection from :func:`indexed`: statistics taken
while the table was nearly empty (a new queue, analyzed before its first
backlog) make a scan of every job look cheaper than the index of keyed jobs,
and each look at the keys (a dashboard's, on every refresh) then read the whole
jobs table twice. Reads of given ids (``statuses``, and the records of many jobs
the operator's pages read) join the ids to each table on a connection from
:func:`by_id`, which leaves the planner nested loops over the primary keys only:
with statistics that made 256 ids look like much of the table, it read every
job. ``info`` counts every job, which reads them all whatever the plan.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from batchy.jobs import Backend, Info, JobStatus, KeyInfo, QueueInfo, WorkerInfo

from ._postgres_schema import Names

__all__ = ["by_id", "indexed", "info", "keys", "statuses"]

Conn = psycopg.AsyncConnection[Any]

# Local to the transaction: the pool's connection goes back with the server's defaults.
_AS_THE_STEPS = "SELECT set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)"
# A read of given ids joins them to each table: only a nested loop over its primary
# key reads as many rows as ids, whatever the statistics (a hash join, or a merge
# join along the whole key, read each of 20,000 jobs for 256 ids).
_BY_ID = (
    f"{_AS_THE_STEPS}, set_config('enable_hashjoin', 'off', true), "
    "set_config('enable_mergejoin', 'off', true)"
)


@contextlib.asynccontextmanager
async def indexed(
    pool: AsyncConnectionPool[Any], settings: str = _AS_THE_STEPS
) -> AsyncIterator[Conn]:
    """A connection of ``pool`` in a transaction planned as the store's functions are
    (``enable_seqscan = off``, ``jit = off``)."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(settings)
        yield conn


def by_id(pool: AsyncConnectionPool[Any]) -> contextlib.AbstractAsyncContextManager[Conn]:
    """:func:`indexed`, for reads of given ids: each table probed by its key once per id."""
    return indexed(pool, _BY_ID)


async def _all(conn: Conn, query: str, params: tuple[Any, ...] = ()) -> list[Any]:
    rows: list[Any] = await (await conn.execute(query, params)).fetchall()
    return rows


async def keys(conn: Conn, names: Names, now: float) -> list[KeyInfo]:
    """Every ordering key with jobs, its head's state on the caller's clock (an operator's view)."""
    rows = await _all(
        conn,
        names.sql(
            "WITH c AS (SELECT {s}.clock() AS t) "
            "SELECT k.okey, k.n, j.id, j.queue, j.state, j.due, j.retrying, j.lease, c.t "
            "FROM c, (SELECT okey, count(*) AS n, min(seq) AS head FROM {s}.jobs "
            "WHERE okey IS NOT NULL GROUP BY okey) AS k "
            "JOIN {s}.jobs AS j ON j.okey = k.okey AND j.seq = k.head ORDER BY k.okey"
        ),
    )
    found = []
    for key, n, head, queue, state, due, retrying, lease, store_now in rows:
        shift = now - store_now  # the store's times are reported on the caller's clock
        found.append(
            KeyInfo.of_head(
                key,
                queue,
                n,
                head,
                running=state == 1,
                lease=(lease or 0.0) + shift,
                due=due + shift,
                retrying=retrying,
                now=now,
            )
        )
    return found


async def statuses(conn: Conn, names: Names, job_ids: Sequence[str]) -> list[JobStatus]:
    """Where each job is now, with its result when kept: one statement for all of them."""
    query = Backend.status_select("{s}.clock()", "SELECT unnest(%s::text[])", "{s}.")
    rows = await _all(conn, names.sql(query), (list(dict.fromkeys(job_ids)),))
    found = {row[0]: JobStatus(*row) for row in rows}
    return [found[job_id] for job_id in job_ids]


async def info(conn: Conn, names: Names) -> Info:
    """Counts per queue, the dead set's size and the live workers."""
    s = names.sql
    queues = await (
        await conn.execute(
            s(
                "WITH c AS (SELECT {s}.clock() AS t) SELECT q.name, "
                "count(j.id) FILTER (WHERE j.state = 0 AND j.due <= c.t), "
                "c.t - min(j.due) FILTER (WHERE j.state = 0 AND j.due <= c.t), "
                "count(j.id) FILTER (WHERE j.state = 1), "
                "count(j.id) FILTER (WHERE j.state = 0 AND j.due > c.t "
                "AND NOT j.retrying), "
                "count(j.id) FILTER (WHERE j.state = 0 AND j.due > c.t AND j.retrying) "
                "FROM c, {s}.queues q LEFT JOIN {s}.jobs j ON j.queue = q.name "
                "GROUP BY q.name, c.t ORDER BY q.name"
            )
        )
    ).fetchall()
    dead = await (await conn.execute(s("SELECT count(*) FROM {s}.dead"))).fetchone()
    workers = await (
        await conn.execute(
            s("SELECT info FROM {s}.workers WHERE expires >= {s}.clock() ORDER BY id")
        )
    ).fetchall()
    # The jobs each worker holds now: its heartbeat's list may be seconds old.
    held = await (
        await conn.execute(s("SELECT owner, id FROM {s}.jobs WHERE state = 1"))
    ).fetchall()
    return Info(
        tuple(
            QueueInfo(name, size, max(0.0, age or 0.0), running, scheduled, retrying)
            for name, size, age, running, scheduled, retrying in queues
        ),
        dead[0] if dead else 0,
        Backend.with_running((WorkerInfo.from_json(w[0]) for w in workers), held),
    )
