"""Kill -9, pause and skew workers under load; count lost, duplicated and out-of-order jobs.

::

    python scripts/crash_test.py --store redis,sqlite,postgres  # the full run (make crash-test)
    python scripts/crash_test.py --quick    # the short run CI does on Redis and SQLite
                                            # (tests/jobs/test_crash.py)
    python scripts/crash_test.py --quick --store postgres  # (tests/jobs/test_crash_postgres.py)

Per store: ``--jobs`` ordered jobs over ``--keys`` keys (each carries its key's
sequence number; a few are delayed, some fail at random and are retried after
a short backoff) and a sharded run over ``--rows`` rows, all at once, on
``--workers`` worker processes. About every ``--kill-every`` seconds one random
worker is killed with SIGKILL and a new one started; about every
``--pause-every`` seconds another is paused (SIGSTOP) for twice the lease, so
its leases move to other workers, then resumed (SIGCONT) to report on jobs that
are no longer its own; and one worker's clock is ``--skew`` seconds off (fast,
then slow after each restart). Each handler appends what it does to its
process's own log (one unbuffered ``write`` per line, so a kill
never leaves half a line); the numbers come from those logs.

On PostgreSQL (a fresh schema per run, dropped after) the workers poll only
every ``--lease`` seconds, so that the run depends on their ``LISTEN``
wake-ups, and about every ``--listen-kill-every`` seconds the ``LISTEN``
connection of a random running worker is terminated from the server side
(``pg_terminate_backend``): its worker must listen again within
``LISTEN_BACK`` seconds, and nothing may be lost. The figures:

- lost: jobs that never finished; rows missed: rows no batch covered;
- run more than once: handler runs beyond one per attempt, against the jobs in
  flight on killed or paused workers (started there and not finished, or
  finished there less than ``ack_window`` seconds before the kill or pause, so
  possibly not yet acked);
- order violations: a job of a key that started before the previous job of its
  key had finished (a run that a pause cut off does not count as finishing it:
  its worker lost the lease, and its outcome was refused), or a run of a key's
  job that overlapped a run of another job of its key (runs cut by a kill or a
  pause aside: their workers no longer held them);
- longest key stall: the longest time from one job of a key finishing to the
  next one finishing.

It exits 1 unless 0 jobs are lost, 0 order violations, 0 rows missed,
duplicates do not exceed the jobs in flight on killed workers, and (PostgreSQL)
every worker whose ``LISTEN`` connection was killed listened again.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from batchy.jobs import Backend, Queue, SQLiteBackend, Worker  # noqa: E402

REDIS_URL = os.environ.get("BATCHY_CRASH_REDIS", "redis://127.0.0.1:6379/13")
POSTGRES_URL = os.environ.get("BATCHY_CRASH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
STORES = ("redis", "sqlite", "postgres")
#: Each worker process names its PostgreSQL connections after its pid (libpq reads
#: PGAPPNAME), so the controller can tell which worker a server backend serves.
APP_NAME = "batchy-crash-"
#: Seconds within which a worker whose LISTEN connection was killed must listen again
#: (the listener backs off at most 1 s between tries).
LISTEN_BACK = 5.0


@dataclass
class Settings:
    jobs: int = 10_000
    keys: int = 200
    rows: int = 50_000
    shards: int = 8
    batch: int = 100
    workers: int = 4
    concurrency: int = 64
    job_ms: tuple[float, float] = (30.0, 150.0)
    batch_ms: float = 150.0
    fail_rate: float = 0.05
    delayed_rate: float = 0.02
    lease: float = 2.0
    kill_every: float = 1.0
    pause_every: float = 4.0
    skew: float = 10.0
    ack_window: float = 0.1
    listen_kill_every: float = 1.5
    time_limit: float = 240.0


QUICK = Settings(
    jobs=2_000, keys=40, rows=10_000, shards=4, batch=50, workers=3, concurrency=20,
    job_ms=(5.0, 25.0), batch_ms=40.0, lease=1.0, kill_every=0.6, pause_every=2.0,
    listen_kill_every=0.8, time_limit=40.0,
)  # fmt: skip

#: The worker process shifts the clock it reads (batchy.jobs._clock.now) by this many seconds.
SKEW_ENV = "BATCHY_CRASH_SKEW"


def is_postgres(store: str) -> bool:
    return store.startswith(("postgresql://", "postgres://"))


def open_backend(store: str, prefix: str) -> Backend:
    if store.startswith("redis://"):
        from batchy_contrib.jobs.redis import RedisBackend

        return RedisBackend(store, prefix=prefix)
    if is_postgres(store):
        from batchy_contrib.jobs.postgres import PostgresBackend

        return PostgresBackend(store, schema=prefix)  # on PostgreSQL the prefix is the schema
    return SQLiteBackend(store)


def build(store: str, prefix: str, settings: Settings, log_fd: int = -1) -> tuple[Queue, Any, Any]:
    """The queue and the two job types, in the controller and in every worker alike."""
    queue = Queue(open_backend(store, prefix))
    pid = os.getpid()

    def note(line: str) -> None:
        os.write(log_fd, f"{line} {pid} {time.time():.6f}\n".encode())

    @queue.job(
        name="crash.step",
        ordered_by="key",
        retries=25,
        backoff=lambda n, error: 0.05 + 0.05 * random.random(),
    )
    async def step(key: int, seq: int) -> None:
        note(f"S {key} {seq}")
        await asyncio.sleep(random.uniform(*settings.job_ms) / 1000)
        if random.random() < settings.fail_rate:
            note(f"F {key} {seq}")
            raise RuntimeError(f"random failure of job {key}/{seq}")
        note(f"D {key} {seq}")

    @queue.sharded(shards=settings.shards, name="crash.rows", retries=25)
    async def rows(shard: int, shards: int, cursor: int | None) -> int | None:
        start = shard if cursor is None else cursor + shards
        batch = list(range(start, settings.rows, shards))[: settings.batch]
        if not batch:
            return None
        note(f"R {batch[0]} {batch[-1]}")  # the rows are processed...
        await asyncio.sleep(settings.batch_ms / 1000)  # ...and the batch takes its time
        return batch[-1]

    return queue, step, rows


# -- worker processes ----------------------------------------------------------------


def worker_main(store: str, prefix: str, log_dir: str, settings: Settings) -> None:
    skew = float(os.environ.get(SKEW_ENV) or 0.0)
    if skew:
        # A machine whose clock is off: everything batchy reads from the worker's
        # clock is shifted (the log keeps the true time, for the analysis).
        from batchy.jobs import _clock

        _clock.now = lambda: time.time() + skew
    os.environ["PGAPPNAME"] = f"{APP_NAME}{os.getpid()}"
    fd = os.open(f"{log_dir}/log-{os.getpid()}.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    queue, _, _ = build(store, prefix, settings, fd)
    worker = Worker(
        queue,
        concurrency=settings.concurrency,
        lease=settings.lease,
        heartbeat=settings.lease / 4,
        # A 50 ms poll would hide a lost wake-up: on PostgreSQL the workers rely on
        # LISTEN (whose connection the test kills) and poll only once a lease.
        poll_interval=settings.lease if is_postgres(store) else 0.05,
        shutdown_timeout=1.0,
        # About half the workers claim a batch ahead: those jobs are leased and
        # waiting when the worker is killed or paused, and must come back intact.
        prefetch=settings.concurrency if os.getpid() % 2 else 0,
    )
    asyncio.run(worker.run(signals=True))


# -- the controller ------------------------------------------------------------------


@dataclass
class Report:
    store: str
    seconds: float = 0.0
    kills: int = 0
    pauses: int = 0
    skew: float = 0.0
    lost: int = 0
    extra_runs: int = 0
    in_flight: int = 0
    just_done: int = 0
    paused_in_flight: int = 0
    violations: int = 0
    stall: float = 0.0
    stall_key: str = ""
    recovery: float = 0.0
    failures: int = 0
    dead: int = 0
    rows_twice: int = 0
    rows_missed: int = 0
    listen_kills: int | None = None  # None: not a PostgreSQL run
    listen_back: float = 0.0
    listen_not_back: int = 0
    notes: list[str] = field(default_factory=list)
    #: What each order violation was (the first few are printed), to debug a failed run.
    details: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.lost == 0
            and self.violations == 0
            and self.rows_missed == 0
            and self.extra_runs <= self.in_flight + self.just_done + self.paused_in_flight
            and self.listen_not_back == 0
        )

    def lines(self) -> list[str]:
        return [
            f"store: {self.store}  ({self.seconds:.1f} s, "
            f"{self.kills} workers killed with SIGKILL, {self.pauses} paused with SIGSTOP "
            f"past their lease, one worker's clock {self.skew:+g}/{-self.skew:+g} s off)",
            f"  ordered jobs lost:               {self.lost}",
            f"  jobs run more than once:         {self.extra_runs} "
            f"(in flight on killed workers: {self.in_flight} running + {self.just_done} "
            f"finished just before the kill; on paused workers: {self.paused_in_flight})",
            f"  per-key order violations:        {self.violations}",
            f"  longest key stall:               {self.stall:.2f} s ({self.stall_key})",
            f"  longest recovery after a kill:   {self.recovery:.2f} s (kill to the job "
            "running again elsewhere)",
            f"  random failures retried:         {self.failures} (dead: {self.dead})",
            f"  sharded rows processed twice:    {self.rows_twice}",
            f"  sharded rows missed:             {self.rows_missed}",
            *(
                []
                if self.listen_kills is None
                else [
                    f"  LISTEN connections killed:       {self.listen_kills} "
                    f"(pg_terminate_backend); listening again after at most "
                    f"{self.listen_back:.2f} s ({self.listen_not_back} not within "
                    f"{LISTEN_BACK:g} s)"
                ]
            ),
            *[f"  note: {n}" for n in self.notes],
            *[f"  violation: {d}" for d in self.details[: min(self.violations, 10)]],
            *[f"  {d}" for d in self.details[self.violations :]],
            f"  {'OK' if self.ok else 'FAILED'}",
        ]


async def enqueue_all(step: Any, settings: Settings) -> None:
    per_key = settings.jobs // settings.keys
    calls = []
    for seq in range(per_key):
        for key in range(settings.keys):
            call = step.call(key, seq)
            if random.random() < settings.delayed_rate:
                call = step.options(delay=random.uniform(0.1, 0.5)).call(key, seq)
            calls.append(call)
    queue = step.queue
    for i in range(0, len(calls), 1000):
        await queue.enqueue_many(calls[i : i + 1000])


async def finished(queue: Queue, rows: Any) -> bool:
    info = await queue.info()
    busy = sum(q.size + q.running + q.scheduled + q.retrying for q in info.queues)
    busiest, _ = await queue.backend.keys(time.time(), 1)
    return busy == 0 and not busiest and await rows.done("crash")


def spawn(
    store: str, prefix: str, log_dir: str, settings: Settings, skew: float = 0.0
) -> subprocess.Popen[bytes]:
    args = [sys.executable, __file__, "--worker", store, prefix, log_dir]
    args += ["--quick"] if settings == QUICK else []
    env = {**os.environ, SKEW_ENV: repr(skew)}
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


class ListenKiller:
    """Terminates a running worker's ``LISTEN`` connection from the server side, and
    times how long that worker takes to listen again."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.conn: Any = None
        self.kills = 0
        self.back = 0.0  # the longest time a worker took to listen again
        self.not_back = 0
        self.waiting: dict[int, tuple[int, float]] = {}  # worker pid -> (old server pid, since)

    async def open(self) -> None:
        import psycopg

        self.conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()

    async def listeners(self) -> dict[int, int]:
        """Worker pid -> server pid of its LISTEN connection."""
        # The listener is the worker's connection whose last statement was its LISTEN
        # (or the health check it runs every 30 s); the pool's run the store's functions.
        cursor = await self.conn.execute(
            "SELECT application_name, pid FROM pg_stat_activity "
            "WHERE application_name LIKE %s AND (query LIKE 'LISTEN %%' OR query = 'SELECT 1')",
            (APP_NAME + "%",),
        )
        return {int(name[len(APP_NAME) :]): pid for name, pid in await cursor.fetchall()}

    async def kill(self, running: list[int]) -> None:
        found = await self.listeners()
        choices = [w for w in running if w in found and w not in self.waiting]
        if not choices:
            return
        worker = random.choice(choices)
        cursor = await self.conn.execute("SELECT pg_terminate_backend(%s)", (found[worker],))
        row = await cursor.fetchone()
        if row is not None and row[0]:
            self.kills += 1
            self.waiting[worker] = (found[worker], time.monotonic())

    async def check(self, running: list[int]) -> None:
        """Note the workers that listen again, and those that took too long."""
        if not self.waiting:
            return
        found = await self.listeners()
        for worker, (old, since) in list(self.waiting.items()):
            if worker not in running:
                # Killed or paused since: the one never reconnects, the other not
                # before SIGCONT. Neither says anything about the listener.
                del self.waiting[worker]
            elif found.get(worker, old) != old:
                self.back = max(self.back, time.monotonic() - since)
                del self.waiting[worker]
            elif time.monotonic() - since > LISTEN_BACK:
                self.not_back += 1
                del self.waiting[worker]

    async def settle(self, running: list[int]) -> None:
        """At the end of the run, give the workers killed last the time to listen again."""
        while self.waiting:
            await asyncio.sleep(0.05)
            await self.check(running)


