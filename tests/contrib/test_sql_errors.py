"""Each way an SQL loader fails has its own error class and words (issue 13, section 4)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from contrib_helpers import Statements, closed_port, running, traced
from hypothesis import given
from hypothesis import strategies as st

import batchy
from batchy_contrib.sql import mysql, postgres, sqlite
from batchy_contrib.sql.mysql import (
    ConnectionLostError,
    DataSourceError,
    QueryInterruptedError,
    QueryRejectedError,
)
from batchy_contrib.sql.sqlite import DatabaseOpenError


async def load(loader: batchy.Loader[Any, Any], *keys: Any) -> list[Any]:
    async with batchy.scope():
        return await batchy.gather(*(loader(k) for k in keys))


async def make_items(db: Any) -> None:
    p = db.dialect.param
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        await db.execute("DROP TABLE IF EXISTS items")
    await db.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, label VARCHAR(20))")
    await db.executemany(f"INSERT INTO items VALUES ({p}, {p})", [(1, "one"), (2, "two")])


async def connection_id(db: mysql.Database) -> int:
    (row,) = await db.fetch("SELECT CONNECTION_ID() AS id")
    return int(row["id"])


# -- the server rejected the SQL -----------------------------------------------------


async def test_a_missing_table_is_a_rejected_query(db: Any) -> None:
    with pytest.raises(QueryRejectedError) as info:
        await load(db.one("no_such_table"), 1)
    assert str(info.value).startswith(
        f"loader 'no_such_table_by_id' had its query rejected by {db.kind} at {db.host} ("
    )
    assert "Check the table and column names. SQL: " in str(info.value)


# -- the query was killed or timed out -----------------------------------------------


async def test_kill_query_is_an_interruption_and_keeps_the_connection(mysql_url: str) -> None:
    db = await mysql.connect(mysql_url, minsize=1, maxsize=1)
    await make_items(db)
    conn_id = await connection_id(db)
    slow = db.query("SELECT id, SLEEP(5) AS z FROM items WHERE id IN {keys}", key="id", name="slow")
    task = asyncio.ensure_future(load(slow, 1))
    await running(mysql_url, conn_id, "SLEEP(5)")
    started = time.monotonic()
    admin = await mysql.connect(mysql_url, minsize=1, maxsize=1)
    await admin.execute(f"KILL QUERY {conn_id}")
    await admin.close()
    with pytest.raises(QueryInterruptedError) as info:
        await task
    assert time.monotonic() - started < 3
    assert str(info.value) == (
        f"loader 'slow' had its query interrupted by MySQL at {db.host} (OperationalError: "
        "(1317, 'Query execution was interrupted')) while loading keys [1]: it was killed on "
        "the server (KILL QUERY) or stopped by a time limit (max_statement_time). The "
        "connection is still good; retry the keys, or find out what killed the query."
    )
    assert info.value.keys == [1] and info.value.host == db.host
    assert await connection_id(db) == conn_id  # KILL QUERY leaves the connection usable
    await db.close()


async def test_max_statement_time_is_an_interruption(mysql_db: mysql.Database) -> None:
    await make_items(mysql_db)
    slow = mysql_db.query(
        "SET STATEMENT max_statement_time=0.2 FOR"
        " SELECT id, SLEEP(2) AS z FROM items WHERE id IN {keys}",
        key="id",
        name="limited",
    )
    with pytest.raises(QueryInterruptedError, match=r"^loader 'limited' had its query interrupted"):
        await load(slow, 1)


async def test_a_timeout_is_an_interruption(blackhole_port: int) -> None:
    db = await mysql.connect(
        f"mysql://root@127.0.0.1:{blackhole_port}/test", minsize=0, timeout=0.3
    )
    with pytest.raises(QueryInterruptedError, match=r"got no connection to MySQL at "):
        await load(db.one("users"), 1)  # no greeting came: still connecting
    await db.close()


async def test_an_sqlite_statement_that_times_out_is_interrupted(tmp_path: Path) -> None:
    db = sqlite.Database(str(tmp_path / "slow.db"), threads=1, timeout=0.3)
    await make_items(db)
    slow = db.query(
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 50000000)"
        " SELECT id FROM items WHERE id IN {keys} AND (SELECT count(*) FROM c) > 0",
        key="id",
        name="slow",
    )
    with pytest.raises(QueryInterruptedError) as info:
        await load(slow, 1)
    assert str(info.value) == (
        f"loader 'slow' got no answer from SQLite at {db.host} within 0.3 s while loading keys "
        "[1]; the statement was interrupted. Raise timeout= if the query is slow, or index "
        "the key column."
    )
    # The one worker thread is free again at once, not after the ~10 s query.
    started = time.monotonic()
    assert await load(db.one("items"), 2) == [{"id": 2, "label": "two"}]
    assert time.monotonic() - started < 1
    await db.close()


async def test_an_sqlite_statement_waiting_for_a_worker_says_it_was_never_sent(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "busy.db")
    db = sqlite.Database(path, threads=1, timeout=0.3, trace=Statements())
    await make_items(db)
    await db.execute("PRAGMA busy_timeout = 5000")  # the one worker's connection
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")
    # The one worker thread waits for the writer's lock: the loader's statement queues.
    insert = asyncio.ensure_future(db.execute("INSERT INTO items VALUES (3, 'three')"))
    await traced(db.trace, "INSERT INTO items VALUES (3")  # the thread is in it
    seen = db.trace.count
    with pytest.raises(QueryInterruptedError) as info:
        await load(db.one("items"), 1)
    # It said the statement was interrupted, when it never ran.
    assert str(info.value) == (
        f"loader 'items_by_id' got no connection to SQLite at {path} within 0.3 s while loading "
        "keys [1]: its worker threads (one connection each) were all busy with other "
        "statements, so this one was never sent. Raise threads= if they are all busy often, "
        "or raise timeout=."
    )
    writer.execute("COMMIT")
    writer.close()
    assert await insert == 1
    assert await load(db.one("items"), 2) == [{"id": 2, "label": "two"}]
    assert len(db.trace.seen) == seen + 1  # the second load's: the first never ran
    await db.close()


async def test_an_sqlite_file_locked_by_a_writer_is_an_interruption(tmp_path: Path) -> None:
    path = str(tmp_path / "locked.db")
    db = sqlite.Database(path, threads=1)
    await make_items(db)
    await db.execute("PRAGMA busy_timeout = 50")  # the one worker's connection
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(QueryInterruptedError) as info:
            await load(db.one("items"), 1)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert str(info.value) == (
        f"loader 'items_by_id' timed out waiting for a lock on SQLite at {path} "
        "(OperationalError: database is locked) while loading keys [1]: another connection "
        "held a write lock for longer than the busy timeout. Keep write transactions short; "
        "a retry can succeed."
    )
    assert await load(db.one("items"), 1) == [{"id": 1, "label": "one"}]
    await db.close()


# -- the connection was lost, or closed ----------------------------------------------


async def test_a_closed_port_is_a_lost_connection() -> None:
    db = await mysql.connect(f"mysql://root@127.0.0.1:{closed_port()}/test", minsize=0)
    with pytest.raises(ConnectionLostError, match=r"cannot reach MySQL at .* \(OperationalError"):
        await load(db.one("users"), 1)
    await db.close()


async def test_a_closed_sqlite_database_says_it_was_closed(tmp_path: Path) -> None:
    path = str(tmp_path / "closed.db")
    db = sqlite.Database(path)
    await make_items(db)
    items = db.one("items")
    await db.close()
    with pytest.raises(ConnectionLostError) as info:
        await load(items, 1)
    assert str(info.value) == (
        f"loader 'items_by_id' cannot use SQLite at {path} (RuntimeError: cannot schedule new "
        "futures after shutdown): the database was closed before this call, while loading "
        "keys [1]. Close it only after its last loader call, or open a new one."
    )


async def test_an_sqlite_connection_closed_under_us_says_so(tmp_path: Path) -> None:
    path = str(tmp_path / "closed.db")
    db = sqlite.Database(path, threads=1)
    await make_items(db)
    for conn in db._conns:  # closed behind the Database's back (another library, a bug)
        conn.close()
    with pytest.raises(ConnectionLostError, match=r"Cannot operate on a closed database"):
        await load(db.one("items"), 1)
    await db.close()


async def test_a_closed_mysql_pool_says_it_was_closed(mysql_url: str) -> None:
    db = await mysql.connect(mysql_url, maxsize=1)
    items = db.one("items")
    await db.close()
    with pytest.raises(ConnectionLostError) as info:
        await load(items, 1)
    assert str(info.value) == (
        f"loader 'items_by_id' cannot use MySQL at {db.host} (RuntimeError: Cannot acquire "
        "connection after closing pool): the database was closed before this call, while "
        "loading keys [1]. Close it only after its last loader call, or open a new one."
    )


# -- the file cannot be opened -------------------------------------------------------


async def test_an_sqlite_file_that_cannot_be_opened_says_why(tmp_path: Path) -> None:
    path = str(tmp_path / "no" / "such" / "dir.db")
    db = sqlite.Database(path)
    with pytest.raises(DatabaseOpenError) as info:
        await load(db.one("users"), 1)
    assert str(info.value) == (
        f"loader 'users_by_id' cannot reach SQLite at {path} (OperationalError: unable to "
        "open database file) while loading keys [1]. The file cannot be opened: check that "
        "its directory exists and that this process may read and write there (SQLite "
        "creates the file, not its directories)."
    )
    assert "server" not in str(info.value)
    await db.close()


async def test_a_file_that_is_not_a_database_says_so(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database\n" * 200)
    db = sqlite.Database(str(path))
    with pytest.raises(DatabaseOpenError) as info:
        await load(db.one("users"), 1)
    assert str(info.value) == (
        f"loader 'users_by_id' cannot reach SQLite at {path} (DatabaseError: file is not a "
        "database) while loading keys [1]. The file is not an SQLite database (or it is "
        "encrypted or damaged): check the path."
    )
    await db.close()


def test_every_error_is_a_data_source_error() -> None:
    from batchy_contrib import errors as _source

    for name in _source.__all__:
        cls = getattr(_source, name)
        assert issubclass(cls, DataSourceError) and issubclass(cls, batchy.LoaderError)
        assert getattr(mysql, name, cls) is cls and getattr(sqlite, name) is cls
        assert getattr(postgres, name, cls) is cls


async def test_an_sqlite_statement_interrupted_by_someone_else(tmp_path: Path) -> None:
    trace = Statements()
    db = sqlite.Database(str(tmp_path / "slow.db"), threads=1, trace=trace)
    await make_items(db)
    slow = db.query(
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 50000000)"
        " SELECT id FROM items WHERE id IN {keys} AND (SELECT count(*) FROM c) > 0",
        key="id",
        name="slow",
    )
    task = asyncio.ensure_future(load(slow, 1))
    await traced(trace, "WITH RECURSIVE")
    for conn in db._conns:  # another part of the program stops it
        conn.interrupt()
    with pytest.raises(QueryInterruptedError) as info:
        await task
    assert str(info.value) == (
        f"loader 'slow' had its query interrupted by SQLite at {db.host} (OperationalError: "
        "interrupted) while loading keys [1]: it was interrupted "
        "(sqlite3.Connection.interrupt()). Nothing is wrong with the query; retry the keys."
    )
    await db.close()


async def test_a_literal_percent_in_a_mysql_query_says_to_double_it(
    mysql_db: mysql.Database,
) -> None:
    await make_items(mysql_db)
    labels = mysql_db.query(
        "SELECT id FROM items WHERE label LIKE 'o%' AND id IN {keys}", key="id", name="o_items"
    )
    with pytest.raises(batchy.LoaderError) as info:
        await load(labels, 1)
    assert str(info.value) == (
        "loader 'o_items' raised UsageError: the statement \"SELECT id FROM items WHERE "
        "label LIKE 'o%' AND id IN (%s)\" cannot take 1 parameters (ValueError: unsupported "
        "format character ''' (0x27) at index 41): placeholders are %s, and a literal % is "
        "written %% while loading keys [1]"
    )
    doubled = mysql_db.query(
        "SELECT id FROM items WHERE label LIKE 'o%%' AND id IN {keys}", key="id"
    )
    assert await load(doubled, 1, 2) == [{"id": 1}, None]


# -- PostgreSQL ------------------------------------------------------------------------


async def backend_pid(db: postgres.Database) -> int:
    (row,) = await db.fetch("SELECT pg_backend_pid() AS pid")
    return int(row["pid"])


async def admin(url: str, sql: str) -> None:
    other = await postgres.connect(url, max_size=1)
    try:
        await other.fetch(sql)
    finally:
        await other.close()


async def test_pg_cancel_backend_is_an_interruption_and_keeps_the_connection(
    postgres_url: str,
) -> None:
    db = await postgres.connect(postgres_url, max_size=1)
    await make_items(db)
    pid = await backend_pid(db)
    slow = db.query(
        "SELECT id, pg_sleep(5) AS z FROM items WHERE id IN {keys}", key="id", name="slow"
    )
    task = asyncio.ensure_future(load(slow, 1))
    await running(postgres_url, pid, "pg_sleep(5)")
    started = time.monotonic()
    await admin(postgres_url, f"SELECT pg_cancel_backend({pid})")
    with pytest.raises(QueryInterruptedError) as info:
        await task
    assert time.monotonic() - started < 3
    assert str(info.value) == (
        f"loader 'slow' had its query interrupted by PostgreSQL at {db.host} (QueryCanceled: "
        "canceling statement due to user request) while loading keys [1]: it was cancelled "
        "on the server (pg_cancel_backend) or stopped by a time limit (statement_timeout, "
        "lock_timeout). The connection is still good; retry the keys, or find out what "
        "stopped the query."
    )
    assert await backend_pid(db) == pid  # the connection went back to the pool
    await db.close()


async def test_statement_timeout_is_an_interruption(postgres_url: str) -> None:
    db = await postgres.connect(postgres_url + "&options=-cstatement_timeout%3D200", max_size=1)
    await make_items(db)
    slow = db.query(
        "SELECT id, pg_sleep(2) AS z FROM items WHERE id IN {keys}", key="id", name="limited"
    )
    with pytest.raises(QueryInterruptedError, match=r"^loader 'limited' had its query interrupted"):
        await load(slow, 1)
    await db.close()


async def test_a_terminated_connection_is_lost_and_discarded(postgres_url: str) -> None:
    db = await postgres.connect(postgres_url, max_size=1)
    await make_items(db)
    pid = await backend_pid(db)
    slow = db.query(
        "SELECT id, pg_sleep(5) AS z FROM items WHERE id IN {keys}", key="id", name="slow"
    )
    task = asyncio.ensure_future(load(slow, 1))
    await running(postgres_url, pid, "pg_sleep(5)")
    await admin(postgres_url, f"SELECT pg_terminate_backend({pid})")
    with pytest.raises(ConnectionLostError) as info:
        await task
    assert str(info.value).startswith(
        f"loader 'slow' cannot reach PostgreSQL at {db.host} (AdminShutdown: terminating "
        "connection due to administrator command) while loading keys [1]. Check that the "
        "server is running and reachable; the next call reconnects."
    )
    # The broken connection was closed, not pooled: the next call gets a new one.
    assert await load(db.one("items"), 2) == [{"id": 2, "label": "two"}]
    assert await backend_pid(db) != pid
    await db.close()


async def test_a_hung_postgres_server_is_a_timeout(blackhole_port: int) -> None:
    db = postgres.Database.from_url(
        f"postgresql://postgres@127.0.0.1:{blackhole_port}/test", timeout=0.3
    )
    with pytest.raises(QueryInterruptedError) as info:
        await load(db.one("users"), 1)
    # Still connecting: no statement was sent, so none was cancelled.
    assert str(info.value) == (
        f"loader 'users_by_id' got no connection to PostgreSQL at 127.0.0.1:{blackhole_port} "
        "within 0.3 s while loading keys [1]: the pool had none free and none could be made "
        "in time (every one busy, or the server slow to accept or not answering). Check that "
        "the server accepts connections, raise the pool's max_size if its connections are all "
        "busy, or raise timeout=."
    )
    await db.close()


async def test_a_closed_postgres_port_is_a_lost_connection() -> None:
    port = closed_port()
    db = postgres.Database.from_url(f"postgresql://postgres@127.0.0.1:{port}/test")
    with pytest.raises(ConnectionLostError) as info:
        await load(db.one("users"), 1)
    assert str(info.value).startswith(
        f"loader 'users_by_id' cannot reach PostgreSQL at 127.0.0.1:{port} (OperationalError: "
        "connection failed: "
    )
    assert str(info.value).endswith(
        "while loading keys [1]. Check that the server is running and reachable; the next "
        "call reconnects."
    )


async def test_a_closed_postgres_pool_says_it_was_closed(postgres_url: str) -> None:
    db = await postgres.connect(postgres_url, max_size=1)
    items = db.one("items")
    await db.close()
    with pytest.raises(ConnectionLostError) as info:
        await load(items, 1)
    assert str(info.value).startswith(f"loader 'items_by_id' cannot use PostgreSQL at {db.host} (")
    assert str(info.value).endswith(
        "): the database was closed before this call, while loading keys [1]. Close it only "
        "after its last loader call, or open a new one."
    )


async def test_a_literal_percent_in_a_postgres_query_says_to_double_it(
    postgres_db: postgres.Database,
) -> None:
    await make_items(postgres_db)
    labels = postgres_db.query(
        "SELECT id FROM items WHERE label LIKE 'o%' AND id IN {keys}", key="id", name="o_items"
    )
    with pytest.raises(batchy.LoaderError) as info:
        await load(labels, 1)
    assert str(info.value) == (
        "loader 'o_items' raised UsageError: the statement \"SELECT id FROM items WHERE "
        "label LIKE 'o%' AND id = ANY(%s)\" cannot take its keys (ProgrammingError: only "
        "'%s', '%b', '%t' are allowed as placeholders, got '%''): the placeholder is %s, and "
        "a literal % is written %% while loading keys [1]"
    )
    doubled = postgres_db.query(
        "SELECT id FROM items WHERE label LIKE 'o%%' AND id IN {keys}", key="id"
    )
    assert await load(doubled, 1, 2) == [{"id": 1}, None]


async def test_a_postgres_timeout_cancels_the_statement_and_keeps_the_connection(
    postgres_url: str,
) -> None:
    db = await postgres.connect(postgres_url, max_size=1, timeout=0.5)
    await make_items(db)
    pid = await backend_pid(db)
    slow = db.query(
        "SELECT id, pg_sleep(3) AS z FROM items WHERE id IN {keys}", key="id", name="slow"
    )
    started = time.monotonic()
    with pytest.raises(QueryInterruptedError) as info:
        await load(slow, 1)
    assert time.monotonic() - started < 2
    assert str(info.value) == (
        f"loader 'slow' got no answer from PostgreSQL at {db.host} within 0.5 s while loading "
        "keys [1]; the statement was cancelled. Check the server, or raise timeout= if the "
        "query is slow."
    )
    assert await backend_pid(db) == pid  # psycopg cancelled it on the server: still good
    await db.close()


@given(
    password=st.text(
        st.characters(codec="ascii", exclude_characters="@/\x00", min_codepoint=33), min_size=6
    ),
    module=st.sampled_from([postgres, mysql]),
)
def test_a_refused_url_never_shows_its_password(password: str, module: Any) -> None:
    # A URL of the wrong scheme was echoed back whole in the UsageError.
    url = f"http+driver://app:{password}@db.internal:5432/app"
    with pytest.raises(batchy.UsageError) as refused:
        module.Database.from_url(url)
    assert password not in str(refused.value)
    assert "app:***@db.internal" in str(refused.value)
