"""The SQLite store shared by processes: they open a new file together, and one may hold it."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from batchy.jobs import Envelope, SQLiteBackend, WorkerInfo, _clock

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The store's clock, set by the test: ``clock[0] = ...``."""
    now = [1000.0]
    monkeypatch.setattr(_clock, "store_now", lambda: now[0])
    return now


def leases(path: Path) -> dict[str, float]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT id, lease FROM jobs WHERE state = 1").fetchall())


async def test_a_transaction_holding_the_file_past_a_lease_does_not_hand_its_job_on(
    tmp_path: Path, clock: list[float]
) -> None:
    # A worker stopped (SIGSTOP) inside a write transaction keeps every other
    # process from renewing its leases. When it goes on, the next cycle used to
    # find those leases run out and hand their jobs to a second worker while the
    # first still ran them (the crash test's rare per-key order violations).
    path = tmp_path / "jobs.db"
    a, stopped, c = SQLiteBackend(path), SQLiteBackend(path), SQLiteBackend(path)
    await a.push([Envelope("early", "default", "{}"), Envelope("held", "default", "{}")], 1000.0)
    (early,) = await a.cycle([], ["default"], 1, "A", 0.5, 1000.0)  # until 1000.5
    clock[0] = 1000.4
    (held,) = await a.cycle([], ["default"], 1, "A", 1.0, 1000.4)  # until 1001.4
    assert (early.id, held.id) == ("early", "held")

    clock[0] = 1000.6  # early's lease ran out before the hold: A had its chance
    with stopped._tx():
        clock[0] = 1003.0  # held the file for 2.4 s, past held's lease

    clock[0] = 1003.1
    claimed = await c.cycle([], ["default"], 10, "C", 30.0, 1003.1)
    assert [job.id for job in claimed] == ["early"]
    # held got the 2.4 s back (1001.4 -> 1003.8), once: later transactions add nothing.
    assert leases(path)["held"] == pytest.approx(1003.8)
    clock[0] = 1003.2
    assert await c.cycle([], ["default"], 10, "C", 30.0, 1003.2) == []
    assert leases(path)["held"] == pytest.approx(1003.8)
    info = WorkerInfo("A", "host", 1, ("default",), 1, ("held",), 1000.0)
    lost = await a.heartbeat(info, [(held.id, held.token)], 1.0, 1003.2)
    assert lost == []
    for store in (a, stopped, c):
        await store.close()


async def two_stores_one_claim(path: Path) -> tuple[SQLiteBackend, SQLiteBackend]:
    """Two stores on ``path``; the first holds job "held", its lease until 1001.0."""
    a, b = SQLiteBackend(path), SQLiteBackend(path)
    await a.push([Envelope("held", "default", "{}")], 1000.0)
    await a.cycle([], ["default"], 1, "A", 1.0, 1000.0)
    return a, b


async def test_a_rolled_back_transaction_notes_no_hold_and_a_later_one_still_applies_it(
    tmp_path: Path, clock: list[float]
) -> None:
    path = tmp_path / "jobs.db"
    a, b = await two_stores_one_claim(path)
    with b._tx():
        clock[0] = 1002.0  # a 2 s hold
    clock[0] = 1002.1
    with pytest.raises(RuntimeError), b._tx():  # gives the time back, then rolls back
        raise RuntimeError("the step failed")
    assert leases(path)["held"] == pytest.approx(1001.0)
    await b.cycle([], ["default"], 10, "B", 30.0, 1002.1)
    assert leases(path)["held"] == pytest.approx(1003.0)
    for store in (a, b):
        await store.close()


# Opens a new file per round; the processes' rounds begin together, every 50 ms.
_OPENER = """
import asyncio, sys, time
from batchy.jobs import SQLiteBackend
folder, start = sys.argv[1], float(sys.argv[2])
for n in range(20):
    time.sleep(max(0.0, start + n * 0.05 - time.time()))
    asyncio.run(SQLiteBackend(f"{folder}/jobs{n}.db").close())
"""


def test_processes_opening_a_new_file_together_all_open_it(tmp_path: Path) -> None:
    # A worker and an enqueue started together both switch the new file to WAL; SQLite
    # answered the loser "database is locked" at once, without waiting (a third of the
    # rounds of three processes failed before the open retried).
    start = str(time.time() + 2.0)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPENER, str(tmp_path), start], stderr=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    errors = [proc.communicate(timeout=25)[1] for proc in procs]
    assert errors == ["", "", ""]