async def run_store(store: str, label: str, settings: Settings, log_dir: str) -> Report:
    # On PostgreSQL the prefix is the run's own schema (dropped after).
    prefix = (
        f"crash_{uuid.uuid4().hex[:8]}" if is_postgres(store) else f"crash:{uuid.uuid4().hex[:8]}:"
    )
    queue, step, rows = build(store, prefix, settings)
    report = Report(label, skew=settings.skew)
    listen = ListenKiller(store) if is_postgres(store) else None
    kills: list[tuple[int, float]] = []
    pauses: list[tuple[int, float, float]] = []  # pid, stopped, continued (true clock)
    await enqueue_all(step, settings)
    await rows.start("crash")
    started = time.monotonic()
    # Worker 0's clock is off: fast at first, slow after its next restart, and so on.
    skews = [settings.skew] + [0.0] * (settings.workers - 1)
    procs = [spawn(store, prefix, log_dir, settings, skews[i]) for i in range(settings.workers)]
    paused: tuple[subprocess.Popen[bytes], float, float] | None = None  # proc, since, until

    def running() -> list[int]:
        return [p.pid for p in procs if paused is None or p is not paused[0]]

    try:
        if listen is not None:
            await listen.open()
        next_kill = time.monotonic() + settings.kill_every
        next_pause = time.monotonic() + settings.pause_every / 2
        next_listen_kill = time.monotonic() + settings.listen_kill_every / 2
        while time.monotonic() - started < settings.time_limit:
            await asyncio.sleep(0.1)
            if listen is not None:
                await listen.check(running())
                if time.monotonic() >= next_listen_kill:
                    await listen.kill(running())
                    next_listen_kill = time.monotonic() + settings.listen_kill_every * (
                        random.uniform(0.7, 1.3)
                    )
            if paused is not None and time.monotonic() >= paused[2]:
                paused[0].send_signal(signal.SIGCONT)
                pauses.append((paused[0].pid, paused[1], time.time()))
                paused = None
                next_pause = time.monotonic() + settings.pause_every * random.uniform(0.7, 1.3)
            if time.monotonic() >= next_kill:
                # A paused worker is not killed: its resumption is what is tested.
                victim = random.choice([p for p in procs if paused is None or p is not paused[0]])
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                kills.append((victim.pid, time.time()))
                slot = procs.index(victim)
                if skews[slot]:
                    skews[slot] = -skews[slot]
                procs[slot] = spawn(store, prefix, log_dir, settings, skews[slot])
                next_kill = time.monotonic() + settings.kill_every * random.uniform(0.7, 1.3)
            if paused is None and time.monotonic() >= next_pause:
                victim = random.choice(procs)
                victim.send_signal(signal.SIGSTOP)
                # Twice the lease: every lease it holds runs out and moves on.
                paused = (victim, time.time(), time.monotonic() + 2 * settings.lease)
            if await finished(queue, rows):
                break
        else:
            report.notes.append(f"time limit of {settings.time_limit}s reached")
        report.seconds = time.monotonic() - started
        report.dead = len(await queue.dead_jobs(10_000))
        if listen is not None:
            await listen.settle(running())
            report.listen_kills, report.listen_back = listen.kills, listen.back
            report.listen_not_back = listen.not_back
    finally:
        if listen is not None:
            await listen.close()
        if paused is not None:
            paused[0].send_signal(signal.SIGCONT)
            pauses.append((paused[0].pid, paused[1], time.time()))
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        await cleanup(queue, store, prefix)
    report.kills = len(kills)
    report.pauses = len(pauses)
    analyse(report, Path(log_dir), settings, kills, pauses)
    return report


