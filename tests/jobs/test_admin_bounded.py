"""Paging through a large store reads a bounded part of it: page 2 of 100,000 jobs costs what
page 2 of 1,000 does. Counted as the store sees it, never by wall time: SQLite's virtual
machine steps, the commands Redis runs (MONITOR), the rows PostgreSQL's plans read
(auto_explain).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from batchy.jobs import Backend, Envelope, SQLiteBackend

from .conftest import REDIS_DB

pytestmark = pytest.mark.timeout(300)

SMALL, LARGE = 1_000, 100_000
LIMIT = 50
STATES = ("queued", "scheduled")


async def fill(store: Backend, jobs: int, tag: str) -> None:
    """``jobs`` queued and ``jobs`` scheduled jobs; each kind due at one time (bulk pushes)."""
    now = time.time()
    for start in range(0, jobs, 5000):
        n = min(5000, jobs - start)
        queued = [Envelope(f"{tag}q{start + i:07d}", "bulk", '{"job":"x"}') for i in range(n)]
        later = [
            Envelope(f"{tag}s{start + i:07d}", "bulk", '{"job":"x"}', due=now + 3600)
            for i in range(n)
        ]
        await store.push(queued + later, now)


async def page_two(store: Backend, state: str) -> list[str]:
    first, after = await store.list_jobs(state, time.time(), limit=LIMIT)
    assert len(first) == LIMIT and after is not None
    second, _ = await store.list_jobs(state, time.time(), after=after, limit=LIMIT)
    assert len(second) == LIMIT
    assert not {j.id for j in first} & {j.id for j in second}
    return [j.id for j in second]


async def cost_of_page_two(
    store: Backend, state: str, measure: Callable[[Callable[[], Awaitable[Any]]], Awaitable[int]]
) -> int:
    _, after = await store.list_jobs(state, time.time(), limit=LIMIT)
    assert after is not None
    return await measure(lambda: store.list_jobs(state, time.time(), after=after, limit=LIMIT))


def assert_bounded(small: dict[str, int], large: dict[str, int]) -> None:
    for state in STATES:
        assert large[state] <= small[state] * 1.1 + 50, (state, small, large)


async def test_sqlite_reads_a_bounded_part_of_the_file(tmp_path) -> None:
    costs = {}
    for size in (SMALL, LARGE):
        store = SQLiteBackend(tmp_path / f"jobs{size}.db")
        await fill(store, size, "j")
        steps = 0

        def count() -> int:
            nonlocal steps
            steps += 1
            return 0

        async def measure(call: Callable[[], Awaitable[Any]]) -> int:
            nonlocal steps
            steps = 0
            store._db.set_progress_handler(count, 1)  # every virtual machine instruction
            try:
                await call()
            finally:
                store._db.set_progress_handler(None, 1)
            return steps

        costs[size] = {s: await cost_of_page_two(store, s, measure) for s in STATES}
        assert await page_two(store, "queued") == [f"jq{i:07d}" for i in range(50, 100)]
        await store.close()
    assert_bounded(costs[SMALL], costs[LARGE])


async def test_redis_runs_as_many_commands_for_page_2_of_any_size(redis_server) -> None:
    from redis.asyncio import Redis

    from batchy_contrib.jobs.redis import RedisBackend

    host, port = redis_server
    url = f"redis://{host}:{port}/{REDIS_DB}"
    costs = {}
    for size in (SMALL, LARGE):
        prefix = f"test:{uuid.uuid4().hex[:8]}:"
        store = RedisBackend(url, prefix=prefix)
        watcher = Redis.from_url(url)
        try:
            await fill(store, size, "j")

            async def measure(call: Callable[[], Awaitable[Any]]) -> int:
                # Every command the listing's script runs on this store's keys.
                seen: list[str] = []
                async with watcher.monitor() as monitor:

                    async def collect() -> None:
                        async for event in monitor.listen():
                            seen.append(event["command"])

                    listening = asyncio.ensure_future(collect())
                    await asyncio.sleep(0.2)  # MONITOR is in place
                    await call()
                    await asyncio.sleep(0.2)  # its commands have arrived
                    listening.cancel()
                return sum(1 for c in seen if prefix in c and "EVALSHA" not in c.upper())

            costs[size] = {s: await cost_of_page_two(store, s, measure) for s in STATES}
            assert await page_two(store, "scheduled") == [f"js{i:07d}" for i in range(50, 100)]
            # info (batchy info, the dashboard, every Prometheus scrape) as well:
            # counters, never a read of the scheduled set.
            await store.info(time.time())  # a store's first info counts once
            costs[size]["info"] = await measure(lambda: store.info(time.time()))
            (bulk,) = (await store.info(time.time())).queues
            assert (bulk.size, bulk.scheduled) == (size, size)
            # keys (batchy info, the dashboard's keys page): the busiest from a
            # sorted set kept by the scripts, never a read of every keyed job.
            keyed = [
                Envelope(f"k{i:07d}", "keyed", '{"job":"x"}', key=f"acct:{i % (size // 2)}")
                for i in range(size)
            ]
            for start in range(0, size, 5000):
                await store.push(keyed[start : start + 5000], time.time())
            await store.push([Envelope("kbusy", "keyed", '{"job":"x"}', key="acct:1")], time.time())
            await store.keys(time.time())  # a store's first keys counts once
            costs[size]["keys"] = await measure(lambda: store.keys(time.time()))
            busiest, _ = await store.keys(time.time(), limit=2)
            assert [(k.key, k.jobs) for k in busiest] == [("acct:1", 3), ("acct:0", 2)]
        finally:
            keys = [k async for k in store.redis.scan_iter(match=prefix + "*", count=10_000)]
            for i in range(0, len(keys), 10_000):
                await store.redis.delete(*keys[i : i + 10_000])
            await watcher.aclose()
            await store.close()
    assert_bounded(costs[SMALL], costs[LARGE])
    assert all(0 < n < 12 * LIMIT for n in costs[LARGE].values()), costs  # a few per job
    assert costs[LARGE]["info"] == costs[SMALL]["info"] < 30, costs
    assert costs[LARGE]["keys"] == costs[SMALL]["keys"] < 100, costs


async def test_postgres_plans_read_a_bounded_number_of_rows(
    postgres_dsn: str, postgres_schema: str
) -> None:
    import psycopg

    from batchy_contrib.jobs.postgres import PostgresBackend

    costs = {}
    for size in (SMALL, LARGE):
        store = PostgresBackend(postgres_dsn, schema=postgres_schema)
        if size == LARGE:  # the same schema, emptied
            async with (await store.pool()).connection() as conn:
                await conn.execute(f'TRUNCATE "{postgres_schema}".jobs')
        await fill(store, size, "j")
        async with (await store.pool()).connection() as conn:
            await conn.execute(f'ANALYZE "{postgres_schema}".jobs')
        conn = await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True)
        plans: list[dict[str, Any]] = []
        conn.add_notice_handler(
            lambda d: plans.append(json.loads(d.message_primary.split("plan:", 1)[1]))
        )
        for setting in (
            "LOAD 'auto_explain'",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_analyze = true",
            "SET auto_explain.log_level = notice",
            "SET auto_explain.log_format = json",
        ):
            await conn.execute(setting)

        async def measure(call: Callable[[], Awaitable[Any]]) -> int:
            plans.clear()
            await call()
            return sum(rows_read(p["Plan"]) for p in plans)

        # The listing on this connection, where every statement's plan is reported.
        def listing(state: str, after: str | None) -> Callable[[], Awaitable[Any]]:
            async def run() -> Any:
                clock = f'SELECT "{postgres_schema}".clock()'
                (t,) = await (await conn.execute(clock)).fetchone()
                return await store._list(conn, state, t, 0.0, None, None, after, LIMIT)

            return run

        try:
            costs[size] = {}
            for state in STATES:
                _, after = await listing(state, None)()
                costs[size][state] = await measure(listing(state, after))
            assert await page_two(store, "queued") == [f"jq{i:07d}" for i in range(50, 100)]
        finally:
            await conn.close()
            await store.close()
    assert_bounded(costs[SMALL], costs[LARGE])
    assert all(0 < n <= 3 * LIMIT for n in costs[LARGE].values()), costs


def rows_read(node: dict[str, Any]) -> int:
    """Rows a plan node's scans read: returned or removed by a filter, over every loop."""
    own = 0
    if "Scan" in node["Node Type"]:
        loops = node.get("Actual Loops", 1)
        own = (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * loops
    return own + sum(rows_read(child) for child in node.get("Plans", ()))
