"""Enqueueing inside the application's own transaction: SQLite here (PostgreSQL: test_postgres_tx)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from batchy.jobs import ConfigError, MemoryBackend, Queue, SQLiteBackend, Worker


def make(path: Path) -> tuple[Queue, list[str], sqlite3.Connection]:
    queue = Queue(SQLiteBackend(path))
    app = sqlite3.connect(path)  # the application's connection, implicit transactions
    app.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, item TEXT)")
    app.commit()
    seen: list[str] = []

    @queue.job(name="ship")
    async def ship(order: int) -> None:
        # The worker reads through its own connection: the order must be there.
        reader = sqlite3.connect(path)
        row = reader.execute("SELECT item FROM orders WHERE id = ?", (order,)).fetchone()
        reader.close()
        seen.append(row[0] if row else f"order {order} missing")

    return queue, seen, app


async def run_all(queue: Queue) -> None:
    await Worker(queue, burst=True, poll_interval=0.01).run()


async def test_a_rolled_back_transaction_leaves_no_job(tmp_path: Path) -> None:
    queue, seen, app = make(tmp_path / "app.db")
    app.execute("INSERT INTO orders VALUES (1, 'book')")
    handle = await queue.jobs["ship"].options(connection=app).enqueue(1)
    app.rollback()
    assert (await handle.status()).state == "unknown"
    await run_all(queue)
    assert seen == []


async def test_a_committed_transaction_runs_its_job_which_sees_its_rows(tmp_path: Path) -> None:
    queue, seen, app = make(tmp_path / "app.db")
    for order in range(1, 21):
        app.execute("INSERT INTO orders VALUES (?, ?)", (order, f"item {order}"))
        await queue.jobs["ship"].options(connection=app).enqueue(order)
        app.commit()
    await run_all(queue)
    assert sorted(seen) == sorted(f"item {i}" for i in range(1, 21))


async def test_an_error_between_insert_and_commit_leaves_neither(tmp_path: Path) -> None:
    queue, seen, app = make(tmp_path / "app.db")
    with pytest.raises(RuntimeError), app:  # the connection's context rolls back on error
        app.execute("INSERT INTO orders VALUES (7, 'lamp')")
        queue.jobs["ship"].options(connection=app).enqueue_sync(7)
        raise RuntimeError("payment declined")
    assert app.execute("SELECT count(*) FROM orders").fetchone()[0] == 0
    await run_all(queue)
    assert seen == []


async def test_a_connection_to_another_file_is_refused(tmp_path: Path) -> None:
    queue, _, _ = make(tmp_path / "app.db")
    other = sqlite3.connect(tmp_path / "other.db")
    with pytest.raises(ConfigError) as error:
        await queue.jobs["ship"].options(connection=other).enqueue(1)
    assert str(error.value).endswith(
        f"not on this store's file {tmp_path / 'app.db'}; a transaction can only include "
        f"jobs of the file it writes to: enqueue through a connection to {tmp_path / 'app.db'}"
        ", or leave out connection=; nothing was enqueued"
    )
    assert f"is open on {tmp_path / 'other.db'}" in str(error.value)


async def test_a_closed_connection_or_one_of_another_thread_is_refused(tmp_path: Path) -> None:
    # sqlite3's own ProgrammingError ("Cannot operate on a closed database.") came out
    # of the store, where the PostgreSQL store says which connection and what to do.
    queue, _, _ = make(tmp_path / "app.db")
    closed = sqlite3.connect(tmp_path / "app.db")
    closed.close()
    with pytest.raises(ConfigError) as error:
        queue.jobs["ship"].options(connection=closed).enqueue_sync(1)
    assert str(error.value).endswith(
        f"{queue.backend!r}: connection={closed!r} cannot be used here (Cannot operate on a "
        "closed database.); enqueue through the open connection your transaction runs on, in "
        "the thread that opened it; nothing was enqueued"
    )
    assert str(error.value).startswith("cannot enqueue job 'ship'")
    elsewhere = sqlite3.connect(tmp_path / "app.db")  # check_same_thread: this thread only
    with pytest.raises(ConfigError) as error:
        await asyncio.to_thread(queue.jobs["ship"].options(connection=elsewhere).enqueue_sync, 2)
    assert "SQLite objects created in a thread can only be used in that same thread" in str(
        error.value
    )
    assert str(error.value).endswith("in the thread that opened it; nothing was enqueued")
    assert (await queue.backend.info(time.time())).queues == ()


async def test_a_refused_enqueue_of_many_jobs_names_their_types(tmp_path: Path) -> None:
    queue, _, _ = make(tmp_path / "app.db")

    @queue.job(name="bill")
    async def bill(order: int) -> None:
        return None

    other = sqlite3.connect(tmp_path / "other.db")
    ship = queue.jobs["ship"]
    calls = [ship.call(1), bill.call(1), ship.call(2)]
    with pytest.raises(ConfigError) as error:
        await queue.enqueue_many(calls, connection=other)
    assert str(error.value).startswith(
        f"cannot enqueue 3 jobs ('bill', 'ship'): {queue.backend!r}: "
        f"connection={other!r} is open on {tmp_path / 'other.db'}"
    )
    with pytest.raises(ConfigError) as error:
        queue.enqueue_many_sync(calls, connection=other)
    assert str(error.value).startswith("cannot enqueue 3 jobs ('bill', 'ship'): ")
    assert (await queue.backend.info(time.time())).queues == ()


async def test_enqueue_many_joins_the_transaction_its_calls_carry(tmp_path: Path) -> None:
    queue, seen, app = make(tmp_path / "app.db")
    ship = queue.jobs["ship"]
    # The calls carry the connection (options(connection=...).call): the batch
    # joins it. It used to be enqueued on its own, and outlived the rollback.
    (dropped,) = await queue.enqueue_many([ship.options(connection=app).call(1)])
    app.rollback()
    (kept,) = queue.enqueue_many_sync([ship.options(connection=app).call(2)])
    app.execute("INSERT INTO orders VALUES (2, 'cup')")
    app.commit()
    assert [(await h.status()).state for h in (dropped, kept)] == ["unknown", "queued"]
    await run_all(queue)
    assert seen == ["cup"]


async def test_enqueue_many_refuses_calls_that_would_join_different_transactions(
    tmp_path: Path,
) -> None:
    queue, _, app = make(tmp_path / "app.db")
    ship = queue.jobs["ship"]
    other = sqlite3.connect(tmp_path / "app.db")
    mixes = [
        ([ship.options(connection=app).call(1), ship.options(connection=other).call(2)], None),
        ([ship.options(connection=app).call(1), ship.call(2)], None),
        ([ship.options(connection=other).call(1)], app),
    ]
    for calls, connection in mixes:
        with pytest.raises(ConfigError) as error:
            await queue.enqueue_many(calls, connection=connection)
        what = "job 'ship'" if len(calls) == 1 else "2 jobs ('ship')"
        assert str(error.value) == (
            f"cannot enqueue {what} together: their calls carry different connections "
            "(options(connection=...)), or some carry one and some none, and a batch "
            "joins one transaction or none; pass connection= to enqueue_many for all of "
            "them, or enqueue each group on its own; nothing was enqueued"
        )
        with pytest.raises(ConfigError):
            queue.enqueue_many_sync(calls, connection=connection)
    assert not app.in_transaction and not other.in_transaction
    assert (await queue.backend.info(time.time())).queues == ()
    # The same connection on the calls and the batch is one transaction: fine.
    await queue.enqueue_many([ship.options(connection=app).call(3)], connection=app)
    app.rollback()


async def test_a_store_without_a_shared_database_says_so() -> None:
    queue = Queue(MemoryBackend())

    @queue.job(name="noop")
    async def noop() -> None:
        return None

    with pytest.raises(ConfigError) as error:
        await noop.options(connection=object()).enqueue()
    assert str(error.value).startswith("cannot enqueue job 'noop' (id ")
    assert "cannot enqueue inside your transaction" in str(error.value)
    assert str(error.value).endswith(
        "it does not share a database with it. Enqueue after your commit, or use a "
        "PostgreSQL or SQLite job store on the database your app writes to."
    )


async def test_an_autocommit_connection_outside_a_transaction_is_refused(tmp_path: Path) -> None:
    queue, seen, _ = make(tmp_path / "app.db")
    app = sqlite3.connect(tmp_path / "app.db", isolation_level=None)
    with pytest.raises(ConfigError) as error:
        await queue.jobs["ship"].options(connection=app).enqueue(1)
    # The message names the job refused, then says what is wrong and what to do.
    head, _, rest = str(error.value).partition("): ")
    assert head.startswith("cannot enqueue job 'ship' (id ") and len(head) > 30, head
    assert rest == (
        f"{queue.backend!r}: connection={app!r} is in autocommit mode with no transaction "
        "open, so the job would be committed at once, whatever your code does next; open the "
        "transaction first (`connection.execute('BEGIN IMMEDIATE')`, or a connection made without "
        "isolation_level=None), or leave out connection= to enqueue on its own; nothing was "
        "enqueued"
    )
    # Inside an explicit transaction the same connection is fine: rolled back, no job.
    app.execute("BEGIN")
    app.execute("INSERT INTO orders VALUES (3, 'pen')")
    handle = await queue.jobs["ship"].options(connection=app).enqueue(3)
    app.execute("ROLLBACK")
    assert (await handle.status()).state == "unknown"
    await run_all(queue)
    assert seen == []


async def test_a_step_waits_for_the_apps_open_transaction_without_blocking_the_loop(
    tmp_path: Path,
) -> None:
    path = tmp_path / "app.db"
    _, _, app = make(path)
    queue = Queue(SQLiteBackend(path, busy_timeout=2.0))
    queue.job(name="ship")(_noop)
    app.execute("INSERT INTO orders VALUES (1, 'book')")  # the app's transaction holds the file

    async def commit_soon() -> None:
        await asyncio.sleep(0.05)  # the app awaits something before it commits
        app.commit()

    began = time.monotonic()
    committer = asyncio.create_task(commit_soon())
    # The store's own step waits for that commit: it blocked the loop in SQLite's
    # busy handler, so the commit never came and it failed after busy_timeout.
    handle = await queue.jobs["ship"].enqueue(1)
    await committer
    assert time.monotonic() - began < 1.0
    assert (await handle.status()).state == "queued"


async def test_a_file_held_past_busy_timeout_is_an_error_that_says_so(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    _, _, app = make(path)
    queue = Queue(SQLiteBackend(path, busy_timeout=0.2))
    queue.job(name="ship")(_noop)
    app.execute("INSERT INTO orders VALUES (1, 'book')")
    with pytest.raises(sqlite3.OperationalError) as error:
        await queue.jobs["ship"].enqueue(1)
    assert str(error.value) == (
        "database is locked: another connection held the jobs file for busy_timeout=0.2s "
        "(a long transaction of your own connection, or of another process)"
    )
    app.rollback()


async def _noop(order: int) -> None:
    return None


@pytest.mark.parametrize(
    ("table", "columns"),
    [("workers", "id TEXT PRIMARY KEY, name TEXT, email TEXT, hired REAL"), ("jobs", "id, title")],
)
def test_an_app_table_named_as_one_of_the_stores_is_never_taken_for_it(
    tmp_path: Path, table: str, columns: str
) -> None:
    # The store lives in the app's file for a transactional enqueue. An app table
    # `workers` was taken for the store's: every heartbeat failed (4 columns, 3
    # values), so leases ran out and a running job started again every lease; one
    # of 3 columns would have had its rows overwritten and pruned.
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as app:
        app.execute(f"CREATE TABLE {table} ({columns})")
        app.execute(f"INSERT INTO {table} (id) VALUES ('1')")
    with pytest.raises(ConfigError) as info:
        SQLiteBackend(path)
    cols = ", ".join(c.split()[0] for c in columns.split(", "))
    assert str(info.value) == (
        f"SQLite job store {path}: the file holds tables of the same name as the store's but "
        f"not its columns: {table!r} ({cols}). The store keeps its tables (jobs, results, "
        "dead, uniques, workers, queues, held, cancels, counts, runs) in the file it opens, "
        "and would take these for its own. Rename those tables, or give the store a file of "
        "its own (jobs are then not enqueued in your transactions); nothing was changed"
    )
    with sqlite3.connect(path) as app:  # nothing of the store's was made
        names = {r[0] for r in app.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert names == {table}


async def test_the_apps_row_and_text_factories_do_not_change_the_check(tmp_path: Path) -> None:
    # A dict row factory (the sqlite3 docs' own) failed with a bare KeyError, and
    # text_factory=bytes was refused as "a memory database".
    queue, _, _ = make(tmp_path / "jobs.db")

    def dict_factory(cursor: sqlite3.Cursor, row: tuple[object, ...]) -> dict[str, object]:
        return {col[0]: value for col, value in zip(cursor.description, row, strict=True)}

    for setting, value in (("row_factory", dict_factory), ("text_factory", bytes)):
        app = sqlite3.connect(tmp_path / "jobs.db")
        setattr(app, setting, value)
        handle = await queue.jobs["ship"].options(connection=app).enqueue(1)
        app.commit()
        app.close()
        assert (await handle.status()).state == "queued", setting


async def test_a_store_opened_on_a_relative_path_keeps_its_file_after_a_chdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The check of an app's connection resolved the store's path at each enqueue:
    # after a chdir it refused the store's own file and took another file's.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    queue, _, _ = make(Path("jobs.db"))
    monkeypatch.chdir(tmp_path / "b")
    ship = queue.jobs["ship"]
    other = sqlite3.connect("jobs.db")  # b/jobs.db: another file of the same name
    with pytest.raises(ConfigError, match=f"not on this store's file {tmp_path}/a/jobs.db"):
        await ship.options(connection=other).enqueue(2)
    other.close()
    app = sqlite3.connect(tmp_path / "a" / "jobs.db")
    handle = await ship.options(connection=app).enqueue(1)
    app.commit()
    app.close()
    assert (await handle.status()).state == "queued"


async def test_a_temp_table_of_a_stores_name_on_the_apps_connection_does_not_take_the_job(
    tmp_path: Path,
) -> None:
    # SQLite looks names up in temp before main: the job went into the app's TEMP
    # table "jobs", the commit succeeded, and the job was gone without an error.
    queue, seen, app = make(tmp_path / "app.db")
    for table in ("jobs", "uniques", "queues"):
        app.execute(f"CREATE TEMP TABLE {table} (id TEXT, key TEXT, name TEXT)")
    app.execute("INSERT INTO orders VALUES (1, 'book')")
    handle = await queue.jobs["ship"].options(connection=app).enqueue(1)
    app.commit()
    assert app.execute("SELECT count(*) FROM temp.jobs").fetchone() == (0,)
    assert (await handle.status()).state == "queued"
    await run_all(queue)
    assert seen == ["book"]


async def test_a_deferred_transaction_made_stale_by_another_writer_says_how_to_begin_it(
    tmp_path: Path,
) -> None:
    # The store's own advice was a deferred BEGIN: after a read, any other write
    # made the app's snapshot stale, and the enqueue failed with a bare
    # "database is locked" that named neither the job nor the cause.
    queue, _, _ = make(tmp_path / "app.db")
    app = sqlite3.connect(tmp_path / "app.db", isolation_level=None)
    app.execute("BEGIN")
    app.execute("SELECT count(*) FROM orders").fetchone()
    await queue.jobs["ship"].enqueue(1)  # another connection writes meanwhile
    with pytest.raises(sqlite3.OperationalError) as error:
        await queue.jobs["ship"].options(connection=app, id="ship-2").enqueue(2)
    assert error.value.sqlite_errorcode == 517  # SQLITE_BUSY_SNAPSHOT: the type is sqlite3's
    assert error.value.__notes__ == [
        "nothing was enqueued (job id ship-2): the application's transaction began deferred "
        "(BEGIN) and read the file before another connection wrote to it, so SQLite lets it "
        "read on but never write; begin transactions that enqueue jobs with BEGIN IMMEDIATE, "
        "then roll this one back and run it again"
    ]
    app.execute("ROLLBACK")