async def cleanup(queue: Queue, store: str, prefix: str) -> None:
    backend = queue.backend
    redis = getattr(backend, "redis", None)
    if redis is not None:
        keys = [k async for k in redis.scan_iter(match=prefix + "*")]
        if keys:
            await redis.delete(*keys)
    await queue.close()
    if is_postgres(store):
        import psycopg

        async with await psycopg.AsyncConnection.connect(store, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{prefix}" CASCADE')


def read_logs(log_dir: Path) -> list[tuple[str, int, int, int, float]]:
    events = []
    for path in log_dir.glob("log-*.txt"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) != 5:
                continue  # a line cut by the kill cannot happen, but never trust it
            kind, a, b, pid, ts = parts
            events.append((kind, int(a), int(b), int(pid), float(ts)))
    events.sort(key=lambda e: e[4])
    return events


def cut_by_pause(
    evs: list[tuple[str, int, float]], pauses: list[tuple[int, float, float]], window: float
) -> tuple[int, set[float]]:
    """Runs of one job that a pause caught in flight (or just finished, maybe not acked),
    and the times of the ``D`` lines of runs a pause cut in two (their lease moved on)."""
    caught, stale = 0, set()
    for pid, stopped, _ in pauses:
        mine = [(k, ts) for k, p, ts in evs if p == pid]
        for i, (kind, ts) in enumerate(mine):
            if kind != "S" or ts >= stopped:
                continue
            end = mine[i + 1] if i + 1 < len(mine) else None
            if end is None or end[1] > stopped:
                caught += 1
                if end is not None and end[0] == "D":
                    stale.add(end[1])
            elif end[0] in "DF" and end[1] >= stopped - window:
                caught += 1
    return caught, stale


def overlaps(
    per_job: dict[tuple[int, int], list[tuple[str, int, float]]],
    pauses: list[tuple[int, float, float]],
) -> list[str]:
    """Runs of one key's jobs that overlap in time (finished runs no pause cut in two)."""
    runs: dict[int, list[tuple[float, float, int, int]]] = defaultdict(list)
    for (key, seq), evs in per_job.items():
        for pid in {p for _, p, _ in evs}:
            mine = [(k, ts) for k, p, ts in evs if p == pid]
            for (kind, start), (end_kind, end) in itertools.pairwise(mine):
                cut = any(p == pid and start < stop < end for p, stop, _ in pauses)
                if kind == "S" and end_kind in "DF" and not cut:
                    runs[key].append((start, end, seq, pid))
    found = []
    for key, spans in runs.items():
        spans.sort()
        found += [
            f"key {key}: job {b[2]} ran on pid {b[3]} from {b[0]:.3f}, while job {a[2]} "
            f"ran on pid {a[3]} ({a[0]:.3f} to {a[1]:.3f})"
            for a, b in itertools.pairwise(spans)
            if b[0] < a[1]
        ]
    return found


def describe(evs: list[tuple[str, int, float]]) -> str:
    return ", ".join(f"{kind} pid {pid} {ts:.3f}" for kind, pid, ts in evs) or "no runs"


def analyse(
    report: Report,
    log_dir: Path,
    settings: Settings,
    kills: list[tuple[int, float]],
    pauses: list[tuple[int, float, float]],
) -> None:
    events = read_logs(log_dir)
    killed_at = dict(kills)
    per_job: dict[tuple[int, int], list[tuple[str, int, float]]] = defaultdict(list)
    row_counts: Counter[int] = Counter()
    for kind, a, b, pid, ts in events:
        if kind == "R":
            row_counts.update(range(a, b + 1, settings.shards))
        else:
            per_job[(a, b)].append((kind, pid, ts))
    per_key = settings.jobs // settings.keys
    first_done: dict[tuple[int, int], float] = {}
    for job, evs in per_job.items():
        starts = sum(1 for k, _, _ in evs if k == "S")
        fails = sum(1 for k, _, _ in evs if k == "F")
        report.failures += fails
        caught, stale = cut_by_pause(evs, pauses, settings.ack_window)
        report.paused_in_flight += caught
        # A run cut by a pause finished only for its worker (whose outcome was
        # refused): the key moved on with the new holder's run.
        done = [ts for k, _, ts in evs if k == "D" and ts not in stale]
        done = done or [ts for k, _, ts in evs if k == "D"]
        if done:
            first_done[job] = done[0]
        report.extra_runs += max(0, starts - fails - 1)
        by_pid: dict[int, list[tuple[str, float]]] = defaultdict(list)
        for k, pid, ts in evs:
            by_pid[pid].append((k, ts))
        for pid, pevs in by_pid.items():
            if pid not in killed_at:
                continue
            last_kind, last_ts = pevs[-1]
            if last_kind == "S":
                report.in_flight += 1
                again = [ts for k, p, ts in evs if k == "S" and p != pid and ts > last_ts]
                if again:
                    report.recovery = max(report.recovery, again[0] - killed_at[pid])
            elif last_ts >= killed_at[pid] - settings.ack_window:
                report.just_done += 1
    report.lost = sum(
        1 for key in range(settings.keys) for seq in range(per_key) if (key, seq) not in first_done
    )
    for (key, seq), evs in per_job.items():
        if seq == 0:
            continue
        before = first_done.get((key, seq - 1))
        for kind, pid, ts in evs:
            if kind == "S" and (before is None or ts < before):
                report.details.append(
                    f"key {key}: job {seq} started on pid {pid} at {ts:.3f}, before job "
                    f"{seq - 1} first finished ({'never' if before is None else f'{before:.3f}'}); "
                    f"job {seq - 1}: {describe(per_job.get((key, seq - 1), []))}"
                )
        if before is not None and (key, seq) in first_done:
            gap = first_done[(key, seq)] - before
            if gap > report.stall:
                report.stall, report.stall_key = gap, f"key {key}, job {seq}"
    report.details += overlaps(per_job, pauses)
    report.violations = len(report.details)
    if report.details:
        report.details += [f"pid {pid} killed at {ts:.3f}" for pid, ts in kills]
        report.details += [f"pid {pid} paused {a:.3f} to {b:.3f}" for pid, a, b in pauses]
    expected = set(range(settings.rows))
    report.rows_missed = len(expected - set(row_counts))
    report.rows_twice = sum(1 for n in row_counts.values() if n > 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the short run (CI)")
    parser.add_argument(
        "--store",
        default="redis,sqlite",
        help=f"the stores to run, comma-separated, of {', '.join(STORES)} (default: "
        "redis,sqlite; make crash-test runs all three)",
    )
    parser.add_argument("--worker", nargs=3, metavar=("STORE", "PREFIX", "LOGDIR"))
    args = parser.parse_args()
    settings = QUICK if args.quick else Settings()
    chosen = [s.strip() for s in args.store.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in STORES]
    if unknown or not chosen:
        parser.error(
            f"--store {args.store!r}: name stores of {', '.join(STORES)}, e.g. redis,sqlite"
        )
    if args.worker:
        store, prefix, log_dir = args.worker
        worker_main(store, prefix, log_dir, settings)
        return
    print(
        f"crash test: {settings.jobs} ordered jobs over {settings.keys} keys, "
        f"{settings.rows} rows in {settings.shards} shards, {settings.workers} workers x "
        f"{settings.concurrency}, lease {settings.lease}s, a SIGKILL every "
        f"~{settings.kill_every}s, a SIGSTOP for {2 * settings.lease}s every "
        f"~{settings.pause_every}s, one worker's clock {settings.skew:g}s off, "
        f"{settings.fail_rate:.0%} of runs fail and are retried",
        flush=True,
    )
    urls = {"redis": REDIS_URL, "sqlite": "", "postgres": POSTGRES_URL}
    stores = [(name, urls[name]) for name in chosen]
    ok = True
    for label, store in stores:
        with tempfile.TemporaryDirectory(prefix="batchy-crash-") as tmp:
            where = store or f"{tmp}/jobs.db"
            report = asyncio.run(run_store(where, label, settings, tmp))
        print("\n".join(report.lines()), flush=True)
        ok = ok and report.ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
