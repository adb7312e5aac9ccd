"""MySQL-only behaviour on a real MariaDB: server counters, lost and hung servers, the pool."""

from __future__ import annotations

import asyncio
import time
import warnings
from typing import Any

import aiomysql
import pytest
from contrib_helpers import closed_port, running

import batchy
from batchy.testing import record
from batchy_contrib.sql import mysql
from batchy_contrib.sql.mysql import DataSourceError


async def make_items(db: mysql.Database, n: int = 50) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        await db.execute("DROP TABLE IF EXISTS items")
    await db.execute("CREATE TABLE items (id INT PRIMARY KEY, grp INT, label VARCHAR(20))")
    await db.executemany(
        "INSERT INTO items VALUES (%s, %s, %s)", [(i, i % 5, f"item{i}") for i in range(n)]
    )


async def test_server_counts_one_statement_per_loader_per_round(mysql_db: mysql.Database) -> None:
    await make_items(mysql_db)
    items = mysql_db.one("items")
    groups = mysql_db.many("items", "grp", order_by="id")

    @batchy.task
    def view(i: int) -> Any:
        item = yield items(i)
        siblings = yield groups(item["grp"])
        return [s["id"] for s in siblings]

    before = await mysql_db.questions()
    with record() as rec:
        async with batchy.scope():
            result = await batchy.gather(*(view(i) for i in range(10)))
    assert await mysql_db.questions() - before == 2
    assert rec.calls(items) == [list(range(10))]
    assert rec.calls(groups) == [[0, 1, 2, 3, 4]]
    assert result[3] == list(range(3, 50, 5))
    assert rec.rounds == 2


async def test_questions_ignores_its_own_statements(mysql_db: mysql.Database) -> None:
    first = await mysql_db.questions()
    assert await mysql_db.questions() == first
    await mysql_db.fetch("SELECT 1")
    assert await mysql_db.questions() == first + 1


async def test_closed_port_fails_the_keys_naming_loader_and_host() -> None:
    port = closed_port()
    db = await mysql.connect(f"mysql://root@127.0.0.1:{port}/test", minsize=0, timeout=5)
    users = db.one("users")
    started = time.monotonic()
    async with batchy.scope():
        results = await batchy.gather(users(1), users(2), return_exceptions=True)
    assert time.monotonic() - started < 5
    for error in results:
        assert isinstance(error, DataSourceError)
        assert str(error).startswith(
            f"loader 'users_by_id' cannot reach MySQL at 127.0.0.1:{port} "
            "(OperationalError: (2003, "
        )
        assert str(error).endswith(
            "while loading keys [1, 2]. Check that the server is running and reachable; "
            "the next call reconnects."
        )
        assert error.host == f"127.0.0.1:{port}" and error.loader == "users_by_id"
    await db.close()


async def test_connect_to_a_closed_port_names_the_host() -> None:
    port = closed_port()
    with pytest.raises(Exception) as info:
        await mysql.connect(f"mysql://root@127.0.0.1:{port}/test")
    assert (
        f"batchy_contrib.sql.mysql.connect() could not reach 127.0.0.1:{port}"
        in info.value.__notes__
    )


@pytest.mark.parametrize("url", ["postgres://x@y/z", "127.0.0.1:3306", "mysql:///test"])
async def test_connect_wants_a_mysql_url(url: str) -> None:
    with pytest.raises(
        batchy.UsageError,
        match=r"mysql\.connect\(\) takes a URL like 'mysql://user:password@host:3306/database', got",
    ):
        await mysql.connect(url)


async def test_a_hung_server_times_out_instead_of_hanging(blackhole_port: int) -> None:
    db = await mysql.connect(
        f"mysql://root@127.0.0.1:{blackhole_port}/test", minsize=0, timeout=0.3
    )
    users = db.one("users")
    started = time.monotonic()
    with pytest.raises(DataSourceError) as info:
        async with batchy.scope():
            await users(1)
    assert time.monotonic() - started < 2
    # Still connecting (no greeting came): no statement was sent, so none was slow.
    assert str(info.value) == (
        f"loader 'users_by_id' got no connection to MySQL at 127.0.0.1:{blackhole_port} within "
        "0.3 s while loading keys [1]: the pool had none free and none could be made "
        "in time (every one busy, or the server slow to accept or not answering). Check that "
        "the server accepts connections, raise the pool's maxsize if its connections are all "
        "busy, or raise timeout=."
    )
    await db.close()


