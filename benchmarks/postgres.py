"""Job queues on one local PostgreSQL: batchy (``PostgresBackend``) vs procrastinate and pgqueuer.

The PostgreSQL half of ``benchmarks.jobs``, built the same way. For each system,
one worker process (started fresh per scenario, connected to the database, then
timed from the moment it starts until the last job finished, counted in-process):

- enqueue rate from one client: one job per call, and bulk (batchy
  ``enqueue_many``, procrastinate ``batch_defer_async``, pgqueuer ``enqueue``
  with lists: each one statement per 1,000 jobs);
- no-op jobs/s, and jobs/s when each job awaits 5 ms of I/O, at concurrency 100
  (batchy ``concurrency=100, prefetch=100``, its next 100 jobs claimed while the
  last run; procrastinate ``concurrency=100``; pgqueuer on asyncpg,
  ``max_concurrent_tasks=100``, ``batch_size=50``, the largest it accepts with
  that cap);
- no-op jobs/s again with the database analyzed after the enqueue: a queue that
  has run a while has statistics (autovacuum analyzes its tables), and a plan
  chosen from them may read far more than one chosen without;
- jobs/s and queries when each job loads one row from a PostgreSQL table
  (batchy through a loader, so the jobs running at once share one
  ``= ANY(...)`` query; the peers with one ``SELECT`` per job, psycopg directly).

Every system has a database of its own, dropped and created again before each
scenario (``bench_pg_batchy``, ``bench_pg_procrastinate``, ``bench_pg_pgqueuer``;
procrastinate's schema applied by its schema manager, pgqueuer's by
``Queries.install``, batchy's on first use). The rows the data-loading jobs read
live in a fourth database, ``bench_pg_users``, that nothing else connects to, so
its ``pg_stat_database.xact_commit`` delta counts the queries the server ran
for the jobs (every statement there is one autocommit transaction). That count
also holds the worker pool's connection start-ups: a pool of 10 that runs n
SELECT statements measured n + 20 here. (``pg_stat_user_tables.idx_scan`` is no
use: PostgreSQL 15 counts one index scan per element of an ``= ANY`` array.)
The in-process count (calls of the query functions) is printed next to it.
All four databases are dropped at the end.

Every system runs the same jobs per scenario, but procrastinate's no-op run is
half as long (see SIZES). Each no-op run also reports the CPU per job of the
worker process and of the server (every ``postgres`` process of this machine,
from ``/proc``), and what batchy's costs allow on this machine's cores: the
``ceiling`` line. The no-op target is then judged on ``NOOP_ROUNDS`` more
rounds of batchy and the faster peer, run back to back in alternating order:
the median of the rounds' ratios (each round's two runs saw the same spell of
a noisy shared machine, where single runs a minute apart differ by half).

Pick-up latency: one idle worker process per system (concurrency 100); this
process enqueues one job per call at 200 and then 2,000 jobs/s (2 s each), then
200 delayed jobs due 50-500 ms after their enqueue. Each job carries the time
of its enqueue call (or its due time); the handler's first line notes
``time.time()`` minus that: p50/p99 per workload.

Run: ``python -m benchmarks postgres`` (or ``make bench``);
``python -m benchmarks.postgres latency`` for the latency table alone.
PostgreSQL is ``postgres@127.0.0.1:5432`` (``BATCHY_BENCH_PG`` overrides the URL
of the server, without a database name).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks._util import measure_latency_worker, ratio, table

SERVER = os.environ.get("BATCHY_BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
USERS_DB = "bench_pg_users"
ROWS = 10_000
CONCURRENCY = 100
PGQ_BATCH = 50  # pgqueuer: batch_size <= max_concurrent_tasks / 2
SCALE = float(os.environ.get("BATCHY_BENCH_SCALE", "1"))  # 0.1 for a quick look
# Jobs per scenario and system: the same for all, but procrastinate's no-op run
# (about 220 jobs/s here: 10,000 would take 45 s of the run for nothing new).
_JOBS = {"noop": 10_000, "io": 5_000, "db": 5_000}
SIZES = {
    system: {k: int(v * SCALE) for k, v in _JOBS.items()}
    for _, system in [("batchy", "batchy"), ("pgqueuer", "pgqueuer")]
}
SIZES["procrastinate"] = {**SIZES["batchy"], "noop": int(5_000 * SCALE)}
ENQUEUE_N = int(2_000 * SCALE)
LATENCY_RATES = (200, 2_000)  # jobs/s, one phase each
LATENCY_SECONDS = max(0.5, 2.0 * SCALE)  # per rate
DELAYED_N = max(20, int(200 * SCALE))  # spread over one second, due 50-500 ms after enqueue
DELAYED_PHASE = len(LATENCY_RATES)
SYSTEMS = [("batchy", "batchy"), ("procrastinate", "procrastinate"), ("pgqueuer", "pgqueuer")]
# The no-op target is judged on rounds of batchy and the faster peer run back to
# back (the order alternating), by the median of the rounds' ratios: on a shared
# 2-core machine one run of each, a minute apart, measured anything from 0.8x to 3.1x.
NOOP_ROUNDS = max(1, int(os.environ.get("BATCHY_BENCH_ROUNDS", "5")))


def dsn(db: str) -> str:
    return f"{SERVER}/{db}"


def system_db(system: str) -> str:
    return f"bench_pg_{system}"


# -- the jobs, declared the same way in the client and the worker process ---------------

DONE = {"count": 0, "target": 0, "queries": 0}
EVENT: asyncio.Event | None = None
POOL: Any = None
LAGS: dict[int, list[float]] = {}


def _finish_one() -> None:
    DONE["count"] += 1
    if DONE["count"] >= DONE["target"] and EVENT is not None:
        EVENT.set()


def _started(phase: int, at: float) -> None:
    """A latency job's first step: how long after ``at`` (its enqueue or due time) it started."""
    LAGS.setdefault(phase, []).append(time.time() - at)
    _finish_one()


