"""A store's server restarted, crashed or down a while under running workers and enqueuers.

The servers are the session's own (``private_postgres``, ``private_redis``:
tests/private_servers.py; Redis with AOF, as the jobs guide asks), so these
restarts disturb no other test session. Three worker processes (``batchy
worker``, four jobs at once each) run a backlog of ordered, plain, delayed and
failing jobs and a periodic job while the server goes: a clean restart, a
crash, five seconds down. Then every job has run at least once, each key's jobs
in order, the failing ones are dead and the results kept; each worker took up
the store again by itself (within its back-off) and said once that the store
was down and once that it was back, with no traceback and nothing in asyncio's
"Exception in callback"; on PostgreSQL each LISTENs again (the server lists
it); idle workers take a new job at once; and SIGTERM stops each of them in
time, also while the server is down. A job enqueued once the server is back
starts within a second or two, not after a back-off grown during the outage.

An enqueue while the server is down fails at once with an error that says where
and why, and the next one once it is back goes through; a periodic tick due
during the outage runs once it is over.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg
import pytest

from batchy.jobs import Queue, Worker
from batchy_contrib.jobs.postgres import PostgresBackend

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # restart_app, for the jobs' declarations

from restart_app import build  # noqa: E402
from restart_app import store as restart_store  # noqa: E402

pytestmark = pytest.mark.timeout(120)

KEYS, SEQS, PLAIN, DELAYED, DOOMED = 12, 12, 60, 12, 3
LEASE, SHUTDOWN, POLL = 3.0, 2.0, 0.5
#: A worker's output may hold none of these.
BAD = ("Traceback", "Exception in callback", "never retrieved", "Task was destroyed")


def location(server: Any, kind: str) -> tuple[str, str]:
    """The store's location and a prefix (on PostgreSQL a schema) of the test's own."""
    name = uuid.uuid4().hex[:8]
    return (server.dsn, f"restart_{name}") if kind == "postgres" else (server.url, f"r{name}:")


class Fleet:
    """Worker processes of restart_app on one store, and what their jobs wrote."""

    def __init__(self, store: str, prefix: str, logs: Path) -> None:
        self.store, self.prefix, self.logs = store, prefix, logs
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, count: int = 3) -> None:
        for _ in range(count):
            i = len(self.procs)
            env = {
                **os.environ,
                "BATCHY_TEST_STORE": self.store,
                "BATCHY_TEST_PREFIX": self.prefix,
                "BATCHY_TEST_LOG_DIR": str(self.logs),
                "PGAPPNAME": f"restart-worker-{i}",  # its connections, in pg_stat_activity
                "PYTHONPATH": os.pathsep.join(
                    filter(None, [str(HERE), os.environ.get("PYTHONPATH")])
                ),
            }
            cmd = [sys.executable, "-m", "batchy", "worker", "restart_app:queue", "-c", "4",
                   "--lease", str(LEASE), "--shutdown-timeout", str(SHUTDOWN),
                   "--poll-interval", str(POLL)]  # fmt: skip
            # Output to a file: a pipe nobody reads would fill up and block the worker.
            with open(self.logs / f"worker{i}.out", "wb") as out:
                self.procs.append(
                    subprocess.Popen(cmd, cwd=HERE, env=env, stdout=out, stderr=subprocess.STDOUT)
                )

    def outputs(self) -> list[str]:
        return [(self.logs / f"worker{i}.out").read_text() for i in range(len(self.procs))]

    def lines(self) -> list[list[str]]:
        """What the jobs wrote, in time order: ``[what, *args, pid, time]``."""
        rows = [
            line.split()
            for path in self.logs.glob("jobs-*.log")
            for line in path.read_text().splitlines()
        ]
        return sorted(rows, key=lambda r: float(r[-1]))

    async def busy(self) -> None:
        """Until every worker has started jobs."""
        for _ in range(400):
            if len({r[-2] for r in self.lines() if r[0] == "S"}) >= len(self.procs):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"the workers did not start: {self.outputs()}")

    def stop(self, within: float) -> None:
        """SIGTERM to every worker: each exits 0 within ``within`` seconds."""
        began = time.monotonic()
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        late = []
        for i, proc in enumerate(self.procs):
            try:
                proc.wait(max(0.1, began + within - time.monotonic()))
            except subprocess.TimeoutExpired:
                late.append(i)
        took = time.monotonic() - began
        self.kill()
        assert not late, f"workers {late} still running {took:.1f}s after SIGTERM: {self.outputs()}"
        assert [p.returncode for p in self.procs] == [0] * len(self.procs), self.outputs()

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


@pytest.fixture
def fleets(tmp_path: Path) -> Any:
    made: list[Fleet] = []

    def make(store: str, prefix: str) -> Fleet:
        logs = tmp_path / f"fleet{len(made)}"
        logs.mkdir()
        made.append(Fleet(store, prefix, logs))
        return made[-1]

    yield make
    for fleet in made:
        fleet.kill()


async def backlog(queue: Queue) -> list[Any]:
    """Ordered jobs (KEYS keys of SEQS each), plain ones, delayed ones, doomed ones."""
    step, plain, doomed = (queue.jobs[f"restart.{n}"] for n in ("step", "plain", "doomed"))
    calls = [step.call(k, s) for s in range(SEQS) for k in range(KEYS)]
    calls += [plain.call(n) for n in range(PLAIN)]
    calls += [plain.options(delay=1.0).call(1000 + n) for n in range(DELAYED)]
    calls += [doomed.call(n) for n in range(DOOMED)]
    return list(await queue.enqueue_many(calls))


async def drained(queue: Queue, fleet: Fleet, seconds: float = 40.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        info = await queue.info()
        if sum(q.size + q.running + q.scheduled + q.retrying for q in info.queues) == 0:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"jobs left after {seconds}s: {await queue.info()}; {fleet.outputs()}")


def check_runs(fleet: Fleet) -> None:
    """Every job ran at least once; no job of a key started before the one before it ended."""
    lines = fleet.lines()
    ended: dict[int, int] = defaultdict(lambda: -1)  # key -> highest seq ended
    late = []
    for what, *args in lines:
        if what == "S" and int(args[1]) > ended[int(args[0])] + 1:
            late.append(args)
        elif what == "D":
            ended[int(args[0])] = max(ended[int(args[0])], int(args[1]))
    assert late == [], f"jobs started before their key's previous job ended: {late[:5]}"
    done = {(int(r[1]), int(r[2])) for r in lines if r[0] == "D"}
    assert done == {(k, s) for k in range(KEYS) for s in range(SEQS)}
    plain = {int(r[1]) for r in lines if r[0] == "P"}
    assert plain == {*range(PLAIN), *range(1000, 1000 + DELAYED)}
    assert {int(r[1]) for r in lines if r[0] == "X"} == set(range(DOOMED))


def check_logs(fleet: Fleet, *, back: bool = True) -> None:
    """The outage is one line down and one line back (if ``back``) per worker, and nothing
    else went wrong."""
    for out in fleet.outputs():
        assert not any(bad in out for bad in BAD), out
        down = out.count("store unreachable since ")
        assert down <= 1 and out.count("store back after ") == (down if back else 0), out
        assert "ticks not enqueued" not in out, out
        assert "WARNING psycopg.pool" not in out, out


def outage(server: Any, how: str) -> None:
    if how == "down 5 s":
        server.stop()
        time.sleep(5)
        server.start()
    elif how in ("fast", "immediate"):
        server.restart(how)  # PostgreSQL's shutdown modes: immediate is a crash
    else:
        server.restart(crash=how == "crash")  # Redis: SIGTERM (AOF flushed) or SIGKILL


async def resumed(fleet: Fleet, seconds: float) -> None:
    """Until each worker that said the store was down has said it is back."""
    outputs: list[str] = []
    for _ in range(int(seconds / 0.1)):
        outputs = fleet.outputs()
        if all(
            o.count("store back after ") >= o.count("store unreachable since ") for o in outputs
        ):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"not all workers back {seconds}s after the server: {outputs}")


async def listening(server: Any, workers: int) -> None:
    """Until each worker process holds a LISTEN connection again (PostgreSQL)."""
    seen: set[str] = set()
    for _ in range(100):
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT application_name FROM pg_stat_activity "
                "WHERE application_name LIKE 'restart-worker-%' AND query LIKE 'LISTEN %'"
            ).fetchall()
        seen = {name for (name,) in rows}
        if len(seen) == workers:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"only {sorted(seen)} listen again")


async def idle_pickup(queue: Queue) -> list[float]:
    """Seconds from enqueue to start for three jobs, one at a time, to idle workers."""
    waits = []
    for n in range(3):
        began = time.time()
        handle = await queue.jobs["restart.plain"].enqueue(5000 + n)
        assert await handle.result(timeout=10) == 2 * (5000 + n)
        waits.append(time.time() - began)
        await asyncio.sleep(0.2)
    return waits


OUTAGES = [
    ("postgres", "fast"),
    ("postgres", "immediate"),
    ("postgres", "down 5 s"),
    ("redis", "restart"),
    ("redis", "crash"),
    ("redis", "down 5 s"),
]


@pytest.mark.parametrize(("kind", "how"), OUTAGES, ids=[f"{k}-{h}" for k, h in OUTAGES])
async def test_workers_ride_out_a_server_restart(
    kind: str, how: str, request: pytest.FixtureRequest, fleets: Any
) -> None:
    server = request.getfixturevalue(f"private_{kind}")
    store, prefix = location(server, kind)
    queue = build(store, prefix)
    try:
        handles = await backlog(queue)
        fleet = fleets(store, prefix)
        fleet.start()
        await fleet.busy()
        await asyncio.to_thread(outage, server, how)
        # Each worker takes up the store by itself: its tries are at most a second
        # apart, a PostgreSQL one waits up to 2 s for a connection (a generous bound
        # here; test_an_idle_worker_takes_a_job_... below measures it).
        await resumed(fleet, 10 * POLL + 5.0)
        await drained(queue, fleet)
        check_runs(fleet)
        if kind == "postgres":
            await listening(server, len(fleet.procs))
        waits = await idle_pickup(queue)
        assert max(waits) < POLL, waits  # (on PostgreSQL woken through their new LISTEN)
        results = [await h.result(timeout=5) for h in handles[KEYS * SEQS : KEYS * SEQS + PLAIN]]
        assert results == [2 * n for n in range(PLAIN)]
        assert (await queue.info()).dead == DOOMED
        fleet.stop(within=SHUTDOWN + 2.0)
        check_logs(fleet)
    finally:
        await queue.backend.close()


@pytest.mark.parametrize("kind", ["postgres", "redis"])
async def test_sigterm_while_the_server_is_down_stops_in_time_and_loses_nothing(
    kind: str, request: pytest.FixtureRequest, fleets: Any
) -> None:
    server = request.getfixturevalue(f"private_{kind}")
    store, prefix = location(server, kind)
    queue = build(store, prefix)
    try:
        await backlog(queue)
        fleet = fleets(store, prefix)
        fleet.start()
        await fleet.busy()
        server.stop()
        await asyncio.sleep(1.0)
        # The running jobs' grace, one unanswered call (a lease), a second: the
        # documented bound, plus a second for the process to end.
        fleet.stop(within=SHUTDOWN + LEASE + 1.0 + 1.0)
        check_logs(fleet, back=False)
        server.start()
        # What they could not hand in runs again once its lease has run out.
        fleet.start()
        await drained(queue, fleet)
        check_runs(fleet)
        fleet.stop(within=SHUTDOWN + 2.0)
    finally:
        await queue.backend.close()


class Once:
    """A schedule with one tick, at ``at`` (and the next a day later)."""

    def __init__(self, at: float) -> None:
        self.at = at

    def next_after(self, t: float) -> float:
        return self.at if t < self.at else self.at + 86400.0


async def test_a_tick_due_while_postgres_is_down_runs_once_it_is_back(
    private_postgres: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # While the server was down, the tick's push waited for a connection past the
    # worker's lease; that NoAnswer was taken for the store refusing the tick, which
    # was logged as "not enqueued" and dropped: a nightly job skipped its night.
    queue = Queue(PostgresBackend(private_postgres.dsn, schema=f"tick_{uuid.uuid4().hex[:8]}"))
    ran: list[float] = []
    at = time.time() + 1.5

    @queue.periodic(Once(at), name="nightly")
    async def nightly() -> None:
        ran.append(time.time())

    await queue.backend.migrate()
    worker = Worker(queue, lease=1.0, poll_interval=0.1, shutdown_timeout=0.5)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(0.5)
        with caplog.at_level(logging.WARNING, logger="batchy.jobs"):
            await asyncio.to_thread(private_postgres.stop)
            await asyncio.sleep(at + 2.0 - time.time())  # due, and a lease past it
            await asyncio.to_thread(private_postgres.start)
            for _ in range(100):
                if ran:
                    break
                await asyncio.sleep(0.05)
        assert len(ran) == 1 and ran[0] > at + 2.0, ran
        assert "ticks not enqueued" not in caplog.text
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
        await queue.backend.close()


async def in_transaction(dsn: str, enqueue: Any) -> None:
    """``enqueue(conn)`` in a transaction of an application's own connection to ``dsn``."""
    async with await psycopg.AsyncConnection.connect(dsn, connect_timeout=3) as conn:
        async with conn.transaction():
            await enqueue(conn)