async def test_a_file_sqlite_keeps_out_of_wal_mode_is_named_in_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """SQLite answers WAL with the mode it kept where the file system has no shared
    memory; the store went on silently, its guarantees weaker than the docs say."""
    real_connect = sqlite3.connect

    def without_shared_memory(path: str, **kwargs: Any) -> sqlite3.Connection:
        # unix-none: a real SQLite file system layer without the WAL's shared memory.
        return real_connect(f"file:{path}?vfs=unix-none", uri=True, **kwargs)

    path = tmp_path / "jobs.db"
    with caplog.at_level("WARNING", logger="batchy.jobs"):
        await SQLiteBackend(tmp_path / "local.db").close()
        await SQLiteBackend(":memory:").close()  # no file, no WAL: nothing to say
        assert caplog.messages == []
        monkeypatch.setattr(sqlite3, "connect", without_shared_memory)
        store = SQLiteBackend(path)
    try:
        _push(store, "a")  # it works, with weaker guarantees
        assert [c.id for c in await store.cycle([], ["q"], 1, "w", 30.0, time.time())] == ["a"]
    finally:
        await store.close()
    assert caplog.messages == [
        f"SQLite job store {path}: the file stays in journal mode 'delete', as SQLite refused "
        "WAL (its file system offers no shared memory, as on most network mounts). The store "
        "works, but readers and writers now block each other, and a power loss during a "
        "write may corrupt the file unless synchronous='FULL'. Put the file on a local disk, "
        "or use another store for workers on several machines"
    ]


# -- a step's transaction always ends, and says what ended it -------------------------


def _push(store: SQLiteBackend, job_id: str, key: str | None = None, payload: str = "{}") -> None:
    store.push_sync([Envelope(job_id, "q", payload, key=key)], time.time())


def test_an_interrupt_once_the_file_is_held_leaves_no_transaction_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Interrupted(sqlite3.Connection):
        """Raises KeyboardInterrupt at the first statement after a BEGIN went through (a ^C)."""

        armed = False

        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            if Interrupted.armed and self.in_transaction:
                Interrupted.armed = False
                raise KeyboardInterrupt
            return super().execute(sql, *args)

    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: connect(*a, **k, factory=Interrupted))
    store = SQLiteBackend(tmp_path / "jobs.db", busy_timeout=0.5)
    monkeypatch.setattr(sqlite3, "connect", connect)
    Interrupted.armed = True
    with pytest.raises(KeyboardInterrupt):
        _push(store, "a")
    assert not store._db.in_transaction  # it held the file, and every later step failed
    _push(store, "b")
    other = SQLiteBackend(tmp_path / "jobs.db", busy_timeout=0.5)
    _push(other, "c")


def test_an_error_sqlite_rolled_back_itself_is_the_error_raised(tmp_path: Path) -> None:
    store = SQLiteBackend(tmp_path / "jobs.db")
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages + 2}")
    with pytest.raises(sqlite3.OperationalError, match="database or disk is full"):
        _push(store, "big", payload="x" * 200_000)  # was: 'cannot rollback - no transaction'
    store._db.execute("PRAGMA max_page_count = 1000000")
    _push(store, "small")


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), -1, 10**7, "10"])
def test_a_busy_timeout_sqlite_cannot_wait_is_refused(tmp_path: Path, bad: object) -> None:
    from batchy.jobs import ConfigError

    with pytest.raises(ConfigError) as error:
        SQLiteBackend(tmp_path / "jobs.db", busy_timeout=bad)  # type: ignore[arg-type]
    assert str(error.value) == (
        f"SQLiteBackend busy_timeout={bad!r} is not a time SQLite can wait for a held file; "
        "give seconds from 0 to 2,147,483 (default 10.0)"
    )