async def _select_one(uid: int) -> Any:
    DONE["queries"] += 1
    async with POOL.connection() as conn:
        cur = await conn.execute("SELECT id, name FROM bench_job_users WHERE id = %s", (uid,))
        return await cur.fetchone()


def batchy_queue() -> Any:
    import batchy
    from batchy.jobs import Queue
    from batchy_contrib.jobs.postgres import PostgresBackend

    queue = Queue(PostgresBackend(dsn(system_db("batchy")), pool_size=10))

    @batchy.batched
    async def users_by_id(ids: list[int]) -> dict[int, Any]:
        DONE["queries"] += 1
        async with POOL.connection() as conn:
            cur = await conn.execute(
                "SELECT id, name FROM bench_job_users WHERE id = ANY(%s)", (ids,)
            )
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


def procrastinate_app() -> Any:
    import procrastinate

    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=dsn(system_db("procrastinate")))
    )

    @app.task(name="noop")
    async def noop(i: int) -> None:
        _finish_one()

    @app.task(name="io")
    async def io(i: int) -> None:
        await asyncio.sleep(0.005)
        _finish_one()

    @app.task(name="db")
    async def db(i: int) -> None:
        await _select_one(i)
        _finish_one()

    @app.task(name="lat")
    async def lat(phase: int, at: float) -> None:
        _started(phase, at)

    return app


def pgqueuer_register(qm: Any) -> None:
    from pgqueuer.models import Job

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        _finish_one()

    @qm.entrypoint("io")
    async def io(job: Job) -> None:
        await asyncio.sleep(0.005)
        _finish_one()

    @qm.entrypoint("db")
    async def db(job: Job) -> None:
        await _select_one(int(job.payload or b"0"))
        _finish_one()

    @qm.entrypoint("lat")
    async def lat(job: Job) -> None:
        phase, at = json.loads(job.payload or b"[]")
        _started(phase, at)


async def _pgqueuer_queries() -> tuple[Any, Any]:
    """pgqueuer's ``Queries`` on one asyncpg connection, and the connection.

    asyncpg, not pgqueuer's psycopg driver: that driver's LISTEN watcher holds
    the one connection in ``notifies(timeout=1.0)``, so the worker's dequeue
    waits behind it (5 ms I/O jobs ran at 22-220 jobs/s that way, 2,000+ on asyncpg).
    """
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    conn = await asyncpg.connect(dsn(system_db("pgqueuer")))
    return Queries(AsyncpgDriver(conn)), conn


# -- the worker process -------------------------------------------------------------


