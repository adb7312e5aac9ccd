"""Job queues on one local Redis: batchy vs arq, SAQ, RQ (SimpleWorker), huey; batchy on SQLite too.

For each system, one worker process (started fresh per scenario, timed from the
moment it is ready until the last job finished, counted in-process):

- enqueue rate from one client: one job per call, and bulk (batchy and RQ have a
  bulk call; arq and SAQ do not, so their "bulk" is ``asyncio.gather``);
- no-op jobs/s, and jobs/s when each job awaits 5 ms of I/O, at concurrency 100
  (RQ's SimpleWorker runs one job at a time: that is its model);
- jobs/s and SQL queries when each job loads one row from MariaDB (batchy through
  a loader, so the jobs running at once share one ``IN (...)`` query).

Pick-up latency (batchy, SAQ, arq, huey with 100 gevent greenlets): one idle
worker process, concurrency 100; this process enqueues one job per call at 200
and then 2,000 jobs/s (2 s each), then 200 delayed jobs due 50-500 ms after
their enqueue. Each job carries the time of its enqueue call (or its due time);
the handler's first line notes ``time.time()`` minus that (same machine, so the
clocks agree): p50/p99 per workload.

Redis database 12 is flushed before each run (only that database). MariaDB is
``root@127.0.0.1:3306``, database ``test``, table ``bench_job_users``.

Run: ``python -m benchmarks jobs`` (or ``make bench``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks._util import measure_latency_worker, ratio, table

REDIS_URL = "redis://127.0.0.1:6379/12"
MYSQL = {"host": "127.0.0.1", "port": 3306, "user": "root", "password": "", "db": "test"}
ROWS = 10_000
CONCURRENCY = 100
SCALE = float(os.environ.get("BATCHY_BENCH_SCALE", "1"))  # 0.1 for a quick look
SIZES = {k: int(v * SCALE) for k, v in {"noop": 10_000, "io": 5_000, "db": 5_000}.items()}
RQ_SIZES = {k: int(v * SCALE) for k, v in {"noop": 2_000, "io": 400, "db": 2_000}.items()}
ENQUEUE_N = int(2_000 * SCALE)
LATENCY_RATES = (200, 2_000)  # jobs/s, one phase each
LATENCY_SECONDS = max(0.5, 2.0 * SCALE)  # per rate
DELAYED_N = max(20, int(200 * SCALE))  # spread over one second, due 50-500 ms after enqueue
DELAYED_PHASE = len(LATENCY_RATES)

# -- the jobs, declared the same way in the client and the worker process ---------------

DONE = {"count": 0, "target": 0, "queries": 0}
EVENT: asyncio.Event | None = None
POOL: Any = None


def _finish_one() -> None:
    DONE["count"] += 1
    if DONE["count"] >= DONE["target"] and EVENT is not None:
        EVENT.set()


LAGS: dict[int, list[float]] = {}


def _started(phase: int, at: float) -> None:
    """A latency job's first step: how long after ``at`` (its enqueue or due time) it started."""
    LAGS.setdefault(phase, []).append(time.time() - at)
    _finish_one()


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

    @queue.job(name="lat")
    async def lat(phase: int, at: float) -> None:
        _started(phase, at)

    return queue


async def arq_noop(ctx: Any, i: int) -> None:
    _finish_one()


async def arq_io(ctx: Any, i: int) -> None:
    await asyncio.sleep(0.005)
    _finish_one()


async def arq_db(ctx: Any, i: int) -> None:
    await _select_one(i)
    _finish_one()


async def arq_lat(ctx: Any, phase: int, at: float) -> None:
    _started(phase, at)


async def saq_noop(ctx: Any, *, i: int) -> None:
    _finish_one()


async def saq_io(ctx: Any, *, i: int) -> None:
    await asyncio.sleep(0.005)
    _finish_one()


async def saq_db(ctx: Any, *, i: int) -> None:
    await _select_one(i)
    _finish_one()


async def saq_lat(ctx: Any, *, phase: int, at: float) -> None:
    _started(phase, at)


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


async def _announce(scenario: str) -> None:
    """For the latency client: the worker has started and gone idle."""
    if scenario == "lat":
        await asyncio.sleep(0.5)
        print("ready", flush=True)


