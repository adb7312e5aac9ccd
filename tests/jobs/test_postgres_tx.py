"""Transactional enqueue on PostgreSQL: a job written in the app's transaction lives or dies with it."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest

from batchy.jobs import Envelope, Queue, Worker
from batchy_contrib.jobs.postgres import PostgresBackend

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def store(postgres_dsn: str, postgres_schema: str) -> AsyncIterator[PostgresBackend]:
    backend = PostgresBackend(postgres_dsn, schema=postgres_schema)
    await backend.migrate()
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await conn.execute(f'CREATE TABLE "{postgres_schema}".users (id int PRIMARY KEY)')
    yield backend
    await backend.close()


def job(queue: str = "default") -> Envelope:
    return Envelope(uuid.uuid4().hex, queue, '{"job": "welcome", "args": [1], "kwargs": {}}')


async def test_a_rolled_back_transaction_leaves_no_job(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    env = job()
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        assert await store.push([env], time.time(), connection=conn) == [True]
        await conn.rollback()
    assert (await store.status(env.id, time.time())).state == "unknown"


async def test_an_exception_between_insert_and_commit_leaves_neither(
    store: PostgresBackend, postgres_dsn: str, postgres_schema: str
) -> None:
    env = job()
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        with pytest.raises(ZeroDivisionError):
            async with conn.transaction():
                await conn.execute(f'INSERT INTO "{postgres_schema}".users VALUES (1)')
                await store.push([env], time.time(), connection=conn)
                1 / 0
        rows = await (await conn.execute(f'SELECT * FROM "{postgres_schema}".users')).fetchall()
    assert rows == []
    assert (await store.status(env.id, time.time())).state == "unknown"


async def test_a_committed_job_runs_and_sees_the_rows_of_its_transaction(
    store: PostgresBackend, postgres_dsn: str, postgres_schema: str
) -> None:
    queue = Queue(store)
    found: list[object] = []

    @queue.job(name="welcome")
    async def welcome(user_id: int) -> None:
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            cur = await conn.execute(
                f'SELECT id FROM "{postgres_schema}".users WHERE id = %s', (user_id,)
            )
            found.append(await cur.fetchone())

    worker = Worker(queue, poll_interval=5.0)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(0.2)
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            for uid in range(1, 21):
                async with conn.transaction():
                    await conn.execute(f'INSERT INTO "{postgres_schema}".users VALUES (%s)', (uid,))
                    payload = f'{{"job": "welcome", "args": [{uid}], "kwargs": {{}}}}'
                    await store.push(
                        [Envelope(uuid.uuid4().hex, "default", payload)],
                        time.time(),
                        connection=conn,
                    )
                    await asyncio.sleep(0.005)  # a worker woken early would miss the row
        deadline = time.monotonic() + 10
        while len(found) < 20:
            assert time.monotonic() < deadline, found
            await asyncio.sleep(0.01)
    finally:
        worker.stop()
        await task
    assert None not in found and len(found) == 20  # every worker found its row


def test_the_sync_twin_writes_in_the_apps_transaction(
    postgres_dsn: str, postgres_schema: str
) -> None:
    store = PostgresBackend(postgres_dsn, schema=postgres_schema)
    kept, dropped = job(), job()
    with psycopg.connect(postgres_dsn) as conn:
        store.push_sync([kept], time.time(), connection=conn)
        conn.commit()
        store.push_sync([dropped], time.time(), connection=conn)
        conn.rollback()
    states = asyncio.run(_states(store, [kept.id, dropped.id]))
    assert states == ["queued", "unknown"]


async def _states(store: PostgresBackend, ids: list[str]) -> list[str]:
    try:
        return [(await store.status(i, time.time())).state for i in ids]
    finally:
        await store.close()


async def test_job_enqueue_takes_the_apps_connection(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    queue = Queue(store)

    @queue.job
    async def send_welcome(user_id: int) -> None:
        return None

    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        dropped = await send_welcome.options(connection=conn).enqueue(42)
        await conn.rollback()
        kept = await send_welcome.options(connection=conn).enqueue(43)
        (also,) = await queue.enqueue_many([send_welcome.call(44)], connection=conn)
        await conn.commit()
    assert [(await h.status()).state for h in (dropped, kept, also)] == [
        "unknown",
        "queued",
        "queued",
    ]


def test_job_enqueue_sync_takes_the_apps_connection(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    queue = Queue(store)

    @queue.job
    async def send_welcome(user_id: int) -> None:
        return None

    with psycopg.connect(postgres_dsn) as conn:
        dropped = send_welcome.options(connection=conn).enqueue_sync(1)
        conn.rollback()
        kept = send_welcome.options(connection=conn).enqueue_sync(2)
        conn.commit()
    assert asyncio.run(_states(store, [dropped.id, kept.id])) == ["unknown", "queued"]
