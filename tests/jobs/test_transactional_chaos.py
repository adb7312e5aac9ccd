"""Transactional enqueue under any mix of commits, rollbacks and errors, with a worker running.

Whatever the sequence, a worker runs exactly the jobs of the transactions that
committed, each once, each finding the row its transaction wrote, and the jobs
of one ordering key in the order their transactions committed. On PostgreSQL
(woken by the commit's notification alone) and on SQLite (the app's own
connection to the store's file).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchy.jobs import JobCall, Queue, SQLiteBackend, Worker
from batchy_contrib.jobs.postgres import PostgresBackend

pytestmark = pytest.mark.timeout(120)

# Each transaction: how it ends, how many jobs it enqueues, their ordering key,
# and whether it dawdles between its writes and its end (a worker woken early
# would look for the rows too soon).
TRANSACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["commit", "rollback", "raise"]),
        st.integers(1, 3),
        st.sampled_from([None, "k:a", "k:b"]),
        st.booleans(),
    ),
    min_size=1,
    max_size=8,
)

CHAOS = settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
_ids = itertools.count(1)
Ran = list[tuple[int, str | None, bool]]  # (order id, key, found its row)


class Declined(Exception):
    """The application's own error between its writes and its commit."""


def declare(queue: Queue, ran: Ran, found: Callable[[int], Awaitable[bool]]) -> None:
    @queue.job(name="ship")
    async def ship(order: int, key: str | None) -> None:
        ran.append((order, key, await found(order)))


def calls(queue: Queue, orders: list[int], key: str | None) -> list[JobCall]:
    return [dataclasses.replace(queue.jobs["ship"].call(o, key), key=key) for o in orders]


async def end(ending: str, dawdle: bool, rollback: Callable[[], None]) -> None:
    """A transaction's last moments, after its writes: it may wait, then ends as drawn."""
    if dawdle:
        await asyncio.sleep(0.005)
    if ending == "raise":
        raise Declined
    if ending == "rollback":
        rollback()


def _rollback_block() -> None:
    raise psycopg.Rollback  # leaves psycopg's transaction block quietly, rolled back


async def run_transactions(
    queue: Queue,
    ran: Ran,
    transactions: list[tuple[str, int, str | None, bool]],
    one: Callable[[list[int], str | None, str, bool], Awaitable[None]],
    starts: list[float] | None = None,
) -> None:
    committed: list[tuple[int, str | None]] = []

    async def transaction(ending: str, n: int, key: str | None, dawdle: bool, start: float) -> None:
        orders = [next(_ids) for _ in range(n)]
        await asyncio.sleep(start)
        with contextlib.suppress(Declined):
            await one(orders, key, ending, dawdle)
        if ending == "commit":
            # Noted as the commit returns: two transactions of one key cannot both be
            # between their push and their commit (the push holds the key till the end).
            committed.extend((o, key) for o in orders)

    if starts is None:  # one after another
        for ending, n, key, dawdle in transactions:
            await transaction(ending, n, key, dawdle, 0.0)
    else:  # all at once, each on its own connection, started a little apart
        await asyncio.gather(
            *(transaction(*t, start) for t, start in zip(transactions, starts, strict=False))
        )
    deadline = time.monotonic() + 15
    while len(ran) < len(committed):
        assert time.monotonic() < deadline, (ran, committed)
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # a job of a rolled-back transaction would show up by now
    assert sorted((o, k) for o, k, _ in ran) == sorted(committed)  # each once, no others
    assert all(found for _, _, found in ran), ran
    for key in ("k:a", "k:b"):
        assert [o for o, k, _ in ran if k == key] == [o for o, k in committed if k == key]


@contextlib.asynccontextmanager
async def working(queue: Queue, poll_interval: float) -> AsyncIterator[None]:
    worker = Worker(queue, concurrency=10, poll_interval=poll_interval)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(0.05)
        yield
    finally:
        worker.stop()
        await task


# -- PostgreSQL ----------------------------------------------------------------------


@CHAOS
@given(
    transactions=TRANSACTIONS,
    # None: one after another; else each transaction's start, all running at once
    # (those of one key then wait for each other at their push).
    starts=st.none() | st.lists(st.floats(0, 0.02), min_size=8, max_size=8),
)
async def test_postgres_runs_the_committed_jobs_only_once_each_in_key_order(
    postgres_app_store: PostgresBackend,
    postgres_dsn: str,
    postgres_schema: str,
    transactions: list[tuple[str, int, str | None, bool]],
    starts: list[float] | None,
) -> None:
    queue = Queue(postgres_app_store)
    ran: Ran = []
    table = f'"{postgres_schema}".users'

    async def found(order: int) -> bool:
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            cur = await conn.execute(f"SELECT 1 FROM {table} WHERE id = %s", (order,))
            return await cur.fetchone() is not None

    declare(queue, ran, found)

    async def one(orders: list[int], key: str | None, ending: str, dawdle: bool) -> None:
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            async with conn.transaction():
                for order in orders:
                    await conn.execute(f"INSERT INTO {table} VALUES (%s)", (order,))
                await queue.enqueue_many(calls(queue, orders, key), connection=conn)
                await end(ending, dawdle, rollback=_rollback_block)

    # A long poll: only the commit's notification wakes the worker in time.
    async with working(queue, poll_interval=5.0):
        await run_transactions(queue, ran, transactions, one, starts)


# -- SQLite --------------------------------------------------------------------------


@CHAOS
@given(transactions=TRANSACTIONS)
async def test_sqlite_runs_the_committed_jobs_only_once_each_in_key_order(
    tmp_path: Path, transactions: list[tuple[str, int, str | None, bool]]
) -> None:
    path = tmp_path / f"app-{next(_ids)}.db"
    queue = Queue(SQLiteBackend(path))
    app = sqlite3.connect(path)
    app.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY)")
    app.commit()
    ran: Ran = []

    async def found(order: int) -> bool:
        reader = sqlite3.connect(path)
        try:
            return (
                reader.execute("SELECT 1 FROM orders WHERE id = ?", (order,)).fetchone() is not None
            )
        finally:
            reader.close()

    declare(queue, ran, found)

    async def one(orders: list[int], key: str | None, ending: str, dawdle: bool) -> None:
        with app:  # commits, or rolls back on an exception
            for order in orders:
                app.execute("INSERT INTO orders VALUES (?)", (order,))
            await queue.enqueue_many(calls(queue, orders, key), connection=app)
            await end(ending, dawdle, rollback=app.rollback)

    try:
        async with working(queue, poll_interval=0.02):
            await run_transactions(queue, ran, transactions, one)
    finally:
        app.close()
        await queue.close()
