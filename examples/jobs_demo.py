"""Background jobs on the embedded SQLite store: thousands of jobs, a handful of loader calls.

Each job sends a (pretend) welcome e-mail: it loads its user and the user's team
through batched loaders. A worker runs 100 jobs at once in one batchy scheduler,
so the loads of all running jobs share batch calls. Run it with ``make demo``, or::

    python examples/jobs_demo.py --jobs 3000 --concurrency 100

It prints jobs per second and how many loader calls (one SQL query each) served
them, against the one-query-per-load a job queue without batching would make.
It exits with status 1 if any job failed or batching did not happen. Then it
keeps its store and prints the command that opens the dashboard on it (not
with ``--quiet``, which removes the store).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import batchy
from batchy.jobs import Queue, SQLiteBackend, Worker
from batchy.testing import record

# The application's data: a SQLite database of users and teams.
data = sqlite3.connect(":memory:")
queries = 0


def setup_data(users: int) -> None:
    data.execute("CREATE TABLE teams (id INTEGER PRIMARY KEY, name TEXT)")
    data.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT, team_id INTEGER)")
    data.executemany("INSERT INTO teams VALUES (?, ?)", [(t, f"team {t}") for t in range(50)])
    data.executemany(
        "INSERT INTO users VALUES (?, ?, ?)",
        [(u, f"user{u}@example.com", u % 50) for u in range(users)],
    )


def select(table: str, ids: list[int]) -> dict[int, dict[str, Any]]:
    global queries
    queries += 1
    cursor = data.execute(f"SELECT * FROM {table} WHERE id IN ({','.join('?' * len(ids))})", ids)
    names = [c[0] for c in cursor.description]
    return {row[0]: dict(zip(names, row)) for row in cursor}


@batchy.batched
def users_by_id(ids: list[int]) -> dict[int, dict[str, Any]]:
    return select("users", ids)


@batchy.batched
def teams_by_id(ids: list[int]) -> dict[int, dict[str, Any]]:
    return select("teams", ids)


# $BATCHY_DEMO_STORE: the store of an earlier run, for the dashboard (see the end of main).
store = os.environ.get("BATCHY_DEMO_STORE") or tempfile.mkdtemp(prefix="batchy-jobs-demo-")
queue = Queue(SQLiteBackend(Path(store) / "jobs.db"), keep_result=0)
sent: list[str] = []


@queue.job
async def send_welcome(user_id: int) -> None:
    user = await users_by_id(user_id)
    team = await teams_by_id(user["team_id"])
    sent.append(f"Welcome to {team['name']}, {user['email']}!")


async def main(jobs: int, concurrency: int, quiet: bool) -> int:
    setup_data(jobs)
    start = time.perf_counter()
    await queue.enqueue_many(send_welcome.call(uid) for uid in range(jobs))
    enqueued = time.perf_counter() - start

    worker = Worker(queue, concurrency=concurrency, burst=True, poll_interval=0.01)
    start = time.perf_counter()
    with record() as rec:
        await worker.run()
    elapsed = time.perf_counter() - start
    info = await queue.info()
    await queue.close()

    calls = rec.call_counts()
    loads = 2 * jobs  # what the same jobs cost one query per load
    ok = len(sent) == jobs and info.dead == 0 and queries <= 4 * (jobs // concurrency + 2)
    if not quiet:
        print(f"jobs on SQLite ({store}/jobs.db), {concurrency} at a time in one worker:")
        print(f"  enqueued {jobs} jobs in one bulk call: {jobs / enqueued:,.0f} jobs/s")
        print(f"  ran {worker.processed} jobs in {elapsed:.2f}s: {jobs / elapsed:,.0f} jobs/s")
        print(
            f"  loader calls: users_by_id {calls.get('users_by_id', 0)}, teams_by_id "
            f"{calls.get('teams_by_id', 0)} -> {queries} SQL queries for {loads} loads "
            f"({loads / max(queries, 1):.0f}x fewer than one query per load)"
        )
        print(f"  dead jobs: {info.dead}; e.g. {sent[0]!r}")
    if not ok:
        print(f"FAILED: sent {len(sent)}/{jobs}, dead {info.dead}, queries {queries}")
        return 1
    if not quiet:
        print("open the dashboard on this store (needs: pip install 'batchy[dashboard]'):")
        print(
            f"  BATCHY_DEMO_STORE={store} {sys.executable} -m batchy dashboard "
            "examples.jobs_demo:queue --port 8000"
        )
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    try:
        code = asyncio.run(main(args.jobs, args.concurrency, args.quiet))
    finally:
        if args.quiet:  # otherwise kept, for the dashboard
            shutil.rmtree(store, ignore_errors=True)
    sys.exit(code)