async def _announce(scenario: str) -> None:
    """For the latency client: the worker has started and gone idle."""
    if scenario == "lat":
        await asyncio.sleep(0.5)
        print("ready", flush=True)


async def _worker_async(system: str, scenario: str, n: int) -> dict[str, Any]:
    global EVENT, POOL
    EVENT = asyncio.Event()
    DONE["target"] = n
    if scenario == "db":
        from psycopg_pool import AsyncConnectionPool

        POOL = AsyncConnectionPool(
            dsn(USERS_DB), min_size=10, max_size=10, kwargs={"autocommit": True}, open=False
        )
        await POOL.open(wait=True)
    if system == "batchy":
        from batchy.jobs import Worker

        queue = batchy_queue()
        # Latency runs with the default poll interval: what it shows is the wake-up.
        poll = 0.5 if scenario == "lat" else 0.05
        worker = Worker(
            queue, concurrency=CONCURRENCY, prefetch=CONCURRENCY, poll_interval=poll, lease=60
        )
        # Connected before the clock starts, as the peers are (procrastinate's
        # open_async, pgqueuer's connection): the rate is the worker's, not the pool's.
        await queue.backend.migrate()
        clock = _Clock()
        task = asyncio.create_task(worker.run())
        await _announce(scenario)
        await EVENT.wait()
        measured = clock.read()
        worker.stop()
        await task
        await queue.close()
    elif system == "procrastinate":
        app = procrastinate_app()
        async with app.open_async():
            clock = _Clock()
            task = asyncio.create_task(
                app.run_worker_async(concurrency=CONCURRENCY, install_signal_handlers=False)
            )
            await _announce(scenario)
            await EVENT.wait()
            measured = clock.read()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    else:  # pgqueuer
        from pgqueuer import QueueManager

        queries, conn = await _pgqueuer_queries()
        qm = QueueManager(queries)
        pgqueuer_register(qm)
        clock = _Clock()
        task = asyncio.create_task(qm.run(batch_size=PGQ_BATCH, max_concurrent_tasks=CONCURRENCY))
        await _announce(scenario)
        await EVENT.wait()
        measured = clock.read()
        qm.shutdown.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)
        await conn.close()
    if POOL is not None:
        await POOL.close()
    return {
        **measured,
        "jobs": DONE["count"],
        "queries": DONE["queries"],
        "lags": LAGS,
    }


class _Clock:
    """Wall time, this process's CPU and the local server's CPU (see _server_cpu) from now."""

    def __init__(self) -> None:
        self.server = _server_cpu()
        self.cpu = time.process_time()
        self.start = time.perf_counter()

    def read(self) -> dict[str, float | None]:
        elapsed = time.perf_counter() - self.start
        cpu = time.process_time() - self.cpu
        server = _server_cpu()
        used = None if server is None or self.server is None else server - self.server
        return {"elapsed": elapsed, "cpu": cpu, "server_cpu": used}


def _server_cpu() -> float | None:
    """CPU seconds the PostgreSQL processes of this machine have used, or None (none seen).

    Every ``postgres`` process's own time, and the time of its children that have
    ended (a closed connection's backend is counted once the postmaster reaps it).
    Includes the server's own helpers (WAL writer, autovacuum): part of a queue's cost.
    """
    total, seen = 0, False
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as comm:
                if not comm.read().startswith("postgres"):
                    continue
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        seen = True
        total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK") if seen else None


# -- databases ------------------------------------------------------------------------


def _admin(*statements: str) -> None:
    _admin_db("postgres", *statements)


