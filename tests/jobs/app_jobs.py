"""A job app for the worker-process tests; its store and log file come from the environment."""

from __future__ import annotations

import asyncio
import os
import time

import batchy
from batchy.jobs import Backend, Queue, SQLiteBackend

STORE = os.environ.get("BATCHY_TEST_STORE", "batchy-test-jobs.db")
LOG = os.environ.get("BATCHY_TEST_LOG", os.devnull)

backend: Backend
if STORE.startswith("redis://"):
    from batchy_contrib.jobs.redis import RedisBackend

    backend = RedisBackend(STORE, prefix=os.environ.get("BATCHY_TEST_PREFIX", "batchy:"))
elif STORE.startswith(("postgresql://", "postgres://")):
    from batchy_contrib.jobs.postgres import PostgresBackend

    # The prefix is the test's own schema: the test drops it, and everything in it, after.
    backend = PostgresBackend(STORE, schema=os.environ.get("BATCHY_TEST_PREFIX", "batchy"))
else:
    backend = SQLiteBackend(STORE)

queue = Queue(backend)


def note(*parts: object) -> None:
    with open(LOG, "a") as f:
        f.write(" ".join(str(p) for p in parts) + "\n")


@batchy.batched
async def users_by_id(ids: list[int]) -> list[dict[str, int]]:
    note("load", len(ids))
    return [{"id": i} for i in ids]


@queue.job(name="slow")
async def slow(tag: str, seconds: float) -> str:
    note("start", tag, os.getpid())
    await asyncio.sleep(seconds)
    note("done", tag, os.getpid())
    return tag


@queue.job(name="load_user")
async def load_user(uid: int) -> int:
    user = await users_by_id(uid)
    return user["id"]


if os.environ.get("BATCHY_TEST_PERIODIC"):

    @queue.periodic(float(os.environ["BATCHY_TEST_PERIODIC"]), name="tick")
    async def tick() -> None:
        note("tick", time.time(), os.getpid())
