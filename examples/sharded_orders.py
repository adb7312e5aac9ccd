"""A sharded job: 3 worker processes mark 100,000 MariaDB orders as processed, each row once.

The orders table is cut into ``--shards`` id ranges. Each shard is a job that a
worker claims under a lease (renewed by the worker's heartbeat while it lives);
the handler processes one batch of the shard per call and returns the last id
it handled, which the job system saves as the shard's cursor. A worker that dies
loses at most the batch in hand: another worker takes the shard over from the
saved cursor. The handler is a batchy handler, so the customer lookups of a
batch of 500 orders are one query, and the 500 updates are one ``UPDATE``::

    python examples/sharded_orders.py                   # 100,000 orders, 3 workers
    python examples/sharded_orders.py --rows 20000 --workers 2 --quiet

It prints rows/s and checks in the database that every order was marked once
(``runs`` counts the updates of each row); it exits 1 if not.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import batchy
from batchy.jobs import Queue, Worker
from batchy_contrib.sql import mysql

warnings.filterwarnings("ignore", module="aiomysql")

URL = os.environ.get("SHARDED_ORDERS_DB", "mysql://root@127.0.0.1:3306/test")
STORE = os.environ.get("SHARDED_ORDERS_STORE", str(Path(tempfile.gettempdir()) / "orders-jobs.db"))
ROWS = int(os.environ.get("SHARDED_ORDERS_ROWS", "100000"))
SHARDS = int(os.environ.get("SHARDED_ORDERS_SHARDS", "12"))
BATCH = 500

queue = Queue(STORE)
_db: mysql.Database | None = None


async def database() -> mysql.Database:
    global _db
    if _db is None:
        _db = await mysql.connect(URL, maxsize=8)
    return _db


@batchy.batched
async def customers_by_id(ids: list[int]) -> list[dict[str, Any] | None]:
    db = await database()
    rows = await db.fetch(
        f"SELECT id, tier FROM sharded_customers WHERE id IN ({','.join(['%s'] * len(ids))})",
        ids,
    )
    found = {r["id"]: r for r in rows}
    return [found.get(i) for i in ids]


@batchy.batched
async def mark_processed(keys: list[tuple[int, int]]) -> list[None]:
    """(order id, priority) pairs -> one UPDATE per priority for the whole round."""
    db = await database()
    for priority in {p for _, p in keys}:
        ids = [i for i, p in keys if p == priority]
        await db.execute(
            "UPDATE sharded_orders SET status = 1, priority = %s, runs = runs + 1 "
            f"WHERE id IN ({','.join(['%s'] * len(ids))})",
            [priority, *ids],
        )
    return [None for _ in keys]


@batchy.batched
async def orders_after(keys: list[tuple[int, int]]) -> list[list[dict[str, Any]]]:
    """(cursor, end) -> the next batch of orders in that id range, one SELECT each."""
    db = await database()
    return list(
        await asyncio.gather(
            *(
                db.fetch(
                    "SELECT id, customer_id FROM sharded_orders WHERE id > %s AND id < %s "
                    "ORDER BY id LIMIT %s",
                    (cursor, end, BATCH),
                )
                for cursor, end in keys
            )
        )
    )


@queue.sharded(shards=SHARDS, name="orders.mark_processed")
async def process_orders(shard: int, shards: int, cursor: int | None) -> int | None:
    size = -(-ROWS // shards)  # shard s owns ids [s * size, (s + 1) * size)
    start = shard * size - 1 if cursor is None else cursor
    orders = await orders_after((start, (shard + 1) * size))
    if not orders:
        return None  # this shard is finished
    customers = await batchy.gather(*(customers_by_id(o["customer_id"]) for o in orders))
    await batchy.gather(
        *(
            mark_processed((o["id"], 2 if c and c["tier"] == "gold" else 1))
            for o, c in zip(orders, customers, strict=True)
        )
    )
    return int(orders[-1]["id"])


async def setup(rows: int) -> None:
    db = await database()
    await db.execute("DROP TABLE IF EXISTS sharded_orders")
    await db.execute("DROP TABLE IF EXISTS sharded_customers")
    await db.execute("CREATE TABLE sharded_customers (id INT PRIMARY KEY, tier VARCHAR(10))")
    await db.execute(
        "CREATE TABLE sharded_orders (id INT PRIMARY KEY, customer_id INT NOT NULL, "
        "status TINYINT NOT NULL DEFAULT 0, priority TINYINT, runs INT NOT NULL DEFAULT 0)"
    )
    tiers = [(c, "gold" if c % 10 == 0 else "basic") for c in range(1000)]
    await db.executemany("INSERT INTO sharded_customers VALUES (%s, %s)", tiers)
    for start in range(0, rows, 10_000):
        chunk = [(i, i % 1000) for i in range(start, min(rows, start + 10_000))]
        await db.executemany("INSERT INTO sharded_orders (id, customer_id) VALUES (%s, %s)", chunk)


def spawn_workers(n: int, env: dict[str, str]) -> list[subprocess.Popen[bytes]]:
    # The same as `batchy worker sharded_orders:queue`, plus closing the pool at exit.
    cmd = [sys.executable, __file__, "--worker"]
    return [subprocess.Popen(cmd, env=env) for _ in range(n)]


async def close() -> None:
    """Close this process's connection pool (each event loop needs its own)."""
    global _db
    if _db is not None:
        await _db.close()
        _db = None


