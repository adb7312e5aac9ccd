"""Job workers with Prometheus metrics, summed over every process by one ``/metrics`` endpoint.

::

    export PROMETHEUS_MULTIPROC_DIR=$(mktemp -d)     # before any of them starts
    python examples/observe/metrics_worker.py enqueue --db jobs.db
    python examples/observe/metrics_worker.py worker --db jobs.db --queue emails &
    python examples/observe/metrics_worker.py worker --db jobs.db --queue reports &
    python examples/observe/metrics_worker.py serve --db jobs.db --port 9100 &
    curl -s localhost:9100/metrics | grep ^batchy_

Each process calls ``prometheus.instrument(queue)`` and writes its counters to
the directory; ``serve`` sums them and asks the store for the queues' sizes.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import threading
from typing import Any

import batchy
from batchy.jobs import Queue, SQLiteBackend, Worker
from batchy_contrib.observe import prometheus

USERS = {i: f"user{i}" for i in range(1000)}


@batchy.batched
async def users_by_id(ids: list[int]) -> list[str]:
    await asyncio.sleep(0)  # stands for a database round trip
    return [USERS[i] for i in ids]


def declare(db: str) -> tuple[Queue, Any, Any]:
    """The queue on the SQLite file ``db`` and its two job types, ``welcome`` and ``report``."""
    queue = Queue(SQLiteBackend(db))

    @queue.job(name="welcome", queue="emails")
    async def welcome(user_id: int) -> str:
        name = await users_by_id(user_id)
        again = await users_by_id(user_id)  # the job's cache answers: a hit
        return f"welcome, {name} ({again})"

    @queue.job(name="report", queue="reports", retries=1, backoff=lambda done, error: 0.0)
    async def report(first: int, count: int) -> int:
        names = await users_by_id.many(range(first, first + max(count, 0)))
        if count < 0:
            raise ValueError(f"a report of {count} users")  # retried once, then dead
        return len(names)

    return queue, welcome, report


def enqueue(db: str) -> None:
    queue, welcome, report = declare(db)
    prometheus.instrument(queue)
    for user_id in (1, 2, 3):
        welcome.enqueue_sync(user_id)
    welcome.options(delay=3600).enqueue_sync(4)  # scheduled: not due for an hour
    for user_id in (5, 6):
        welcome.options(queue="later").enqueue_sync(user_id)  # no worker runs "later"
    for first, count in ((100, 5), (200, 5), (0, -1)):
        report.enqueue_sync(first, count)


async def work(db: str, queue_name: str) -> None:
    queue, _, _ = declare(db)
    prometheus.instrument(queue)  # before the worker is made: it copies the queue's hooks
    await Worker(queue, queues=[queue_name], poll_interval=0.05).run(signals=True)


def serve(db: str, port: int) -> None:
    queue, _, _ = declare(db)
    server, _ = prometheus.start_http_server(port, queue, addr="127.0.0.1")
    print(f"serving http://127.0.0.1:{server.server_port}/metrics", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.shutdown()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["enqueue", "worker", "serve"])
    parser.add_argument("--db", default="jobs.db", help="the SQLite job store (jobs.db)")
    parser.add_argument("--queue", default="emails", help="worker: the queue to run (emails)")
    parser.add_argument("--port", type=int, default=9100, help="serve: the port (0: any free)")
    args = parser.parse_args(argv)
    if args.command == "enqueue":
        enqueue(args.db)
    elif args.command == "worker":
        asyncio.run(work(args.db, args.queue))
    else:
        serve(args.db, args.port)


if __name__ == "__main__":
    main()
