"""Job queues on one local Redis: batchy vs arq, SAQ and RQ (SimpleWorker); batchy on SQLite too.

For each system, one worker process (started fresh per scenario, timed from the
moment it is ready until the last job finished, counted in-process):

- enqueue rate from one client: one job per call, and bulk (batchy and RQ have a
  bulk call; arq and SAQ do not, so their "bulk" is ``asyncio.gather``);
- no-op jobs/s, and jobs/s when each job awaits 5 ms of I/O, at concurrency 100
  (RQ's SimpleWorker runs one job at a time: that is its model);
- jobs/s and SQL queries when each job loads one row from MariaDB (batchy through
  a loader, so the jobs running at once share one ``IN (...)`` query).

Redis database 12 is flushed before each run (only that database). MariaDB is
``root@127.0.0.1:3306``, database ``test``, table ``bench_job_users``.

Run: ``python -m benchmarks jobs`` (or ``make bench``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._util import table

REDIS_URL = "redis://127.0.0.1:6379/12"
MYSQL = {"host": "127.0.0.1", "port": 3306, "user": "root", "password": "", "db": "test"}
ROWS = 10_000
CONCURRENCY = 100
SCALE = float(os.environ.get("BATCHY_BENCH_SCALE", "1"))  # 0.1 for a quick look
SIZES = {k: int(v * SCALE) for k, v in {"noop": 10_000, "io": 5_000, "db": 5_000}.items()}
RQ_SIZES = {k: int(v * SCALE) for k, v in {"noop": 2_000, "io": 400, "db": 2_000}.items()}
ENQUEUE_N = int(2_000 * SCALE)

# -- the jobs, declared the same way in the client and the worker process ---------------

DONE = {"count": 0, "target": 0, "queries": 0}
EVENT: asyncio.Event | None = None
POOL: Any = None


def _finish_one() -> None:
    DONE["count"] += 1
    if DONE["count"] >= DONE["target"] and EVENT is not None:
        EVENT.set()


async def _select_one(uid: int) -> Any:
    DONE["queries"] += 1
    async with POOL.acquire() as conn, conn.cursor() as cur:
        await cur.execute("SELECT id, name FROM bench_job_users WHERE id = %s", (uid,))
        return await cur.fetchone()


def batchy_queue(backend: Any) -> Any:
    import batchy
    from batchy.jobs import Queue

    queue = Queue(backend)

    @batchy.batched
    async def users_by_id(ids: list[int]) -> dict[int, Any]:
        DONE["queries"] += 1
        marks = ",".join(["%s"] * len(ids))
        async with POOL.acquire() as conn, conn.cursor() as cur:
            await cur.execute(f"SELECT id, name FROM bench_job_users WHERE id IN ({marks})", ids)
            return {row[0]: row for row in await cur.fetchall()}

    @queue.job(name="noop")
    async def noop(i: int) -> None:
        _finish_one()

    @queue.job(name="io")
    async def io(i: int) -> None:
        await asyncio.sleep(0.005)
        _finish_one()

    @queue.job(name="db")
    async def db(uid: int) -> None:
        await users_by_id(uid)
        _finish_one()

    return queue


async def arq_noop(ctx: Any, i: int) -> None:
    _finish_one()


async def arq_io(ctx: Any, i: int) -> None:
    await asyncio.sleep(0.005)
    _finish_one()


async def arq_db(ctx: Any, i: int) -> None:
    await _select_one(i)
    _finish_one()


async def saq_noop(ctx: Any, *, i: int) -> None:
    _finish_one()


async def saq_io(ctx: Any, *, i: int) -> None:
    await asyncio.sleep(0.005)
    _finish_one()


async def saq_db(ctx: Any, *, i: int) -> None:
    await _select_one(i)
    _finish_one()


RQ_CONN: Any = None


def rq_noop(i: int) -> None:
    DONE["count"] += 1


def rq_io(i: int) -> None:
    time.sleep(0.005)
    DONE["count"] += 1


def rq_db(i: int) -> None:
    DONE["queries"] += 1
    with RQ_CONN.cursor() as cur:
        cur.execute("SELECT id, name FROM bench_job_users WHERE id = %s", (i,))
        cur.fetchone()
    DONE["count"] += 1


# -- the worker process -------------------------------------------------------------


async def _worker_async(system: str, scenario: str, n: int, store: str) -> dict[str, float]:
    global EVENT, POOL
    EVENT = asyncio.Event()
    DONE["target"] = n
    if scenario == "db":
        import aiomysql

        POOL = await aiomysql.create_pool(minsize=10, maxsize=10, **MYSQL)
    if system.startswith("batchy"):
        queue = batchy_queue(_batchy_backend(store))
        worker = queue.worker(concurrency=CONCURRENCY, poll_interval=0.05, lease=60)
        start = time.perf_counter()
        task = asyncio.create_task(worker.run())
        await EVENT.wait()
        elapsed = time.perf_counter() - start
        worker.stop()
        await task
        await queue.close()
    elif system == "arq":
        from arq.connections import RedisSettings
        from arq.worker import Worker as ArqWorker

        fn = {"noop": arq_noop, "io": arq_io, "db": arq_db}[scenario]
        arq_worker = ArqWorker(
            [fn], redis_settings=RedisSettings(database=12), max_jobs=CONCURRENCY,
            poll_delay=0.01, handle_signals=False, queue_read_limit=CONCURRENCY,
        )  # fmt: skip
        start = time.perf_counter()
        task = asyncio.create_task(arq_worker.main())
        await EVENT.wait()
        elapsed = time.perf_counter() - start
        task.cancel()
        # Jobs still finishing when the main task is cancelled may raise here;
        # the timing is already taken.
        with contextlib.suppress(asyncio.CancelledError):
            await arq_worker.close()
    else:  # saq
        from saq import Queue as SaqQueue
        from saq import Worker as SaqWorker

        fn = {"noop": saq_noop, "io": saq_io, "db": saq_db}[scenario]
        saq_queue = SaqQueue.from_url(REDIS_URL)
        saq_worker = SaqWorker(saq_queue, [fn], concurrency=CONCURRENCY)
        start = time.perf_counter()
        task = asyncio.create_task(saq_worker.start())
        await EVENT.wait()
        elapsed = time.perf_counter() - start
        await saq_worker.stop()
        task.cancel()
    if POOL is not None:
        POOL.close()
        await POOL.wait_closed()
    return {"elapsed": elapsed, "jobs": DONE["count"], "queries": DONE["queries"]}


def _worker_rq(scenario: str, n: int) -> dict[str, float]:
    global RQ_CONN
    import pymysql
    from redis import Redis
    from rq import Queue as RqQueue
    from rq import SimpleWorker

    if scenario == "db":
        RQ_CONN = pymysql.connect(**MYSQL)
    redis = Redis.from_url(REDIS_URL)
    worker = SimpleWorker([RqQueue("bench", connection=redis)], connection=redis)
    start = time.perf_counter()
    worker.work(burst=True, logging_level="WARNING")
    elapsed = time.perf_counter() - start
    return {"elapsed": elapsed, "jobs": DONE["count"], "queries": DONE["queries"]}


def _batchy_backend(store: str) -> Any:
    if store == "redis":
        from batchy_contrib.redis_jobs import RedisBackend

        return RedisBackend(REDIS_URL)
    from batchy.jobs import SQLiteBackend

    return SQLiteBackend(store)


# -- the client ---------------------------------------------------------------------


async def _enqueue(system: str, scenario: str, n: int, store: str, bulk: bool) -> float:
    """Enqueue ``n`` jobs of ``scenario``; returns the seconds it took."""
    args = range(1, n + 1)
    if system.startswith("batchy"):
        queue = batchy_queue(_batchy_backend(store))
        job = queue.jobs[scenario]
        start = time.perf_counter()
        if bulk:
            for i in range(0, n, 1000):
                await queue.enqueue_many(job.call(a) for a in args[i : i + 1000])
        else:
            for a in args:
                await job.enqueue(a)
        elapsed = time.perf_counter() - start
        await queue.close()
        return elapsed
    if system == "arq":
        from arq import create_pool
        from arq.connections import RedisSettings

        pool = await create_pool(RedisSettings(database=12))
        fn = f"arq_{scenario}"
        start = time.perf_counter()
        if bulk:
            for i in range(0, n, 1000):
                await asyncio.gather(*(pool.enqueue_job(fn, a) for a in args[i : i + 1000]))
        else:
            for a in args:
                await pool.enqueue_job(fn, a)
        elapsed = time.perf_counter() - start
        await pool.aclose()
        return elapsed
    if system == "saq":
        from saq import Queue as SaqQueue

        saq_queue = SaqQueue.from_url(REDIS_URL)
        fn = f"saq_{scenario}"
        start = time.perf_counter()
        if bulk:
            for i in range(0, n, 1000):
                await asyncio.gather(*(saq_queue.enqueue(fn, i=a) for a in args[i : i + 1000]))
        else:
            for a in args:
                await saq_queue.enqueue(fn, i=a)
        elapsed = time.perf_counter() - start
        await saq_queue.disconnect()
        return elapsed
    from redis import Redis
    from rq import Queue as RqQueue

    rq_queue = RqQueue("bench", connection=Redis.from_url(REDIS_URL))
    fn = {"noop": rq_noop, "io": rq_io, "db": rq_db}[scenario]
    start = time.perf_counter()
    if bulk:
        for i in range(0, n, 1000):
            rq_queue.enqueue_many(
                [RqQueue.prepare_data(fn, (a,), result_ttl=3600) for a in args[i : i + 1000]]
            )
    else:
        for a in args:
            rq_queue.enqueue(fn, a)
    return time.perf_counter() - start


def _reset(store: str) -> None:
    from redis import Redis

    Redis.from_url(REDIS_URL).flushdb()  # database 12 only
    if store not in ("redis", "") and os.path.exists(store):
        for suffix in ("", "-wal", "-shm"):
            Path(store + suffix).unlink(missing_ok=True)


def _setup_mysql() -> None:
    import pymysql

    conn = pymysql.connect(**MYSQL)
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE IF NOT EXISTS bench_job_users (id INT PRIMARY KEY, name VARCHAR(40))"
        )
        cur.execute("SELECT count(*) FROM bench_job_users")
        if cur.fetchone()[0] < ROWS:
            cur.execute("DELETE FROM bench_job_users")
            cur.executemany(
                "INSERT INTO bench_job_users VALUES (%s, %s)",
                [(i, f"user {i}") for i in range(1, ROWS + 1)],
            )
    conn.commit()
    conn.close()


def _com_select() -> int:
    import pymysql

    conn = pymysql.connect(**MYSQL)
    with conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Com_select'")
        value = int(cur.fetchone()[1])
    conn.close()
    return value


def _run_worker(system: str, scenario: str, n: int, store: str) -> dict[str, float]:
    cmd = [sys.executable, "-m", "benchmarks.jobs", "--worker", system, scenario, str(n), store]
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{system} {scenario} worker failed:\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _measure(system: str, store: str) -> dict[str, Any]:
    row: dict[str, Any] = {}
    sizes = RQ_SIZES if system == "rq" else SIZES
    for bulk in (False, True):
        _reset(store)
        seconds = asyncio.run(_enqueue(system, "noop", ENQUEUE_N, store, bulk))
        row["bulk" if bulk else "single"] = ENQUEUE_N / seconds
    for scenario in ("noop", "io", "db"):
        n = sizes[scenario]
        _reset(store)
        asyncio.run(_enqueue(system, scenario, n, store, True))
        before = _com_select() if scenario == "db" else 0
        result = _run_worker(system, scenario, n, store)
        if result["jobs"] < n:
            raise RuntimeError(f"{system} {scenario}: only {result['jobs']} of {n} jobs ran")
        row[scenario] = n / result["elapsed"]
        if scenario == "db":
            # Com_select counts every SELECT the server ran; minus our own SHOW is 0.
            row["queries"] = _com_select() - before
            row["queries_per_job"] = row["queries"] / n
    _reset(store)
    return row


def main() -> None:
    _setup_mysql()
    sqlite_path = str(Path(tempfile.gettempdir()) / "batchy-bench-jobs.db")
    systems = [
        ("batchy (Redis)", "batchy", "redis"),
        ("batchy (SQLite)", "batchy-sqlite", sqlite_path),
    ]
    systems += [
        ("arq", "arq", "redis"),
        ("SAQ", "saq", "redis"),
        ("RQ SimpleWorker", "rq", "redis"),
    ]
    rows = {}
    for label, system, store in systems:
        print(f"  measuring {label} ...", flush=True)
        rows[label] = _measure(system, store)
    peers = ["arq", "SAQ", "RQ SimpleWorker"]
    best_noop = max(rows[p]["noop"] for p in peers)
    fewest = min(rows[p]["queries_per_job"] for p in peers)
    body = []
    for label, _, _ in systems:
        r = rows[label]
        body.append(
            [
                label,
                f"{r['single']:,.0f}",
                f"{r['bulk']:,.0f}",
                f"{r['noop']:,.0f}",
                f"{r['io']:,.0f}",
                f"{r['db']:,.0f}",
                f"{r['queries']:,} ({r['queries_per_job']:.3f}/job)",
            ]
        )
    print(
        table(
            f"jobs/s, one worker process, concurrency {CONCURRENCY} (RQ: 1 at a time); "
            f"no-op {SIZES['noop']:,} jobs, I/O and DB {SIZES['io']:,} (RQ: "
            f"{RQ_SIZES['noop']:,} / {RQ_SIZES['io']:,} / {RQ_SIZES['db']:,})",
            [
                "system",
                "enqueue 1/call",
                "enqueue bulk",
                "no-op",
                "5 ms I/O",
                "MariaDB row",
                "SELECTs",
            ],
            body,
        )
    )
    ours = rows["batchy (Redis)"]
    print(
        f"batchy (Redis) no-op: {ours['noop'] / best_noop:.1f}x the best peer "
        f"(target 2x); SELECTs per job: {fewest / max(ours['queries_per_job'], 1e-9):.0f}x "
        "fewer than the fewest of any peer (target 10x)"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        # RQ imports job functions by name (benchmarks.jobs.rq_noop): run everything
        # in that module, not in __main__, so the counters are the ones jobs update.
        from benchmarks import jobs as module  # noqa: PLW0406

        system, scenario, n, store = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
        if system == "rq":
            out = module._worker_rq(scenario, n)
        else:
            out = asyncio.run(module._worker_async(system, scenario, n, store))
        print(json.dumps(out))
    else:
        main()