async def worker() -> None:
    try:
        await Worker(queue, concurrency=8, poll_interval=0.05, lease=10).run(signals=True)
    finally:
        await queue.close()
        await close()


async def server_statements() -> int:
    db = await database()
    (row,) = await db.fetch("SHOW GLOBAL STATUS LIKE 'Questions'")
    return int(row["Value"])


async def run(rows: int, workers: int) -> dict[str, float]:
    """Set up ``rows`` orders, mark them with ``workers`` processes; figures and checks."""
    env = dict(os.environ, SHARDED_ORDERS_STORE=STORE, SHARDED_ORDERS_ROWS=str(rows))
    await setup(rows)
    db = await database()
    before = await server_statements()
    run_id = f"orders-{time.time():.0f}-{os.getpid()}"
    procs = spawn_workers(workers, env)
    try:
        # Time the work, not Python's start-up: wait until every worker is up.
        deadline = time.monotonic() + 30
        while len((await queue.info()).workers) < workers and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await process_orders.start(run_id)
        started = time.perf_counter()
        await process_orders.wait(run_id, timeout=600)
        seconds = time.perf_counter() - started
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(30)
    (done,) = await db.fetch("SELECT COUNT(*) AS n, SUM(runs) AS runs FROM sharded_orders")
    (missed,) = await db.fetch("SELECT COUNT(*) AS n FROM sharded_orders WHERE status = 0")
    return {
        "rows": rows,
        "workers": workers,
        "seconds": seconds,
        "rows_per_s": rows / seconds,
        "missed": int(missed["n"]),
        "updates": int(done["runs"]),
        "statements": await server_statements() - before,
    }


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        await worker()
        return 0
    try:
        figures = await run(args.rows, args.workers)
    finally:
        await close()
    ok = figures["missed"] == 0 and figures["updates"] == figures["rows"]
    if not args.quiet or not ok:
        print(
            f"{figures['rows']:,} orders marked by {args.workers} worker processes in "
            f"{figures['seconds']:.2f}s: {figures['rows_per_s']:,.0f} rows/s; "
            f"{figures['missed']} missed, {figures['updates'] - figures['rows']} updated twice; "
            f"{figures['statements']:,} SQL statements in all for {SHARDS} shards in batches "
            f"of {BATCH} (select, customers, update: ~3 per batch)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