async def connection_id(db: mysql.Database) -> int:
    (row,) = await db.fetch("SELECT CONNECTION_ID() AS id")
    return int(row["id"])


async def kill(mysql_url: str, conn_id: int) -> None:
    admin = await mysql.connect(mysql_url, minsize=1, maxsize=1)
    await admin.execute(f"KILL {int(conn_id)}")
    await admin.close()


async def test_server_lost_mid_query_fails_fast_and_the_pool_heals(mysql_url: str) -> None:
    db = await mysql.connect(mysql_url, minsize=1, maxsize=1)
    await make_items(db)
    conn_id = await connection_id(db)
    slow = db.query(
        "SELECT id, SLEEP(5) AS z FROM items WHERE id IN {keys}", key="id", name="slow_items"
    )

    async def load() -> Any:
        async with batchy.scope():
            return await slow(1)

    task = asyncio.ensure_future(load())
    await running(mysql_url, conn_id, "SLEEP(5)")
    started = time.monotonic()
    await kill(mysql_url, conn_id)
    with pytest.raises(DataSourceError) as info:
        await task
    assert time.monotonic() - started < 3
    assert str(info.value).startswith(
        f"loader 'slow_items' cannot reach MySQL at {db.host} (OperationalError: (2013, "
    )
    # The broken connection was discarded: the next call gets a fresh, healthy one.
    assert await connection_id(db) != conn_id
    items = db.one("items")
    async with batchy.scope():
        assert (await items(2))["label"] == "item2"
    await db.close()


async def test_connection_killed_while_idle_is_not_reused(mysql_url: str) -> None:
    db = await mysql.connect(mysql_url, minsize=1, maxsize=1)
    await make_items(db)
    conn_id = await connection_id(db)
    await kill(mysql_url, conn_id)
    await asyncio.sleep(0.1)
    items = db.one("items")
    async with batchy.scope():
        results = await batchy.gather(items(1), return_exceptions=True)
    if isinstance(results[0], DataSourceError):  # the pool had not noticed yet: fail once
        async with batchy.scope():
            results = [await items(1)]
    assert results[0]["label"] == "item1"
    assert await connection_id(db) != conn_id
    await db.close()


async def test_a_timed_out_query_closes_its_connection(mysql_url: str) -> None:
    db = await mysql.connect(mysql_url, minsize=1, maxsize=1, timeout=0.3)
    await make_items(db)
    conn_id = await connection_id(db)
    slow = db.query("SELECT id, SLEEP(3) AS z FROM items WHERE id IN {keys}", key="id")
    with pytest.raises(DataSourceError, match="got no answer from MySQL"):
        async with batchy.scope():
            await slow(1)
    assert db.pool.freesize == 0 and db.pool.size == 0  # closed, not back in the pool
    assert await connection_id(db) != conn_id
    await db.close()


async def test_a_batch_waiting_for_a_full_pool_says_it_got_no_connection(mysql_url: str) -> None:
    db = await mysql.connect(mysql_url, minsize=1, maxsize=1, timeout=0.5)
    await make_items(db)
    items = db.one("items")
    conn_id = await connection_id(db)
    # One batch holds the one connection past the timeout, one waits for it past the timeout.
    slow = db.query("SELECT id, SLEEP(2) AS z FROM items WHERE id IN {keys}", key="id")
    async with batchy.scope():
        results = await batchy.gather(slow(1), items(9), return_exceptions=True)
    assert [type(r).__name__ for r in results] == ["QueryInterruptedError"] * 2
    held, waited = (str(r) for r in results)
    assert "got no answer from MySQL" in held and "the connection was discarded" in held
    # The one that never had a connection says so: it was said to be a slow statement.
    assert waited == (
        f"loader 'items_by_id' got no connection to MySQL at {db.host} within 0.5 s while "
        "loading keys [9]: the pool had none free and none could be made "
        "in time (every one busy, or the server slow to accept or not answering). Check that "
        "the server accepts connections, raise the pool's maxsize if its connections are all "
        "busy, or raise timeout=."
    )
    # The connection that ran out of time was closed, the waiter took none: one new one.
    assert db.pool.size == 0
    async with batchy.scope():
        assert (await items(2))["label"] == "item2"
    assert db.pool.size == 1 and await connection_id(db) != conn_id
    await db.close()