def in_transaction_sync(dsn: str, enqueue: Any) -> None:
    with psycopg.connect(dsn, connect_timeout=3) as conn, conn.transaction():
        enqueue(conn)


@pytest.mark.parametrize("kind", ["postgres", "redis"])
async def test_an_enqueue_while_the_server_is_down_fails_at_once_and_works_once_it_is_back(
    kind: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    # On PostgreSQL an enqueue waited for psycopg_pool's whole timeout (30 s) while
    # the pool retried its refused connects in the background, and then raised
    # PoolTimeout("couldn't get a connection after 30.00 sec"): no server, no reason.
    # Meanwhile psycopg_pool logged a warning for every connect it tried: a dozen
    # for each enqueue, besides the error the enqueue raised.
    caplog.set_level(logging.INFO)
    server = request.getfixturevalue(f"private_{kind}")
    store, prefix = location(server, kind)
    queue = build(store, prefix)
    plain = queue.jobs["restart.plain"]
    try:
        await plain.enqueue(1)
        await asyncio.to_thread(plain.enqueue_sync, 2)  # both clients connected
        server.stop()
        await asyncio.sleep(0.2)  # the app's loop runs on between two requests
        calls = [lambda: plain.enqueue(3), lambda: asyncio.to_thread(plain.enqueue_sync, 3)]
        for call in calls:
            began = time.monotonic()
            with pytest.raises(Exception) as caught:
                await asyncio.wait_for(call(), 10)
            assert time.monotonic() - began < 3.0, caught.value
            assert queue.backend.unreachable(caught.value), repr(caught.value)
            message = str(caught.value)
            assert f"127.0.0.1:{server.port}" in message
            if kind == "postgres":  # (Redis: "Error 111 connecting to 127.0.0.1:...")
                assert message.startswith(
                    f"PostgreSQL postgresql://postgres@127.0.0.1:{server.port}/test schema '{prefix}' gave no connection within 2s: its last try to connect failed (OperationalError: connection failed: "
                )
                assert "Connection refused" in message
                assert message.endswith(
                    "Check that the server is running and reachable; this call sent nothing "
                    "(an enqueue enqueued nothing), and the next one connects again"
                )
        server.start()
        await plain.enqueue(5)
        await asyncio.to_thread(plain.enqueue_sync, 6)
        if kind == "postgres":  # in the application's transactions too
            await in_transaction(store, lambda conn: plain.options(connection=conn).enqueue(7))
            await asyncio.to_thread(
                in_transaction_sync,
                store,
                lambda conn: plain.options(connection=conn).enqueue_sync(8),
            )
        info = await queue.info()
        assert sum(q.size for q in info.queues) == (6 if kind == "postgres" else 4)
        noise = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert noise == [], [f"{r.name}: {r.getMessage()}" for r in noise]
    finally:
        await queue.backend.close()


async def test_a_transactional_enqueue_on_a_connection_the_restart_ended_fails_and_adds_nothing(
    private_postgres: Any,
) -> None:
    store, schema = location(private_postgres, "postgres")
    queue = build(store, schema)
    plain = queue.jobs["restart.plain"]
    try:
        await plain.enqueue(1)
        async with await psycopg.AsyncConnection.connect(store) as conn:
            await asyncio.to_thread(private_postgres.restart, "fast")
            with pytest.raises(psycopg.OperationalError):
                async with conn.transaction():
                    await plain.options(connection=conn).enqueue(2)
        await in_transaction(store, lambda conn: plain.options(connection=conn).enqueue(3))
        assert sum(q.size for q in (await queue.info()).queues) == 2
    finally:
        await queue.backend.close()


class Resume:
    """A worker of its own (poll ``POLL_AFTER``) in this process, the times its turns failed,
    and an enqueuer with connections of its own (its enqueue does not revive the worker's)."""

    def __init__(self, store: str, prefix: str) -> None:
        self.started: list[float] = []
        self.failed: list[float] = []
        self.queue, self.enqueuer = self.declared(store, prefix), self.declared(store, prefix)
        backend, cycle = self.queue.backend, self.queue.backend.cycle

        async def noted(*args: Any) -> Any:
            try:
                return await cycle(*args)
            except Exception:
                self.failed.append(time.monotonic())
                raise

        backend.cycle = noted  # type: ignore[method-assign]
        self.worker = Worker(self.queue, poll_interval=POLL_AFTER, lease=5.0, shutdown_timeout=1.0)

    def declared(self, store: str, prefix: str) -> Queue:
        queue = Queue(restart_store(store, prefix))

        @queue.job(name="resume.ping")
        async def ping() -> None:
            self.started.append(time.monotonic())

        return queue

    async def run_one(self, within: float) -> float:
        """Enqueue a job: the seconds until the worker starts it (at most ``within``)."""
        began, count = time.monotonic(), len(self.started)
        await self.enqueuer.jobs["resume.ping"].enqueue()
        enqueued = time.monotonic()
        while len(self.started) == count and time.monotonic() < began + within:
            await asyncio.sleep(0.01)
        assert len(self.started) > count, f"not started {within}s after its enqueue"
        return self.started[count] - enqueued

    async def failures(self, count: int, seconds: float) -> None:
        """Until the worker's turns have failed ``count`` times in all."""
        deadline = time.monotonic() + seconds
        while len(self.failed) < count:
            assert time.monotonic() < deadline, f"{len(self.failed)} failed turns in {seconds}s"
            await asyncio.sleep(0.005)


#: The poll interval of the worker that resumes after an outage.
POLL_AFTER = 1.0


@pytest.mark.parametrize("kind", ["postgres", "redis"])
async def test_an_idle_worker_takes_a_job_about_a_poll_interval_after_an_outage(
    kind: str, request: pytest.FixtureRequest
) -> None:
    # The worker's back-off between its tries grew to ten poll intervals during
    # an outage, and it slept it out with the store back: a job enqueued once
    # the server was up again waited up to ten polls (here up to 10 s) to start.
    server = request.getfixturevalue(f"private_{kind}")
    resume = Resume(*location(server, kind))
    task = asyncio.create_task(resume.worker.run())
    try:
        await resume.run_one(within=30.0)  # the worker is up and idle
        await asyncio.to_thread(server.stop)
        # Four failed turns: the old back-off after the fourth was 6 to 8 s.
        await resume.failures(4, seconds=60.0)
        await asyncio.to_thread(server.start)
        # The worker tries again at most a poll interval (or a second) after a
        # failed try; a try while the server was starting may fail, one more
        # goes through: well within three polls of the enqueue.
        waited = await resume.run_one(within=20.0)
        assert waited < 3 * POLL_AFTER, f"started {waited:.1f}s after its enqueue"
    finally:
        resume.worker.stop()
        await asyncio.wait_for(task, 15)
        await resume.queue.backend.close()
        await resume.enqueuer.backend.close()