async def _worker_async(system: str, scenario: str, n: int, store: str) -> dict[str, Any]:
    global EVENT, POOL
    EVENT = asyncio.Event()
    DONE["target"] = n
    if scenario == "db":
        import aiomysql

        POOL = await aiomysql.create_pool(minsize=10, maxsize=10, **MYSQL)
    if system.startswith("batchy"):
        from batchy.jobs import Worker

        queue = batchy_queue(_batchy_backend(store))
        # Latency runs with the default poll interval: what it shows is the wake-up.
        poll = 0.5 if scenario == "lat" else 0.05
        worker = Worker(queue, concurrency=CONCURRENCY, poll_interval=poll, lease=60)
        start = time.perf_counter()
        task = asyncio.create_task(worker.run())
        await _announce(scenario)
        await EVENT.wait()
        elapsed = time.perf_counter() - start
        worker.stop()
        await task
        await queue.close()
    elif system == "arq":
        from arq.connections import RedisSettings
        from arq.worker import Worker as ArqWorker

        fn = {"noop": arq_noop, "io": arq_io, "db": arq_db, "lat": arq_lat}[scenario]
        arq_worker = ArqWorker(
            [fn], redis_settings=RedisSettings(database=12), max_jobs=CONCURRENCY,
            poll_delay=0.01, handle_signals=False, queue_read_limit=CONCURRENCY,
        )  # fmt: skip
        start = time.perf_counter()
        task = asyncio.create_task(arq_worker.main())
        await _announce(scenario)
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

        fn = {"noop": saq_noop, "io": saq_io, "db": saq_db, "lat": saq_lat}[scenario]
        saq_queue = SaqQueue.from_url(REDIS_URL)
        saq_worker = SaqWorker(saq_queue, [fn], concurrency=CONCURRENCY)
        start = time.perf_counter()
        task = asyncio.create_task(saq_worker.start())
        await _announce(scenario)
        await EVENT.wait()
        elapsed = time.perf_counter() - start
        await saq_worker.stop()
        task.cancel()
    if POOL is not None:
        POOL.close()
        await POOL.wait_closed()
    return {"elapsed": elapsed, "jobs": DONE["count"], "queries": DONE["queries"], "lags": LAGS}


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
        from batchy_contrib.jobs.redis import RedisBackend

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


# -- pick-up latency -----------------------------------------------------------------

Send = Callable[[int, float, bool], Awaitable[None]]


async def _latency_sender(system: str, store: str) -> tuple[Send, Callable[[], Awaitable[Any]]]:
    """``send(phase, at, delayed)`` enqueues one latency job of ``system``; and a closer."""
    if system.startswith("batchy"):
        queue = batchy_queue(_batchy_backend(store))
        job = queue.jobs["lat"]

        async def send_batchy(phase: int, at: float, delayed: bool) -> None:
            await (job.options(at=at) if delayed else job).enqueue(phase, at)

        return send_batchy, queue.close
    if system == "arq":
        from arq import create_pool
        from arq.connections import RedisSettings

        pool = await create_pool(RedisSettings(database=12))

        async def send_arq(phase: int, at: float, delayed: bool) -> None:
            until = datetime.fromtimestamp(at, tz=UTC) if delayed else None
            await pool.enqueue_job("arq_lat", phase, at, _defer_until=until)

        return send_arq, pool.aclose
    if system == "saq":
        from saq import Queue as SaqQueue

        saq_queue = SaqQueue.from_url(REDIS_URL)

        async def send_saq(phase: int, at: float, delayed: bool) -> None:
            await saq_queue.enqueue("saq_lat", phase=phase, at=at, scheduled=at if delayed else 0)

        return send_saq, saq_queue.disconnect
    from benchmarks._huey_jobs import HUEY, huey_lat

    async def send_huey(phase: int, at: float, delayed: bool) -> None:
        if delayed:
            huey_lat.schedule(args=(phase, at), delay=at - time.time())
        else:
            huey_lat(phase, at)

    async def close_huey() -> None:
        HUEY.storage.conn.close()

    return send_huey, close_huey


async def _latency_client(system: str, store: str) -> float:
    """Enqueue the latency workloads one job per call; the rate the fastest phase reached."""
    send, close = await _latency_sender(system, store)
    reached = 0.0
    for phase, rate in enumerate(LATENCY_RATES):
        n = int(rate * LATENCY_SECONDS)
        start = time.perf_counter()
        for i in range(n):
            ahead = start + i / rate - time.perf_counter()
            if ahead > 0:
                await asyncio.sleep(ahead)
            await send(phase, time.time(), False)
        reached = n / (time.perf_counter() - start)
        await asyncio.sleep(0.3)  # the worker is idle again
    rng = random.Random(1)
    for _ in range(DELAYED_N):
        await send(DELAYED_PHASE, time.time() + rng.uniform(0.05, 0.5), True)
        await asyncio.sleep(1.0 / DELAYED_N)
    await close()
    return reached