def test_an_app_connection_with_no_transaction_open_reads_each_head_inside_its_own(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.db"
    store, other = SQLiteBackend(path), SQLiteBackend(path)
    app = sqlite3.connect(path)  # the sqlite3 default: it begins at the first insert
    assert not app.in_transaction

    def another_writer_as_the_transaction_begins(sql: str) -> None:
        # Another process enqueues a job of the same key just as this one begins.
        if sql.upper().startswith("BEGIN"):
            app.set_trace_callback(None)
            _push(other, "theirs", key="acct-7")

    app.set_trace_callback(another_writer_as_the_transaction_begins)
    store.push_sync([Envelope("mine", "q", "{}", key="acct-7")], time.time(), connection=app)
    app.commit()
    heads = app.execute("SELECT id FROM jobs WHERE okey = 'acct-7' AND state = 0").fetchall()
    assert len(heads) == 1, heads  # two heads: the key's jobs would run at once
    app.close()


@pytest.mark.parametrize("busy_timeout", [0.0, 0.5])
async def test_threads_pushing_job_after_job_never_starve_the_loop(
    tmp_path: Path, busy_timeout: float
) -> None:
    import threading

    store = SQLiteBackend(tmp_path / "jobs.db", busy_timeout=busy_timeout)
    stop, failures, pushed = threading.Event(), [], [0, 0]

    def pusher(i: int) -> None:
        while not stop.is_set():
            try:
                _push(store, f"t{i}-{pushed[i] + 1}")
                pushed[i] += 1
            except sqlite3.OperationalError as error:  # the store's own lock is no held file
                failures.append(error)

    threads = [threading.Thread(target=pusher, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    # Far more than the fixed store needs, on any machine (a few ms per call): the
    # loop that only tried the lock made 4 calls in 12 s, or ran out of busy_timeout.
    deadline = time.monotonic() + 30.0
    try:
        while not all(pushed):  # both threads are at it before the loop's first call
            assert time.monotonic() < deadline, pushed
            await asyncio.sleep(0.001)
        before, calls = list(pushed), 0
        # 30 calls, and on until each thread pushed meanwhile: the calls won the
        # lock from threads that kept taking it.
        while calls < 30 or not all(now > then for now, then in zip(pushed, before)):
            await store.status("t0-1", time.time())  # a read on the loop
            await store.cycle([], ["q"], 5, "w", 30.0, time.time())  # a step on the loop
            calls += 1
            assert time.monotonic() < deadline, (calls, before, pushed)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert failures == []


async def test_a_worker_stopping_while_the_file_is_held_returns_and_its_job_runs_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio
    import logging

    from batchy.jobs import Queue, Worker

    path = tmp_path / "jobs.db"
    queue = Queue(SQLiteBackend(path, busy_timeout=0.5))
    runs: list[int] = []

    @queue.job(name="slow")
    async def slow(i: int) -> None:
        runs.append(i)
        await asyncio.sleep(0.2)

    await slow.enqueue(1)
    worker = Worker(queue, poll_interval=0.05, lease=1.0, shutdown_timeout=1.0)
    task = asyncio.create_task(worker.run())
    while not runs:
        await asyncio.sleep(0.01)
    app = sqlite3.connect(path)
    app.execute("BEGIN IMMEDIATE")  # the app holds the file through the worker's stop
    held = time.monotonic()
    worker.stop()
    with caplog.at_level(logging.ERROR, "batchy.jobs"):
        await asyncio.wait_for(task, 10)  # it used to raise "database is locked"
    app.rollback()
    app.close()
    assert "stopped without handing in 1 outcome(s)" in caplog.text
    # Its lease runs out: the hold's time is given back to it first.
    await asyncio.sleep(1.1 + time.monotonic() - held)
    await Worker(queue, burst=True, poll_interval=0.05).run()
    assert runs == [1, 1]
    await queue.close()


async def test_a_hold_whose_holder_notes_nothing_is_given_back_by_the_step_that_waited(
    tmp_path: Path, clock: list[float]
) -> None:
    # A holder killed holding the file (frozen, then killed), or one that rolls
    # back, notes no hold: the next step handed out jobs whose leases ran out only
    # because nobody could renew them meanwhile.
    import asyncio

    path = tmp_path / "jobs.db"
    a, c = await two_stores_one_claim(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the file is held from 1000.2
    clock[0] = 1000.2
    turn = asyncio.ensure_future(c.cycle([], ["default"], 10, "C", 30.0, 1000.2))
    await asyncio.sleep(0.1)
    assert not turn.done()  # C waits for the file
    clock[0] = 1002.6  # held 2.4 s, past the lease
    holder.execute("ROLLBACK")  # and ended without a note
    assert list(await turn) == []  # before: ["held"], while A still ran it
    assert leases(path)["held"] == pytest.approx(1003.4)  # the 2.4 s given back
    holder.close()
    for store in (a, c):
        await store.close()


async def test_a_hold_longer_than_busy_timeout_is_given_back_by_the_next_step_that_gets_in(
    tmp_path: Path, clock: list[float]
) -> None:
    # An application's transaction on the store's file (a long import, say) held
    # it past busy_timeout: the worker's waiting step gave up, and its next step,
    # a back-off later, began at once and so thought it had waited for nothing.
    # It handed out the job whose lease ran out only because the file was held,
    # while its worker still ran it (the first worker's run was cancelled as lost).
    path = tmp_path / "jobs.db"
    a = SQLiteBackend(path)
    await a.push([Envelope("held", "default", "{}")], 1000.0)
    await a.cycle([], ["default"], 1, "A", 1.0, 1000.0)  # lease until 1001.0
    c = SQLiteBackend(path, busy_timeout=0.05)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    for clock[0] in (1000.2, 1002.5):  # C's cycle gives up, backs off, gives up again
        with pytest.raises(sqlite3.OperationalError, match=r"busy_timeout=0\.05"):
            await c.cycle([], ["default"], 10, "C", 30.0, clock[0])
    clock[0] = 1002.6  # held past the lease
    holder.execute("ROLLBACK")
    clock[0] = 1002.8  # C's back-off ends: its next cycle gets the file at once
    assert list(await c.cycle([], ["default"], 10, "C", 30.0, 1002.8)) == []
    # The hold from C's first failed try to its last one (2.3 s) given back, once.
    assert leases(path)["held"] == pytest.approx(1003.3)
    clock[0] = 1002.9
    assert list(await c.cycle([], ["default"], 10, "C", 30.0, 1002.9)) == []
    assert leases(path)["held"] == pytest.approx(1003.3)
    holder.close()
    for store in (a, c):
        await store.close()


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("notes.txt", "is not a SQLite database"),
        ("folder", "cannot open or create it"),
        ("missing/jobs.db", "cannot open or create it"),
    ],
)
def test_a_file_the_store_cannot_open_is_named_with_the_fix(
    tmp_path: Path, name: str, said: str
) -> None:
    # It was sqlite3's bare "file is not a database" or "unable to open database
    # file", which named no file; `batchy info` blamed the app's code for it.
    from batchy.jobs import ConfigError

    (tmp_path / "notes.txt").write_text("not a database, a text file of another program\n")
    (tmp_path / "folder").mkdir()
    path = tmp_path / name
    with pytest.raises(ConfigError) as caught:
        SQLiteBackend(path)
    message = str(caught.value)
    assert f"SQLite job store {path}" in message and said in message
    assert "SQLite says:" in message and "nothing was changed" in message
    assert (tmp_path / "notes.txt").read_text().startswith("not a database")


# A worker process: its cycle waits for the held file until it gives up, then,
# a back-off later (a line on stdin), it cycles again and prints what it claimed.
_WAITER = """
import asyncio, sqlite3, sys, time
from batchy.jobs import SQLiteBackend
async def main():
    store = SQLiteBackend(sys.argv[1], busy_timeout=float(sys.argv[2]))
    print("open", flush=True)
    sys.stdin.readline()
    try:
        await store.cycle([], ["default"], 10, "C", 30.0, time.time())
    except sqlite3.OperationalError:
        print("gave up", flush=True)
    sys.stdin.readline()
    claimed = await store.cycle([], ["default"], 10, "C", 30.0, time.time())
    print(" ".join(sorted(job.id for job in claimed)), flush=True)
    await store.close()
asyncio.run(main())
"""

# An enqueue-only process (a web process): it never waited for the file.
_ENQUEUER = """
import sys, time
from batchy.jobs import Envelope, SQLiteBackend
SQLiteBackend(sys.argv[1]).push_sync([Envelope("new", "default", "{}")], time.time())
"""


async def test_a_hold_only_a_waiter_saw_is_given_back_when_another_process_gets_in_first(
    tmp_path: Path,
) -> None:
    # An application's transaction held the file past a worker's lease; another
    # worker's cycle waited, gave up, and backed off. A web process's enqueue got
    # the file first: it knew of no hold, and noted its own brief transaction, so
    # the waiter's next cycle thought nobody had held the file since its wait
    # began, gave nothing back, and claimed the job its first worker still ran.
    path = tmp_path / "jobs.db"
    a = SQLiteBackend(path)
    await a.push([Envelope("held", "default", "{}")], time.time())
    waiter = subprocess.Popen(
        [sys.executable, "-c", _WAITER, str(path), "2.0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert waiter.stdin is not None and waiter.stdout is not None
    try:
        assert waiter.stdout.readline() == "open\n"
        (held,) = await a.cycle([], ["default"], 1, "A", 1.5, time.time())
        app = sqlite3.connect(path, isolation_level=None)
        app.execute("BEGIN IMMEDIATE")  # held past the 1.5 s lease
        waiter.stdin.write("cycle\n")
        waiter.stdin.flush()
        assert waiter.stdout.readline() == "gave up\n"  # after 2 s
        app.execute("ROLLBACK")
        enqueue = [sys.executable, "-c", _ENQUEUER, str(path)]
        subprocess.run(enqueue, check=True, timeout=20)  # it gets the file first
        waiter.stdin.write("cycle\n")
        waiter.stdin.flush()
        assert waiter.stdout.readline() == "new\n"  # was "held new"
        assert waiter.wait(timeout=10) == 0
        info = WorkerInfo("A", "host", 1, ("default",), 1, ("held",), time.time())
        assert await a.heartbeat(info, [(held.id, held.token)], 1.5, time.time()) == []
        app.close()
    finally:
        if waiter.poll() is None:
            waiter.kill()
        await a.close()


async def test_a_wait_for_an_application_s_brief_transactions_gives_no_time_back(
    tmp_path: Path,
) -> None:
    # A step starved by the application's brief transactions, back to back,
    # waits long, but the file changed hands between its tries (they commit): no
    # hold was long, so no lease may get the wait's time. It got all of it (its
    # first failed try to the moment it got in), as if one transaction had held
    # the file throughout.
    import asyncio
    import threading

    path = tmp_path / "jobs.db"
    a, c = SQLiteBackend(path), SQLiteBackend(path, busy_timeout=5.0)
    await a.push([Envelope("held", "default", "{}")], time.time())
    await a.cycle([], ["default"], 1, "A", 60.0, time.time())
    before = leases(path)["held"]
    app = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    app.execute("CREATE TABLE imports (n INTEGER)")
    going = threading.Event()

    def brief_transactions() -> None:
        for n in range(15):
            app.execute("BEGIN IMMEDIATE")
            going.set()
            app.execute("INSERT INTO imports VALUES (?)", (n,))
            time.sleep(0.05)  # below HOLD_GRACE each
            app.execute("COMMIT")

    thread = threading.Thread(target=brief_transactions)
    thread.start()
    going.wait()
    await c.cycle([], ["other"], 10, "C", 30.0, time.time())
    await asyncio.to_thread(thread.join)
    assert leases(path)["held"] == before
    app.close()
    for store in (a, c):
        await store.close()


def test_a_wait_written_again_while_a_reader_commits_is_not_deleted_by_it(tmp_path) -> None:
    # A reader deletes the files it read once it commits. The waiter wrote its wait
    # again under the same name in between: the delete took the new wait with it,
    # and a process that got in next gave nothing back.
    from batchy.jobs._sqlite_held import HOLD_GRACE, Waits

    folder = str(tmp_path / "held")
    waiter, reader = Waits(folder), Waits(folder)
    waiter.pieces = [[100.0, 100.0 + 2 * HOLD_GRACE]]
    waiter._publish()
    read, _ = reader._published()
    waiter.pieces = [[100.0, 100.0 + 2 * HOLD_GRACE], [200.0, 200.0 + 3 * HOLD_GRACE]]
    waiter._publish()  # a longer wait, while the reader has not committed yet
    reader.committed(read)
    _, left = reader._published()
    assert [200.0, 200.0 + 3 * HOLD_GRACE] in left


async def test_a_worker_takes_a_job_about_a_poll_interval_after_a_hold_that_failed_its_turns(
    tmp_path: Path,
) -> None:
    # An application holding the file past busy_timeout is an outage to the worker
    # (its turns fail), as a server that is down is on Redis or PostgreSQL. Its
    # back-off between tries grew to ten poll intervals, slept out with the file
    # free again: a job enqueued then waited up to ten polls (here 10 s) to start.
    import asyncio

    from batchy.jobs import Queue, Worker

    path = tmp_path / "jobs.db"
    queue = Queue(SQLiteBackend(path, busy_timeout=0.2))
    started: list[float] = []
    failed: list[float] = []

    @queue.job(name="ping")
    async def ping() -> None:
        started.append(time.monotonic())

    cycle = queue.backend.cycle

    async def noted(*args: Any) -> Any:
        try:
            return await cycle(*args)
        except Exception:
            failed.append(time.monotonic())
            raise

    queue.backend.cycle = noted  # type: ignore[method-assign]
    worker = Worker(queue, poll_interval=1.0, lease=5.0, shutdown_timeout=1.0)
    task = asyncio.create_task(worker.run())
    app = sqlite3.connect(path, isolation_level=None)
    try:
        app.execute("BEGIN IMMEDIATE")
        deadline = time.monotonic() + 30.0
        while len(failed) < 4:  # the old back-off after the fourth: 6 to 8 s
            assert time.monotonic() < deadline, failed
            await asyncio.sleep(0.005)
        app.execute("ROLLBACK")
        await ping.enqueue()
        enqueued = time.monotonic()
        while not started and time.monotonic() < enqueued + 20.0:
            await asyncio.sleep(0.01)
        # A try at most a poll interval after the last failed one, and it goes through.
        assert started and started[0] - enqueued < 3.0, (started, enqueued)
    finally:
        app.close()
        worker.stop()
        await asyncio.wait_for(task, 15)
        await queue.close()