def _admin_db(db: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(dsn(db), autocommit=True) as conn:
        for sql in statements:
            conn.execute(sql)


def _reset(system: str) -> None:
    """A new, empty database for ``system``; its schema made by the system itself."""
    db = system_db(system)
    _admin(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)", f"CREATE DATABASE {db}")
    if system == "procrastinate":

        async def apply() -> None:
            app = procrastinate_app()
            async with app.open_async():
                await app.schema_manager.apply_schema_async()

        asyncio.run(apply())
    elif system == "pgqueuer":

        async def install() -> None:
            queries, conn = await _pgqueuer_queries()
            await queries.install()
            await conn.close()

        asyncio.run(install())
    # batchy: PostgresBackend makes its schema on first use (the first enqueue).


def _drop_all() -> None:
    names = [system_db(s) for _, s in SYSTEMS] + [USERS_DB]
    _admin(*(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)" for db in names))


def _setup_users() -> None:
    import psycopg

    _admin(f"DROP DATABASE IF EXISTS {USERS_DB} WITH (FORCE)", f"CREATE DATABASE {USERS_DB}")
    with psycopg.connect(dsn(USERS_DB)) as conn:
        conn.execute("CREATE TABLE bench_job_users (id int PRIMARY KEY, name varchar(40))")
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO bench_job_users VALUES (%s, %s)",
                [(i, f"user {i}") for i in range(1, ROWS + 1)],
            )
        conn.execute("ANALYZE bench_job_users")


def _users_commits() -> int:
    """Transactions committed in the users database (read from another database)."""
    import psycopg

    time.sleep(0.6)  # backends flush their counters on exit, at most once a second before
    with psycopg.connect(dsn("postgres"), autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (USERS_DB,)
        ).fetchone()
    return int(row[0]) if row else 0


# -- the client ---------------------------------------------------------------------


async def _enqueue(system: str, scenario: str, n: int, bulk: bool) -> float:
    """Enqueue ``n`` jobs of ``scenario``; returns the seconds it took."""
    args = range(1, n + 1)
    if system == "batchy":
        queue = batchy_queue()
        job = queue.jobs[scenario]
        await queue.backend.migrate()  # the schema exists before the clock starts
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
    if system == "procrastinate":
        app = procrastinate_app()
        task = app.tasks[scenario]
        async with app.open_async():
            start = time.perf_counter()
            if bulk:
                for i in range(0, n, 1000):
                    await task.batch_defer_async(*({"i": a} for a in args[i : i + 1000]))
            else:
                for a in args:
                    await task.defer_async(i=a)
            return time.perf_counter() - start
    queries, conn = await _pgqueuer_queries()
    start = time.perf_counter()
    if bulk:
        for i in range(0, n, 1000):
            chunk = args[i : i + 1000]
            await queries.enqueue(
                [scenario] * len(chunk), [str(a).encode() for a in chunk], [0] * len(chunk)
            )
    else:
        for a in args:
            await queries.enqueue(scenario, str(a).encode())
    elapsed = time.perf_counter() - start
    await conn.close()
    return elapsed


def _run_worker(system: str, scenario: str, n: int) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.postgres", "--worker", system, scenario, str(n)]
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{system} {scenario} worker failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _measure(system: str) -> dict[str, Any]:
    row: dict[str, Any] = {}
    sizes = SIZES[system]
    for bulk in (False, True):
        _reset(system)
        seconds = asyncio.run(_enqueue(system, "noop", ENQUEUE_N, bulk))
        row["bulk" if bulk else "single"] = ENQUEUE_N / seconds
    for scenario in ("noop", "analyzed", "io", "db"):
        job = "noop" if scenario == "analyzed" else scenario
        n = sizes[job]
        _reset(system)
        asyncio.run(_enqueue(system, job, n, True))
        if scenario == "analyzed":
            _admin_db(system_db(system), "ANALYZE")
        before = _users_commits() if scenario == "db" else 0
        result = _run_worker(system, job, n)
        if result["jobs"] < n:
            raise RuntimeError(f"{system} {scenario}: only {result['jobs']} of {n} jobs ran")
        row[scenario] = n / result["elapsed"]
        if scenario == "noop":
            row["noop_n"] = n
            row["cpu"] = result["cpu"] / n
            server = result["server_cpu"]
            row["server_cpu"] = None if server is None else server / n
        if scenario == "db":
            row["queries"] = _users_commits() - before
            row["counted"] = result["queries"]
            row["queries_per_job"] = row["queries"] / n
            row["db_n"] = n
    return row


# -- pick-up latency -----------------------------------------------------------------

Send = Callable[[int, float, bool], Awaitable[None]]


async def _latency_sender(system: str) -> tuple[Send, Callable[[], Awaitable[Any]]]:
    """``send(phase, at, delayed)`` enqueues one latency job of ``system``; and a closer."""
    if system == "batchy":
        queue = batchy_queue()
        job = queue.jobs["lat"]

        async def send_batchy(phase: int, at: float, delayed: bool) -> None:
            await (job.options(at=at) if delayed else job).enqueue(phase, at)

        return send_batchy, queue.close
    if system == "procrastinate":
        app = procrastinate_app()
        await app.open_async()
        lat = app.tasks["lat"]

        async def send_procrastinate(phase: int, at: float, delayed: bool) -> None:
            if delayed:
                when = datetime.fromtimestamp(at, tz=UTC)
                await lat.configure(schedule_at=when).defer_async(phase=phase, at=at)
            else:
                await lat.defer_async(phase=phase, at=at)

        return send_procrastinate, app.close_async
    queries, conn = await _pgqueuer_queries()

    async def send_pgqueuer(phase: int, at: float, delayed: bool) -> None:
        after = timedelta(seconds=max(0.0, at - time.time())) if delayed else None
        await queries.enqueue("lat", json.dumps([phase, at]).encode(), 0, after)

    return send_pgqueuer, conn.close


async def _latency_client(system: str) -> float:
    """Enqueue the latency workloads one job per call; the rate the fastest phase reached."""
    send, close = await _latency_sender(system)
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


def _measure_latency(system: str) -> dict[str, Any]:
    """p50/p99 lag (s) per phase of one worker process of ``system``, and the rate reached."""
    _reset(system)
    if system == "batchy":  # the schema exists before the worker's first look
        asyncio.run(_enqueue(system, "noop", 0, True))
    total = sum(int(r * LATENCY_SECONDS) for r in LATENCY_RATES) + DELAYED_N
    root = Path(__file__).resolve().parent.parent
    cmd = [sys.executable, "-m", "benchmarks.postgres", "--worker", system, "lat", str(total)]
    row = measure_latency_worker(
        system, cmd, lambda: asyncio.run(_latency_client(system)), cwd=root
    )
    return row


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f}"


