"""Real worker processes on SQLite, Redis and PostgreSQL: kill -9, SIGTERM, SIGSTOP, ticks, the CLI."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import REDIS_DB

pytestmark = pytest.mark.timeout(90)

HERE = Path(__file__).parent


class App:
    """Starts workers and CLI commands on one store, and reads the jobs' log."""

    def __init__(self, store: str, log: Path, prefix: str) -> None:
        self.store = store
        self.log = log
        self.prefix = prefix
        self.procs: list[subprocess.Popen[str]] = []
        self.outputs: list[Path] = []

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            BATCHY_TEST_STORE=self.store,
            BATCHY_TEST_LOG=str(self.log),
            BATCHY_TEST_PREFIX=self.prefix,
            # Ahead of any outer PYTHONPATH, which still decides which batchy runs.
            PYTHONPATH=os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
            **extra,
        )
        return env

    def worker(self, *args: str, **env: str) -> subprocess.Popen[str]:
        cmd = [sys.executable, "-m", "batchy", "worker", "app_jobs:queue", "--poll-interval"]
        cmd += ["0.02", *args]
        # Output goes to a file: a pipe nobody reads would fill up and block the worker.
        out = open(self.log.with_name(f"worker{len(self.procs)}.out"), "w")
        proc = subprocess.Popen(
            cmd, cwd=HERE, env=self.env(**env), stdout=out, stderr=subprocess.STDOUT, text=True
        )
        out.close()
        self.procs.append(proc)
        self.outputs.append(Path(out.name))
        return proc

    def output(self, proc: subprocess.Popen[str]) -> str:
        return self.outputs[self.procs.index(proc)].read_text()

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "batchy", *args], cwd=HERE, env=self.env(),
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip

    def lines(self, kind: str) -> list[list[str]]:
        if not self.log.exists():
            return []
        rows = [line.split() for line in self.log.read_text().splitlines()]
        return [r[1:] for r in rows if r and r[0] == kind]

    def wait_for(self, kind: str, count: int = 1, timeout: float = 20.0) -> list[list[str]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.lines(kind)
            if len(found) >= count:
                return found
            time.sleep(0.02)
        raise AssertionError(f"no {count} {kind!r} lines in {timeout}s: {self.lines(kind)}")

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    prefix = f"ptest:{uuid.uuid4().hex[:8]}:"
    if request.param == "sqlite":
        store = str(tmp_path / "jobs.db")
    elif request.param == "postgres":
        # A schema of the test's own (the fixture drops it after the workers are stopped,
        # since it was set up after this fixture began); app_jobs takes it as the prefix.
        store = request.getfixturevalue("postgres_dsn")
        prefix = request.getfixturevalue("postgres_schema")
    else:
        host, port = request.getfixturevalue("redis_server")
        store = f"redis://{host}:{port}/{REDIS_DB}"
    instance = App(store, tmp_path / "log.txt", prefix)
    yield instance
    instance.stop_all()
    if request.param == "redis":
        import redis

        client = redis.Redis(host=host, port=port, db=REDIS_DB)
        keys = list(client.scan_iter(match=prefix + "*"))
        if keys:
            client.delete(*keys)
        client.close()


def enqueue(app: App, job: str, *args: str) -> str:
    done = app.cli("enqueue", "app_jobs:queue", job, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def status(app: App, job_id: str) -> str:
    code = (
        "import asyncio, app_jobs\nfrom batchy.jobs import Worker\n"
        f"print(asyncio.run(app_jobs.queue.handle({job_id!r}).status()).state)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=HERE, env=app.env(), capture_output=True,
        text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_kill_9_mid_job_and_the_job_finishes_elsewhere(app: App) -> None:
    job_id = enqueue(app, "slow", '"k9"', "1.0")
    first = app.worker("--lease", "1.0", "--heartbeat", "0.2")
    (start,) = app.wait_for("start")
    assert start[1] == str(first.pid)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    second = app.worker("--lease", "1.0", "--heartbeat", "0.2")
    done = app.wait_for("done")
    assert done == [["k9", str(second.pid)]]
    assert [s[1] for s in app.lines("start")] == [str(first.pid), str(second.pid)]
    assert status(app, job_id) == "done"


def test_sigterm_hands_unfinished_jobs_back(app: App) -> None:
    job_id = enqueue(app, "slow", '"term"', "30")
    worker = app.worker("--shutdown-timeout", "0.3", "--lease", "60")
    app.wait_for("start")
    began = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(10) == 0
    assert time.monotonic() - began < 5
    assert "handing back 1 unfinished job" in app.output(worker)
    # Back on its queue at once, not after the 60 s lease.
    assert status(app, job_id) == "queued"


def test_sigtstp_is_quiet_and_running_jobs_finish(app: App) -> None:
    enqueue(app, "slow", '"quiet"', "0.5")
    worker = app.worker()
    app.wait_for("start")
    worker.send_signal(signal.SIGTSTP)
    time.sleep(0.1)
    later = enqueue(app, "slow", '"later"', "0")
    app.wait_for("done")
    time.sleep(0.3)
    assert status(app, later) == "queued"  # quiet: no new jobs fetched
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(10) == 0


def test_second_sigint_stops_at_once(app: App) -> None:
    job_id = enqueue(app, "slow", '"int"', "30")
    worker = app.worker("--shutdown-timeout", "30", "--lease", "60")
    app.wait_for("start")
    worker.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert worker.poll() is None  # waiting for the job
    worker.send_signal(signal.SIGINT)
    assert worker.wait(10) == 130
    assert status(app, job_id) == "running"  # left to its lease, not lost


def test_two_workers_enqueue_a_periodic_job_once_per_tick(app: App) -> None:
    interval = 0.3
    workers = [app.worker(BATCHY_TEST_PERIODIC=str(interval)) for _ in range(2)]
    time.sleep(3.2)
    for w in workers:
        w.send_signal(signal.SIGTERM)
        w.wait(10)
    ticks = [float(t) for t, _ in app.lines("tick")]
    slots = [int(t // interval) for t in ticks]
    assert 5 <= len(ticks) <= 11, ticks
    assert len(set(slots)) == len(slots), ticks
    assert len({pid for _, pid in app.lines("tick")}) >= 1


def test_cross_job_batching_in_a_worker_process(app: App) -> None:
    code = (
        "import asyncio, app_jobs\nfrom batchy.jobs import Worker\n"
        "q = app_jobs.queue\n"
        "asyncio.run(q.enqueue_many(app_jobs.load_user.call(i) for i in range(1000)))\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=HERE, env=app.env(), check=True, timeout=30)
    worker = app.worker("--concurrency", "100", "--burst")
    assert worker.wait(60) == 0
    loads = [int(n) for (n,) in app.lines("load")]
    assert sum(loads) == 1000
    assert len(loads) <= 13, loads


def test_bad_rows_written_straight_into_sqlite_go_dead(tmp_path: Path) -> None:
    app = App(str(tmp_path / "jobs.db"), tmp_path / "log.txt", "x:")
    enqueue(app, "slow", '"fine"', "0")  # creates the schema
    db = sqlite3.connect(app.store)
    db.execute(
        "INSERT INTO jobs (id, queue, payload, due) VALUES "
        "('raw-1', 'default', 'not json at all', 0), "
        '(\'raw-2\', \'default\', \'{"job": "ghost", "args": [], "kwargs": {}}\', 0)'
    )
    db.commit()
    db.close()
    worker = app.worker("--burst")
    try:
        assert worker.wait(30) == 0
    finally:
        app.stop_all()
    listing = app.cli("dead", "list", "app_jobs:queue")
    assert listing.returncode == 0
    assert "raw-1" in listing.stdout and "cannot be decoded" in listing.stdout
    assert "raw-2" in listing.stdout and "'ghost'" in listing.stdout
    assert app.lines("done") == [["fine", str(worker.pid)]]


def test_cli_info_dead_retry_delete(app: App) -> None:
    enqueue(app, "slow", '"a"', "0")
    enqueue(app, "slow", '"b"', '"not a number"')  # fails: sleep("...")
    info = app.cli("info", "app_jobs:queue")
    assert info.returncode == 0
    assert "default" in info.stdout and "dead: 0" in info.stdout
    code = (
        "import asyncio, app_jobs\nfrom batchy.jobs import Worker\n"
        "q = app_jobs.queue\n"
        "q.jobs['slow'].retries = 0\n"
        "asyncio.run(Worker(q, burst=True, poll_interval=0.02).run())\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=HERE, env=app.env(), check=True, timeout=30)
    assert "dead: 1" in app.cli("info", "app_jobs:queue").stdout
    listing = app.cli("dead", "list", "app_jobs:queue").stdout
    dead_id = listing.splitlines()[2].split()[0]  # after the store and the heading
    assert "TypeError" in listing
    missing = app.cli("dead", "retry", "app_jobs:queue")
    assert missing.returncode == 2 and "needs job ids, or --all" in missing.stderr
    assert "retried 1" in app.cli("dead", "retry", "app_jobs:queue", dead_id).stdout
    assert "dead: 0" in app.cli("info", "app_jobs:queue").stdout
    subprocess.run([sys.executable, "-c", code], cwd=HERE, env=app.env(), check=True, timeout=30)
    assert "deleted 1" in app.cli("dead", "delete", "app_jobs:queue", "--all").stdout


def test_cli_info_shows_busiest_and_stalled_keys(app: App) -> None:
    for n in range(3):
        enqueue(app, "slow", f'"a{n}"', "0", "--key", "post-1")
    enqueue(app, "slow", '"b"', "0", "--key", "post-2")
    info = app.cli("info", "app_jobs:queue")
    assert info.returncode == 0, info.stderr
    assert "busiest keys:" in info.stdout
    lines = info.stdout.split("busiest keys:")[1].strip().splitlines()
    assert lines[0].split()[:2] == ["slow:post-1", "jobs=3"]
    assert lines[1].split()[:2] == ["slow:post-2", "jobs=1"]
    assert "stalled keys:" not in info.stdout


def test_cli_errors_name_the_problem(tmp_path: Path) -> None:
    app = App(str(tmp_path / "jobs.db"), tmp_path / "log.txt", "x:")
    bad_app = app.cli("info", "no_such_module:queue")
    assert bad_app.returncode == 2 and "cannot import module 'no_such_module'" in bad_app.stderr
    not_queue = app.cli("info", "app_jobs:note")
    assert not_queue.returncode == 2 and "not a batchy.jobs.Queue" in not_queue.stderr
    no_job = app.cli("enqueue", "app_jobs:queue", "nope")
    assert no_job.returncode == 2 and "'nope' is not declared" in no_job.stderr
    assert "slow" in no_job.stderr
    bad_json = app.cli("enqueue", "app_jobs:queue", "slow", "hello")
    assert bad_json.returncode == 2 and "is not JSON" in bad_json.stderr
    bad_weight = app.cli("worker", "app_jobs:queue", "-q", "critical,x")
    assert bad_weight.returncode == 2 and "weight 'x'" in bad_weight.stderr


def test_three_workers_on_one_store_run_each_job_once(app: App) -> None:
    code = (
        "import asyncio, app_jobs\nfrom batchy.jobs import Worker\n"
        "q = app_jobs.queue\n"
        # 10 ms a job: 600 jobs keep one worker busy for 0.3 s, longer than a
        # second worker process takes to start on a loaded machine (at 1 ms, the
        # first worker could drain the queue before the others began).
        "asyncio.run(q.enqueue_many(app_jobs.slow.call(str(i), 0.01) for i in range(600)))\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=HERE, env=app.env(), check=True, timeout=30)
    workers = [app.worker("--concurrency", "20", "--burst") for _ in range(3)]
    for w in workers:
        assert w.wait(60) == 0
    done = app.lines("done")
    tags = sorted(int(tag) for tag, _ in done)
    assert tags == list(range(600))  # every job once: claims are atomic across processes
    assert len({pid for _, pid in done}) >= 2


def stop_outside_a_write(app: App, proc: subprocess.Popen[str]) -> None:
    """SIGSTOP ``proc``, at a moment it holds no SQLite write transaction.

    A process stopped inside one holds the file, and no other process writes
    until it goes on (the store then gives back the leases the hold cost: see
    test_sqlite_hold); a test of what happens while it is stopped would wait for
    ever. Its turns and heartbeats take milliseconds, so a retry soon finds a gap.
    """
    for _ in range(100):
        proc.send_signal(signal.SIGSTOP)
        if not app.store.endswith(".db"):
            return
        db = sqlite3.connect(app.store, timeout=0)
        try:
            db.execute("BEGIN IMMEDIATE")
            db.rollback()
            return
        except sqlite3.OperationalError:  # database is locked: by the stopped process
            proc.send_signal(signal.SIGCONT)
            time.sleep(0.01)
        finally:
            db.close()
    raise AssertionError(f"worker {proc.pid} held the SQLite file at 100 tries to stop it")


def test_a_paused_worker_has_no_say_when_it_resumes(app: App) -> None:
    """SIGSTOP a worker past its lease mid-job, SIGCONT it while the job's new holder
    still runs it: the paused worker's outcome is refused (before fencing it was
    applied, and the key's next job started alongside the new holder's run)."""
    first = enqueue(app, "slow", '"k1"', "1.0", "--key", "k")
    enqueue(app, "slow", '"k2"', "0.1", "--key", "k")
    paused = app.worker("--lease", "0.8", "--heartbeat", "0.2")
    app.wait_for("start")
    stop_outside_a_write(app, paused)
    try:
        holder = app.worker("--lease", "0.8", "--heartbeat", "0.2")
        starts = app.wait_for("start", 2)  # the lease ran out: the holder runs k1 again
        assert starts[1] == ["k1", str(holder.pid)]
        time.sleep(0.3)
    finally:
        paused.send_signal(signal.SIGCONT)  # its run of k1 ends now, mid the holder's run
    app.wait_for("done", 2)
    time.sleep(0.5)
    done = app.lines("done")
    order = [(kind, tag, pid) for kind in ("start", "done") for tag, pid in app.lines(kind)]
    # The paused run of k1 ends at its next await after SIGCONT, or is cancelled
    # first (its heartbeat refused): either way nothing it says is applied.
    stale = [("done", "k1", str(paused.pid))]
    assert sorted(set(order) - set(stale)) == sorted(
        [
            ("start", "k1", str(paused.pid)),
            ("start", "k1", str(holder.pid)),
            ("start", "k2", str(holder.pid)),
            ("done", "k1", str(holder.pid)),
            ("done", "k2", str(holder.pid)),
        ]
    ), order
    assert len(order) in (5, 6), order
    # Per-key order: k2 started only after the holder's k1 was done.
    assert done.index(["k1", str(holder.pid)]) < done.index(["k2", str(holder.pid)])
    log = app.log.read_text().splitlines()
    assert log.index(f"done k1 {holder.pid}") < log.index(f"start k2 {holder.pid}")
    assert status(app, first) == "done"
    for proc in (paused, holder):
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    lost = [line for line in app.output(paused).splitlines() if " lost job " in line]
    assert len(lost) == 1 and f"lost job {first} (slow, queue 'default')" in lost[0], lost
    assert app.cli("dead", "list", "app_jobs:queue").stdout.splitlines()[-1] == "no dead jobs"


def test_a_worker_whose_listen_connection_is_killed_listens_again(
    tmp_path: Path, postgres_dsn: str, postgres_schema: str
) -> None:
    """pg_terminate_backend on a worker process's LISTEN connection: the job pushed
    while it was down runs, and wake-ups work again (a 30 s poll never rescues it)."""
    import psycopg

    from batchy.jobs import Queue
    from batchy_contrib.jobs.postgres import PostgresBackend

    app = App(postgres_dsn, tmp_path / "log.txt", postgres_schema)
    # The same store and job name as the worker's app: pushes from here, in microseconds
    # (a CLI enqueue takes long enough to start that the listener would be back first).
    here = Queue(PostgresBackend(postgres_dsn, schema=postgres_schema))

    @here.job(name="slow")
    async def slow(tag: str, seconds: float) -> str:
        return tag

    name = f"ptest-{uuid.uuid4().hex[:8]}"  # libpq names the worker's connections after it
    worker = app.worker("--poll-interval", "30", PGAPPNAME=name)
    listening = (
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND query LIKE 'LISTEN %%'"
    )
    try:
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:

            def listener(not_pid: int = 0) -> int:
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    pids = [p for (p,) in admin.execute(listening, (name,)) if p != not_pid]
                    if pids:
                        return pids[0]
                    time.sleep(0.02)
                raise AssertionError(f"worker {worker.pid} is not listening: {app.output(worker)}")

            first = listener()
            slow.enqueue_sync("before", 0)
            app.wait_for("done", 1, timeout=5)
            time.sleep(0.3)  # idle again: waiting on LISTEN (and a 30 s poll)
            admin.execute("SELECT pg_terminate_backend(%s)", (first,))
            slow.enqueue_sync("during", 0)  # its NOTIFY reaches nobody
            app.wait_for("done", 2, timeout=5)
            listener(not_pid=first)
            time.sleep(0.3)
            began = time.monotonic()
            slow.enqueue_sync("after", 0)
            app.wait_for("done", 3, timeout=5)
            assert time.monotonic() - began < 1.0  # woken, not polled
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(10) == 0
    finally:
        app.stop_all()
        asyncio.run(here.backend.close())  # its blocking connection
    assert [tag for tag, _ in app.lines("done")] == ["before", "during", "after"]
    assert "LISTEN connection was lost" in app.output(worker)
