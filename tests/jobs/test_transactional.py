"""Enqueueing inside the application's own transaction: SQLite here (PostgreSQL: test_postgres_tx)."""

from __future__ import annotations

import sqlite3
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
        "jobs of the file it writes to"
    )
    assert f"is open on {tmp_path / 'other.db'}" in str(error.value)


async def test_a_store_without_a_shared_database_says_so() -> None:
    queue = Queue(MemoryBackend())

    @queue.job(name="noop")
    async def noop() -> None:
        return None

    with pytest.raises(ConfigError) as error:
        await noop.options(connection=object()).enqueue()
    assert "cannot enqueue inside your transaction" in str(error.value)
    assert str(error.value).endswith(
        "it does not share a database with it. Enqueue after your commit, or use a "
        "PostgreSQL or SQLite job store on the database your app writes to."
    )
