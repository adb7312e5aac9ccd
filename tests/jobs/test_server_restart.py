"""A store's server restarted, crashed or down a while under running workers and enqueuers.

The servers are the session's own (``private_postgres``, ``private_redis``:
tests/private_servers.py), so these restarts disturb no other test session.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import pytest

from batchy.jobs import Queue, Worker
from batchy_contrib.jobs.postgres import PostgresBackend

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