async def test_a_rejected_query_keeps_its_healthy_connection(mysql_db: mysql.Database) -> None:
    conn_id = await connection_id(mysql_db)
    bad = mysql_db.one("no_such_table")
    with pytest.raises(DataSourceError):
        async with batchy.scope():
            await bad(1)
    assert await connection_id(mysql_db) == conn_id


async def test_pool_without_autocommit_is_refused(mysql_url: str, mariadb: Any) -> None:
    host, port = mariadb
    pool = await aiomysql.create_pool(
        host=host, port=port, user="root", db=mysql_url.rsplit("/", 1)[1], maxsize=1
    )
    db = mysql.Database(pool)
    assert db.host == f"{host}:{port}"
    items = db.one("items")
    with pytest.raises(batchy.LoaderError) as info:
        async with batchy.scope():
            await items(1)
    assert f"the aiomysql pool for {host}:{port} has autocommit off" in str(info.value)
    assert str(info.value).endswith(
        "Create the pool with autocommit=True (batchy_contrib.sql.mysql.connect does) while "
        "loading keys [1]"
    )
    await db.close()


async def test_many_rounds_share_one_small_pool(mysql_url: str) -> None:
    """40 concurrent requests, 3 loaders, 2 connections: nothing shared, nothing lost."""
    db = await mysql.connect(mysql_url, minsize=1, maxsize=2)
    await make_items(db, 200)
    items = db.one("items")
    groups = db.many("items", "grp", order_by="id", name="by_group")
    labels = db.query(
        "SELECT id, label FROM items WHERE id IN {keys}", key="id", row=lambda id, label: label
    )

    @batchy.task
    async def request(i: int) -> tuple[str, int]:
        item = await items(i)
        siblings = await groups(item["grp"])
        label = await labels(siblings[-1]["id"])
        return label, len(siblings)

    async def one_request(i: int) -> tuple[str, int]:
        async with batchy.scope():
            await asyncio.sleep(0.001 * (i % 7))  # arrive at different times
            return await request(i)

    results = await asyncio.gather(*(one_request(i) for i in range(40)))
    assert results == [(f"item{195 + i % 5}", 40) for i in range(40)]
    assert db.pool.size <= 2 and db.pool.freesize == db.pool.size
    await db.close()


async def test_questions_needs_a_bounded_pool(mysql_url: str) -> None:
    db = await mysql.connect(mysql_url, minsize=0, maxsize=0)
    with pytest.raises(
        batchy.UsageError,
        match=r"questions\(\) reads every connection of the pool for 127.0.0.1:3306, so it needs a bounded pool; create it with maxsize > 0",
    ):
        await db.questions()
    await db.close()


async def test_a_connect_cut_short_closes_its_socket_though_its_error_is_kept() -> None:
    # As on PostgreSQL (psycopg kept the half-made connection in the frames of the
    # error a loader's failure keeps): a batch's time limit ends a connect to a
    # server slow to answer, and the error is kept; the socket must close now, not
    # when the garbage collector comes by (it is off here, to tell the two apart).
    import gc
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        port = server.getsockname()[1]
        db = mysql.Database.from_url(f"mysql://root@127.0.0.1:{port}/x", minsize=0, timeout=0.2)
        items = db.one("items")
        gc.disable()
        try:
            async with batchy.scope():
                (kept,) = await batchy.gather(items(1), return_exceptions=True)
            accepted, _ = server.accept()
            with accepted:
                accepted.settimeout(5)
                while accepted.recv(4096):  # nothing is sent: then the end of the stream
                    pass
        finally:
            gc.enable()
        assert isinstance(kept, DataSourceError)
        await db.close()
