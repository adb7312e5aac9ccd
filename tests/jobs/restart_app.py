"""The job app of the server-restart tests (tests/jobs/test_server_restart.py).

``batchy worker restart_app:queue`` runs it on the store named by the
environment; the test process declares the same jobs with :func:`build`. Every
handler appends what it does to its process's own log file (one unbuffered
``write`` per line, so no line is ever torn), each line ending with the pid and
the time: ``S key seq`` when an ordered job starts and ``D key seq`` when it
ends, ``P n`` for a plain job, ``X n`` for a job that always fails, ``T`` for a
tick of the periodic job.
"""

from __future__ import annotations

import asyncio
import os
import random
import time

from batchy.jobs import Backend, Queue

_log: list[int] = []


def note(line: str) -> None:
    if not _log:
        path = os.path.join(os.environ["BATCHY_TEST_LOG_DIR"], f"jobs-{os.getpid()}.log")
        _log.append(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND))
    os.write(_log[0], f"{line} {os.getpid()} {time.time():.6f}\n".encode())


def store(location: str, prefix: str) -> Backend:
    if location.startswith("redis://"):
        from batchy_contrib.jobs.redis import RedisBackend

        return RedisBackend(location, prefix=prefix)
    from batchy_contrib.jobs.postgres import PostgresBackend

    return PostgresBackend(location, schema=prefix)  # on PostgreSQL the prefix is the schema


def build(location: str, prefix: str) -> Queue:
    """The queue and its jobs, on the store at ``location`` (keys or schema ``prefix``)."""
    queue = Queue(store(location, prefix), keep_result=600)
    quick = {"retries": 50, "backoff": lambda n, error: 0.1}

    @queue.job(name="restart.step", ordered_by="key", **quick)
    async def step(key: int, seq: int) -> int:
        note(f"S {key} {seq}")
        await asyncio.sleep(random.uniform(0.03, 0.1))
        note(f"D {key} {seq}")
        return seq

    @queue.job(name="restart.plain", **quick)
    async def plain(n: int) -> int:
        note(f"P {n}")
        await asyncio.sleep(0.03)
        return n * 2

    @queue.job(name="restart.doomed", retries=1, backoff=lambda n, error: 0.1)
    async def doomed(n: int) -> None:
        note(f"X {n}")
        raise ValueError(f"doomed job {n} fails every time")

    @queue.periodic(0.5, name="restart.tick")
    async def tick() -> None:
        note("T")

    return queue


if "BATCHY_TEST_STORE" in os.environ:  # a worker process
    queue = build(os.environ["BATCHY_TEST_STORE"], os.environ["BATCHY_TEST_PREFIX"])