def latency() -> None:
    """Print the pick-up latency table."""
    rows = {}
    try:
        for label, system in SYSTEMS:
            print(f"  latency of {label} ...", flush=True)
            rows[label] = _measure_latency(system)
    finally:
        _drop_all()
    ours = rows["batchy"]
    body = []
    for label, _ in SYSTEMS:
        r = rows[label]
        cells = [label]
        for phase in (*range(len(LATENCY_RATES)), DELAYED_PHASE):
            cells += [_ms(r[phase][0]), _ms(r[phase][1])]
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
            f"pick-up latency on PostgreSQL, ms from the enqueue call (another process) to the "
            f"handler's start; one worker process, concurrency {CONCURRENCY}; "
            f"{LATENCY_SECONDS:g} s per rate; {DELAYED_N} delayed jobs (lateness vs due)",
            header,
            body,
        )
    )
    p50 = ours[0][0]
    print(
        f"target: batchy p50 pick-up <= 5 ms at {rates[0]}: {_ms(p50)} ms -> "
        f"{'PASS' if p50 <= 0.005 else 'FAIL'} (p99 {_ms(ours[0][1])} ms)"
    )


def main() -> None:
    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    _setup_users()
    rows = {}
    try:
        for label, system in SYSTEMS:
            print(f"  measuring {label} ...", flush=True)
            rows[label] = _measure(system)
    finally:
        _drop_all()
    peers = [label for label, system in SYSTEMS if system != "batchy"]
    fastest = max(peers, key=lambda p: rows[p]["noop"])
    fewest = min(rows[p]["queries_per_job"] for p in peers)
    body = []
    for label, _ in SYSTEMS:
        r = rows[label]
        body.append(
            [
                label,
                f"{r['single']:,.0f}",
                f"{r['bulk']:,.0f}",
                f"{r['noop']:,.0f}",
                f"{r['analyzed']:,.0f}",
                f"{r['io']:,.0f}",
                f"{r['db']:,.0f}",
                f"{r['queries']:,} ({r['queries_per_job']:.3f}/job)",
                f"{r['counted']:,}",
                _cpu_cells(r),
            ]
        )
    print(
        table(
            f"jobs/s on PostgreSQL, one worker process, concurrency {CONCURRENCY}; jobs per "
            f"run: {_sizes_text()}; 'after ANALYZE': no-op jobs again, the database "
            "analyzed after the enqueue (as autovacuum does in a queue that has run a "
            "while); CPU per no-op job, of the worker process and of the server's "
            "processes, in microseconds",
            [
                "system",
                "enqueue 1/call",
                "enqueue bulk",
                "no-op",
                "after ANALYZE",
                "5 ms I/O",
                "PG row",
                "queries (server)",
                "(in-process)",
                "no-op CPU/job: worker + server",
            ],
            body,
        )
    )
    ours = rows["batchy"]
    noop_x = _noop_rounds(fastest)
    fewer = fewest / max(ours["queries_per_job"], 1e-9)
    print(
        f"targets: batchy no-op {noop_x:.1f}x the faster peer ({fastest}, median of "
        f"{NOOP_ROUNDS} rounds; target 3x) -> {'PASS' if noop_x >= 3 else 'FAIL'}; queries per "
        f"data-loading job {fewer:.0f}x fewer than the fewest of the peers (target 10x) -> "
        f"{'PASS' if fewer >= 10 else 'FAIL'}"
    )
    print(_ceiling(ours, rows[fastest]["noop"], fastest))
    latency()