def _measure_latency(system: str, store: str) -> dict[str, Any]:
    """p50/p99 lag (s) per phase of one worker process of ``system``, and the rate reached."""
    _reset(store)
    total = sum(int(r * LATENCY_SECONDS) for r in LATENCY_RATES) + DELAYED_N
    root = Path(__file__).resolve().parent.parent
    if system == "huey":  # huey_consumer -k greenlet, gevent-patched first as huey asks
        patched = (
            "from gevent import monkey; monkey.patch_all()\n"
            "from huey.bin.huey_consumer import consumer_main; consumer_main()"
        )
        cmd = [sys.executable, "-c", patched, "benchmarks._huey_jobs.HUEY"]
        cmd += ["-k", "greenlet", "-w", str(CONCURRENCY), "-q"]  # -q: no log line per task
    else:
        cmd = [sys.executable, "-m", "benchmarks.jobs", "--worker", system, "lat", str(total)]
        cmd.append(store)
    env = {**os.environ, "PYTHONPATH": str(root), "BATCHY_BENCH_LAG_TOTAL": str(total)}
    row = measure_latency_worker(
        system, cmd, lambda: asyncio.run(_latency_client(system, store)), cwd=root, env=env
    )
    _reset(store)
    return row


def latency(sqlite_path: str) -> None:
    """Print the pick-up latency table."""
    systems = [
        ("batchy (Redis)", "batchy", "redis"),
        ("batchy (SQLite)", "batchy-sqlite", sqlite_path),
        ("SAQ", "saq", "redis"),
        ("arq", "arq", "redis"),
        ("huey (gevent)", "huey", "redis"),
    ]
    rows = {}
    for label, system, store in systems:
        print(f"  latency of {label} ...", flush=True)
        rows[label] = _measure_latency(system, store)
    ours = rows["batchy (Redis)"]

    def ms(seconds: float) -> str:
        return f"{seconds * 1000:,.1f}"

    body = []
    for label, _, _ in systems:
        r = rows[label]
        cells = [label]
        for phase in (*range(len(LATENCY_RATES)), DELAYED_PHASE):
            cells += [ms(r[phase][0]), ms(r[phase][1])]
        cells += [
            f"{r['reached']:,.0f}",
            ratio(r[0][0], ours[0][0]),
            ratio(r[1][0], ours[1][0]),
        ]
        body.append(cells)
    rates = [f"{rate:,}/s" for rate in LATENCY_RATES]
    header = ["system"]
    for name in (*rates, "delayed: late"):
        header += [f"{name} p50", "p99"]
    header += [f"{rates[-1]} reached", f"p50 vs ours, {rates[0]}", rates[-1]]
    print(
        table(
            f"pick-up latency, ms from the enqueue call (another process) to the handler's "
            f"start; one worker process, concurrency {CONCURRENCY}; {LATENCY_SECONDS:g} s per "
            f"rate; {DELAYED_N} delayed jobs (lateness vs due). arq polls every 10 ms (tuned)",
            header,
            body,
        )
    )
    sqlite = rows["batchy (SQLite)"]
    redis_p50 = max(ours[p][0] for p in range(len(LATENCY_RATES)))
    redis_p99 = max(ours[p][1] for p in range(len(LATENCY_RATES)))
    sqlite_p50 = max(sqlite[p][0] for p in range(len(LATENCY_RATES)))
    late = max(abs(x) for r in (ours, sqlite) for x in r[DELAYED_PHASE])
    print(
        f"targets: Redis p50 <= 1 ms: {ms(redis_p50)}, p99 <= 5 ms: {ms(redis_p99)}; "
        f"SQLite p50 <= 5 ms: {ms(sqlite_p50)}; delayed within 10 ms of due: "
        f"{ms(late)} (worst of the p50/p99s, Redis and SQLite)"
    )


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
    latency(sqlite_path)


if __name__ == "__main__":
    if sys.argv[1:] == ["latency"]:  # the latency table alone
        latency(str(Path(tempfile.gettempdir()) / "batchy-bench-jobs.db"))
    elif len(sys.argv) > 1 and sys.argv[1] == "--worker":
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
