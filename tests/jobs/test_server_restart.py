"""A store's server restarted, crashed or down a while under running workers and enqueuers.

The servers are the session's own (``private_postgres``, ``private_redis``:
tests/private_servers.py), so these restarts disturb no other test session.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from batchy.jobs import Queue, Worker
from batchy_contrib.jobs.postgres import PostgresBackend

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # restart_app, for the jobs' declarations

from restart_app import build  # noqa: E402

pytestmark = pytest.mark.timeout(120)


class Once:
    """A schedule with one tick, at ``at`` (and the next a day later)."""

    def __init__(self, at: float) -> None:
        self.at = at

    def next_after(self, t: float) -> float:
        return self.at if t < self.at else self.at + 86400.0


async def test_a_tick_due_while_postgres_is_down_runs_once_it_is_back(
    private_postgres: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # While the server was down, the tick's push waited for a connection past the
    # worker's lease; that NoAnswer was taken for the store refusing the tick, which
    # was logged as "not enqueued" and dropped: a nightly job skipped its night.
    queue = Queue(PostgresBackend(private_postgres.dsn, schema=f"tick_{uuid.uuid4().hex[:8]}"))
    ran: list[float] = []
    at = time.time() + 1.5

    @queue.periodic(Once(at), name="nightly")
    async def nightly() -> None:
        ran.append(time.time())

    await queue.backend.migrate()
    worker = Worker(queue, lease=1.0, poll_interval=0.1, shutdown_timeout=0.5)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(0.5)
        with caplog.at_level(logging.WARNING, logger="batchy.jobs"):
            await asyncio.to_thread(private_postgres.stop)
            await asyncio.sleep(at + 2.0 - time.time())  # due, and a lease past it
            await asyncio.to_thread(private_postgres.start)
            for _ in range(100):
                if ran:
                    break
                await asyncio.sleep(0.05)
        assert len(ran) == 1 and ran[0] > at + 2.0, ran
        assert "ticks not enqueued" not in caplog.text
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
        await queue.backend.close()


def location(server: Any, kind: str) -> tuple[str, str]:
    """The store's location and a prefix (on PostgreSQL a schema) of the test's own."""
    name = uuid.uuid4().hex[:8]
    return (server.dsn, f"restart_{name}") if kind == "postgres" else (server.url, f"r{name}:")


async def in_transaction(dsn: str, enqueue: Any) -> None:
    """``enqueue(conn)`` in a transaction of an application's own connection to ``dsn``."""
    async with await psycopg.AsyncConnection.connect(dsn, connect_timeout=3) as conn:
        async with conn.transaction():
            await enqueue(conn)


def in_transaction_sync(dsn: str, enqueue: Any) -> None:
    with psycopg.connect(dsn, connect_timeout=3) as conn, conn.transaction():
        enqueue(conn)


@pytest.mark.parametrize("kind", ["postgres", "redis"])
async def test_an_enqueue_while_the_server_is_down_fails_at_once_and_works_once_it_is_back(
    kind: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    # On PostgreSQL an enqueue waited for psycopg_pool's whole timeout (30 s) while
    # the pool retried its refused connects in the background, and then raised
    # PoolTimeout("couldn't get a connection after 30.00 sec"): no server, no reason.
    # Meanwhile psycopg_pool logged a warning for every connect it tried: a dozen
    # for each enqueue, besides the error the enqueue raised.
    caplog.set_level(logging.INFO)
    server = request.getfixturevalue(f"private_{kind}")
    store, prefix = location(server, kind)
    queue = build(store, prefix)
    plain = queue.jobs["restart.plain"]
    try:
        await plain.enqueue(1)
        await asyncio.to_thread(plain.enqueue_sync, 2)  # both clients connected
        server.stop()
        await asyncio.sleep(0.2)  # the app's loop runs on between two requests
        calls = [lambda: plain.enqueue(3), lambda: asyncio.to_thread(plain.enqueue_sync, 3)]
        for call in calls:
            began = time.monotonic()
            with pytest.raises(Exception) as caught:
                await asyncio.wait_for(call(), 10)
            assert time.monotonic() - began < 3.0, caught.value
            assert queue.backend.unreachable(caught.value), repr(caught.value)
            message = str(caught.value)
            assert f"127.0.0.1:{server.port}" in message
            if kind == "postgres":  # (Redis: "Error 111 connecting to 127.0.0.1:...")
                assert message.startswith(
                    f"PostgreSQL postgresql://postgres@127.0.0.1:{server.port}/test schema '{prefix}' gave no connection within 2s: its last try to connect failed (OperationalError: connection failed: "
                )
                assert "Connection refused" in message
                assert message.endswith(
                    "Check that the server is running and reachable; this call sent nothing "
                    "(an enqueue enqueued nothing), and the next one connects again"
                )
        server.start()
        await plain.enqueue(5)
        await asyncio.to_thread(plain.enqueue_sync, 6)
        if kind == "postgres":  # in the application's transactions too
            await in_transaction(store, lambda conn: plain.options(connection=conn).enqueue(7))
            await asyncio.to_thread(
                in_transaction_sync,
                store,
                lambda conn: plain.options(connection=conn).enqueue_sync(8),
            )
        info = await queue.info()
        assert sum(q.size for q in info.queues) == (6 if kind == "postgres" else 4)
        noise = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert noise == [], [f"{r.name}: {r.getMessage()}" for r in noise]
    finally:
        await queue.backend.close()


async def test_a_transactional_enqueue_on_a_connection_the_restart_ended_fails_and_adds_nothing(
    private_postgres: Any,
) -> None:
    store, schema = location(private_postgres, "postgres")
    queue = build(store, schema)
    plain = queue.jobs["restart.plain"]
    try:
        await plain.enqueue(1)
        async with await psycopg.AsyncConnection.connect(store) as conn:
            await asyncio.to_thread(private_postgres.restart, "fast")
            with pytest.raises(psycopg.OperationalError):
                async with conn.transaction():
                    await plain.options(connection=conn).enqueue(2)
        await in_transaction(store, lambda conn: plain.options(connection=conn).enqueue(3))
        assert sum(q.size for q in (await queue.info()).queues) == 2
    finally:
        await queue.backend.close()