def _noop_rounds(peer: str) -> float:
    """The median ratio of batchy's no-op rate to ``peer``'s, over rounds run back to back."""
    rates: dict[str, list[float]] = {"batchy": [], peer: []}
    ratios = []
    try:
        for i in range(NOOP_ROUNDS):
            order = ["batchy", peer] if i % 2 == 0 else [peer, "batchy"]
            for system in order:
                n = SIZES[system]["noop"]
                _reset(system)
                asyncio.run(_enqueue(system, "noop", n, True))
                rates[system].append(n / _run_worker(system, "noop", n)["elapsed"])
            ratios.append(rates["batchy"][-1] / rates[peer][-1])
    finally:
        _drop_all()
    print(
        f"no-op rounds, back to back: batchy {_rates(rates['batchy'])}; {peer} "
        f"{_rates(rates[peer])} jobs/s; ratios {', '.join(f'{r:.2f}' for r in ratios)}"
    )
    return statistics.median(ratios)


def _rates(values: list[float]) -> str:
    return ", ".join(f"{v:,.0f}" for v in values)


def _sizes_text() -> str:
    return "; ".join(
        f"{system} {sizes['noop']:,} no-op, {sizes['io']:,} I/O, {sizes['db']:,} row"
        for system, sizes in SIZES.items()
    )


def _cpu_cells(row: dict[str, Any]) -> str:
    if row["server_cpu"] is None:
        return f"{row['cpu'] * 1e6:.0f} + ? (server not on this machine)"
    return f"{row['cpu'] * 1e6:.0f} + {row['server_cpu'] * 1e6:.0f}"


def _ceiling(ours: dict[str, Any], peer_rate: float, peer: str) -> str:
    """The no-op rate batchy's CPU per job allows on this machine, against the faster peer.

    The worker is one Python process (one core at most), and the worker and the
    server share the machine's cores: a rate above min(1/worker, cores/(worker +
    server)) needs less CPU per job, not more overlap.
    """
    if ours["server_cpu"] is None:
        return "ceiling: the server is not on this machine; its CPU per job is unknown"
    cores = os.cpu_count() or 1
    worker, server = ours["cpu"], ours["server_cpu"]
    most = min(1 / worker, cores / (worker + server))
    return (
        f"ceiling: at {worker * 1e6:.0f} us (worker) + {server * 1e6:.0f} us (server) of CPU "
        f"per no-op job on {cores} cores, batchy cannot exceed {most:,.0f} jobs/s = "
        f"{most / peer_rate:.1f}x {peer}'s {peer_rate:,.0f}; it ran {ours['noop'] / most:.0%} "
        "of that"
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["latency"]:  # the latency table alone
        from benchmarks import postgres as module  # noqa: PLW0406

        module.latency()
    elif len(sys.argv) > 1 and sys.argv[1] == "--worker":
        # Run in benchmarks.postgres, not __main__, so the counters are the ones jobs update.
        from benchmarks import postgres as module  # noqa: PLW0406

        logging.basicConfig(level=logging.WARNING)
        system, scenario, n = sys.argv[2], sys.argv[3], int(sys.argv[4])
        print(json.dumps(asyncio.run(module._worker_async(system, scenario, n))))
    else:
        # procrastinate warns about an App made in __main__: make them in benchmarks.postgres.
        from benchmarks import postgres as module  # noqa: PLW0406

        module.main()
