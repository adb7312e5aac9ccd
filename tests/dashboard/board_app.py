"""The app the dashboard's tests serve: a queue on the store ``$BATCHY_BOARD_STORE`` names, with
jobs of every kind (batched loads, failures, ordering keys, a periodic and a sharded job).

``$BATCHY_BOARD_STORE`` is ``sqlite:PATH``, ``redis:URL PREFIX`` or ``postgres:DSN SCHEMA``;
``batchy dashboard board_app:queue`` and ``batchy worker board_app:queue`` run in their own
processes on it, while the test seeds and checks the same store.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any

import batchy
from batchy.jobs import Backend, MemoryBackend, Queue, SQLiteBackend, Worker

#: How often each loader was called, and with what keys (in this process).
CALLS: dict[str, list[list[int]]] = {"users_by_id": [], "teams_by_id": []}


def make_backend(spec: str) -> Backend:
    kind, _, where = spec.partition(":")
    if kind == "sqlite":
        return SQLiteBackend(where)
    if kind == "redis":
        from batchy_contrib.jobs.redis import RedisBackend

        url, prefix = where.split(" ")
        return RedisBackend(url, prefix=prefix)
    if kind == "postgres":
        from batchy_contrib.jobs.postgres import PostgresBackend

        dsn, schema = where.split(" ")
        return PostgresBackend(dsn, schema=schema)
    raise ValueError(f"$BATCHY_BOARD_STORE={spec!r}: expected sqlite:, redis: or postgres:")


class Board:
    """The job types of the board, declared on one queue."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue

        @queue.job(name="send_welcome", queue="mail")
        async def send_welcome(user_id: int) -> str:
            user = await users_by_id(user_id)
            team = await teams_by_id(user["team"])
            return f"Welcome to {team}, {user['email']}!"

        @queue.job(name="charge_card", queue="billing", retries=0)
        async def charge_card(order_id: int) -> None:
            user = await users_by_id(order_id)
            raise ValueError(f"card of {user['email']} declined for order {order_id}")

        @queue.job(name="sync_account", queue="billing", ordered_by="account")
        async def sync_account(account: str, step: int) -> int:
            return step

        @queue.periodic("*/15 * * * *", name="usage_report", queue="reports")
        async def usage_report() -> None:
            pass

        @queue.sharded(shards=4, name="reindex", queue="reports", retries=3)
        async def reindex(shard: int, shards: int, cursor: Any) -> Any:
            if shard == 3:
                raise ConnectionError("search cluster unreachable from shard 3")
            return None if cursor is not None else shard * 1000 + 999

        self.send_welcome = send_welcome
        self.charge_card = charge_card
        self.sync_account = sync_account
        self.reindex = reindex


@batchy.batched(name="users_by_id")
async def users_by_id(ids: list[int]) -> list[dict[str, Any]]:
    CALLS["users_by_id"].append(sorted(ids))
    return [{"id": i, "email": f"user{i}@example.com", "team": i % 3} for i in ids]


@batchy.batched(name="teams_by_id")
async def teams_by_id(ids: list[int]) -> list[str]:
    CALLS["teams_by_id"].append(sorted(ids))
    return [f"team {i}" for i in ids]


# What `batchy dashboard board_app:queue` and `batchy worker board_app:queue` load.
STORE = os.environ.get("BATCHY_BOARD_STORE")
queue = Queue(make_backend(STORE) if STORE else MemoryBackend())
board = Board(queue)


@dataclass
class Seeded:
    """The ids of what :func:`seed` left in each state."""

    dead: list[str]
    queued: list[str]
    scheduled: list[str]
    keyed: list[str]
    processed: int
    failed: int


async def seed(board: Board, *, history: bool = False) -> Seeded:
    """Run jobs of every kind through a worker, then leave some waiting in every state.

    ``history`` also adds an hour of per-minute counts before the current minute,
    as workers would have written them (for pictures of the charts).
    """
    queue = board.queue
    for seen in CALLS.values():
        seen.clear()
    ran = await queue.enqueue_many(
        [*(board.send_welcome.call(u) for u in range(40)),
         *(board.charge_card.call(o) for o in (101, 102, 103))]
    )  # fmt: skip
    await board.reindex.start("2026-06")
    await Worker(queue, burst=True, concurrency=100, poll_interval=0.01).run()
    if history:
        now = time.time()
        minute = int(now // 60)
        counts: dict[tuple[int, str], int] = {}
        for back in range(1, 60):
            wave = 1 + math.sin(back / 6)
            welcome = int(30 * wave) + back % 7
            counts[(minute - back, "processed:mail")] = welcome
            counts[(minute - back, "processed:billing")] = int(8 * wave)
            counts[(minute - back, "failed:billing")] = int(back % 5 == 0)
            counts[(minute - back, "jobs:send_welcome")] = welcome
            counts[(minute - back, "rounds:send_welcome")] = 2 * welcome
            counts[(minute - back, "calls:users_by_id")] = 1 + welcome // 25
            counts[(minute - back, "keys:users_by_id")] = welcome
            counts[(minute - back, "calls:teams_by_id")] = 1 + welcome // 25
            counts[(minute - back, "keys:teams_by_id")] = min(3, welcome)
        await queue.backend.add_counts(counts, now)
    queued = await queue.enqueue_many(board.send_welcome.call(u) for u in range(100, 105))
    scheduled = [
        (await board.send_welcome.options(delay=3600 * (i + 1)).enqueue(200 + i)).id
        for i in range(3)
    ]
    keyed = await queue.enqueue_many(
        [*(board.sync_account.call("acme", s) for s in range(3)),
         *(board.sync_account.call("globex", s) for s in range(2))]
    )  # fmt: skip
    return Seeded(
        dead=[h.id for h in ran[40:]],
        queued=[h.id for h in queued],
        scheduled=scheduled,
        keyed=[h.id for h in keyed],
        processed=40 + 3 + 4,  # the welcomes, the charges, and the run's four shards
        failed=3 + 1,  # the charges, and shard 3's first attempt
    )
