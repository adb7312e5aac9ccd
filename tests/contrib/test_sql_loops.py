"""The per-loop pools' edge cases: pools of other loops, no loop, loops closed by hand, failures.

Also what loaders made per request share, and SQLite closing its connections
when collected. The everyday uses are in tests/contrib/test_sql_lazy.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sqlite3
import threading
import time
import weakref
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiomysql
import pytest
from contrib_helpers import closed_port
from sql_lazy_helpers import make_items, open_pools, quiet, server_connections

import batchy
from batchy_contrib.sql import mysql, postgres, sqlite

#: Per store: its module, and the name of its driver's pool in messages.
POOLED = {"mysql": (mysql, "aiomysql"), "postgres": (postgres, "psycopg")}


def connect(store: str, url: str) -> Any:
    """``store``'s connect(url) coroutine, with a pool of one connection."""
    if store == "postgres":
        return postgres.connect(url, max_size=1)
    return mysql.connect(url, maxsize=1)


@pytest.mark.parametrize("store", ["mysql", "postgres"])
def test_a_pool_made_under_asyncio_run_says_how_to_fix_it(
    store: str, request: pytest.FixtureRequest
) -> None:
    # The old way: a pool made at startup with asyncio.run, then batchy.run per
    # request. Before from_url it failed with "RuntimeError: Event loop is closed",
    # reported as a failed query.
    module, driver = POOLED[store]
    db = asyncio.run(connect(store, request.getfixturevalue(f"{store}_url")))
    items = db.one("lazy_items")
    with quiet() as problems, pytest.raises(batchy.LoaderError) as info:
        batchy.run(items(1))
    assert "Event loop is closed" not in str(info.value)
    name = module.__name__.rpartition(".")[2]
    assert str(info.value) == (
        f"loader 'lazy_items_by_id' raised EventLoopError: the {driver} pool for {db.host} "
        f"was made in an event loop that has closed since (asyncio.run({name}.connect(...)) at "
        "startup, then batchy.run(...) per request?), and a connection works only in the loop "
        f"that opened it; declare the database with {name}.Database.from_url(url) instead of "
        f"{name}.connect(url): it opens a pool per event loop on first use and closes it with "
        "its loop while loading keys [1]"
    )
    assert type(info.value.__cause__).__name__ == "EventLoopError"
    assert isinstance(info.value.__cause__, module.EventLoopError)
    assert problems == []  # its sockets were closed, not left to warn when collected


@pytest.mark.parametrize("store", ["mysql", "postgres"])
def test_a_pool_of_another_running_loop_is_refused(
    store: str, request: pytest.FixtureRequest
) -> None:
    module, driver = POOLED[store]
    name = module.__name__.rpartition(".")[2]
    url = request.getfixturevalue(f"{store}_url")
    home = asyncio.new_event_loop()
    thread = threading.Thread(target=home.run_forever)
    thread.start()
    try:
        db = asyncio.run_coroutine_threadsafe(connect(store, url), home).result()
        with pytest.raises(module.EventLoopError) as info:
            batchy.run(db.fetch("SELECT 1"))
        assert str(info.value).startswith(
            f"the {driver} pool for {db.host} was made in another event loop (another "
            "thread's, or one not running now), and a connection works only in the loop "
            f"that opened it; declare the database with {name}.Database.from_url(url)"
        )
        asyncio.run_coroutine_threadsafe(db.close(), home).result()
    finally:
        home.call_soon_threadsafe(home.stop)
        thread.join()
        home.close()


@pytest.mark.parametrize("store", ["sqlite", "mysql", "postgres"])
def test_with_no_event_loop_the_error_names_the_fix(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if store == "sqlite":
        db: Any = sqlite.Database(str(tmp_path / "lazy.db"))
    elif store == "postgres":
        db = postgres.Database.from_url(request.getfixturevalue("postgres_url"))
    else:
        db = mysql.Database.from_url(request.getfixturevalue("mysql_url"))
    items = db.one("lazy_items")
    pending = items(1)  # a plain call from sync code, outside batchy.run
    with pytest.raises(batchy.UsageError, match=r"run it with batchy\.run\(\.\.\.\)"):
        pending.result()
    statement = db.fetch("SELECT 1")
    with pytest.raises(sqlite.EventLoopError) as info:
        statement.send(None)  # driven by hand: no asyncio loop runs it
    where = "SQLite database" if db.kind == "SQLite" else f"{db.kind} database at {db.host}"
    assert str(info.value).startswith(f"the {where}")
    assert str(info.value).endswith(
        "was used with no running asyncio event loop. From sync code (a Flask or Django "
        "view, a script), run the handler with batchy.run(handler(...)); in async code, "
        "await it."
    )
    statement.close()
    if store == "sqlite":
        db.close_now()


def from_url(store: str, request: pytest.FixtureRequest, **options: Any) -> Any:
    """``store``'s lazily connected database over the session database."""
    url = request.getfixturevalue(f"{store}_url")
    if store == "postgres":
        return postgres.Database.from_url(url, **options)
    return mysql.Database.from_url(url, **options)


@pytest.mark.parametrize("store", ["mysql", "postgres"])
def test_a_loop_closed_by_hand_leaves_its_pool_to_the_next_loop(
    store: str, request: pytest.FixtureRequest
) -> None:
    db = from_url(store, request)
    loop = asyncio.new_event_loop()
    assert loop.run_until_complete(db.fetch("SELECT 1 AS one")) == [{"one": 1}]
    loop.close()  # without shutdown_asyncgens(): nothing closed the pool
    assert open_pools(db) == 1
    with quiet() as problems:
        assert batchy.run(db.fetch("SELECT 2 AS two")) == [{"two": 2}]
        del loop
    assert problems == []  # the dead loop's sockets were closed without using that loop
    assert open_pools(db) == 0 and server_connections(db) == 0


@pytest.mark.parametrize("store", ["mysql", "postgres"])
async def test_concurrent_first_calls_open_one_pool(
    store: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = []
    module, name = (aiomysql, "create_pool") if store == "mysql" else (postgres, "open_pool")
    real = getattr(module, name)

    async def open_pool(*args: Any, **options: Any) -> Any:
        opened.append(options)
        await asyncio.sleep(0.05)  # every loader of the round asks meanwhile
        return await real(*args, **options)

    monkeypatch.setattr(module, name, open_pool)
    db = from_url(store, request)
    one, two = db.one("nope_one"), db.one("nope_two")
    async with batchy.scope():
        results = await batchy.gather(one(1), two(1), return_exceptions=True)
    assert len(opened) == 1  # one opening, shared by both batches of the round
    assert all(isinstance(r, mysql.QueryRejectedError) for r in results)  # tables are missing
    assert db.pool is not None and open_pools(db) == 1
    await db.close()  # this loop's pool; the database stays usable
    assert db.pool is None and open_pools(db) == 0
    assert await db.fetch("SELECT 3 AS three") == [{"three": 3}]
    assert len(opened) == 2
    await db.close()


@pytest.mark.parametrize(
    ("store", "url", "reason"),
    [
        (
            "mysql",
            "mysql://root@127.0.0.1:{port}/test",
            "MySQL at 127.0.0.1:{port} (OperationalError: (2003, ",
        ),
        (
            "postgres",
            "postgresql://postgres@127.0.0.1:{port}/test",
            "PostgreSQL at 127.0.0.1:{port} (OperationalError: connection failed: ",
        ),
    ],
)
async def test_a_server_that_is_down_fails_each_call_and_the_next_one_retries(
    store: str, url: str, reason: str
) -> None:
    port = closed_port()
    module: Any = mysql if store == "mysql" else postgres
    db = module.Database.from_url(url.format(port=port), timeout=5)
    users = db.one("users")
    for _ in range(2):
        with pytest.raises(mysql.ConnectionLostError) as info:
            async with batchy.scope():
                await users(1)
        assert str(info.value).startswith(
            f"loader 'users_by_id' cannot reach {reason.format(port=port)}"
        )
        assert open_pools(db) == 0  # nothing kept: the next call connects again


async def silent_server() -> tuple[asyncio.Server, list[asyncio.StreamWriter]]:
    """A server that accepts connections and never says a word, and the connections it took."""
    accepted: list[asyncio.StreamWriter] = []

    async def stay_silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    return await asyncio.start_server(stay_silent, "127.0.0.1", 0), accepted


async def close_server(server: asyncio.Server, accepted: list[asyncio.StreamWriter]) -> None:
    server.close()
    for writer in accepted:
        writer.close()
    await server.wait_closed()


def others() -> list[asyncio.Task[Any]]:
    """The running loop's tasks but the current one (a pool's opening left pending)."""
    return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]


@pytest.mark.parametrize(
    ("store", "url", "connect_timeout", "reason"),
    [
        (
            "mysql",
            "mysql://root@127.0.0.1:{port}/test",
            0.3,
            "MySQL at 127.0.0.1:{port} (OperationalError: (2003, \"Can't connect to MySQL "
            "server on '127.0.0.1': no greeting within 0.3 s (connect_timeout)\"))",
        ),
        (
            "postgres",
            "postgresql://postgres@127.0.0.1:{port}/test",
            2,  # libpq's least
            "PostgreSQL at 127.0.0.1:{port} (ConnectionTimeout: connection timeout expired)",
        ),
    ],
)
async def test_a_server_that_never_greets_fails_each_call_and_the_next_one_retries(
    store: str, url: str, connect_timeout: float, reason: str
) -> None:
    # aiomysql's connect_timeout bounds the TCP connect only: the opening of the
    # loop's pool waited for the greeting for the loop's whole life, and every
    # later call of the loop waited on that same opening (never connecting again).
    server, accepted = await silent_server()
    port = server.sockets[0].getsockname()[1]
    module: Any = mysql if store == "mysql" else postgres
    db = module.Database.from_url(url.format(port=port), timeout=5, connect_timeout=connect_timeout)
    users = db.one("users")
    with quiet() as problems:
        for attempt in (1, 2):
            started = time.monotonic()
            with pytest.raises(mysql.ConnectionLostError) as info:
                async with batchy.scope():
                    await users(1)
            assert time.monotonic() - started < connect_timeout + 1  # not timeout=5
            assert str(info.value) == (
                f"loader 'users_by_id' cannot reach {reason.format(port=port)} while loading "
                "keys [1]. Check that the server is running and reachable; the next call "
                "reconnects."
            )
            assert len(accepted) == attempt  # each call connected anew
            assert open_pools(db) == 0 and others() == []  # no opening left pending
        await close_server(server, accepted)
    assert problems == []


async def greets_once(
    host: str, port: int
) -> tuple[asyncio.Server, list[asyncio.StreamWriter], list[asyncio.Task[None]]]:
    """A server whose first connection goes through to ``host:port`` and whose later ones
    hear nothing: the connections it took, and the tasks relaying the first."""
    accepted: list[asyncio.StreamWriter] = []
    relays: list[asyncio.Task[None]] = []

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def first_through(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        if len(accepted) == 1:
            to_reader, to_writer = await asyncio.open_connection(host, port)
            accepted.append(to_writer)
            relays.extend(
                asyncio.create_task(r) for r in (relay(reader, to_writer), relay(to_reader, writer))
            )

    return await asyncio.start_server(first_through, "127.0.0.1", 0), accepted, relays


async def test_a_pool_growing_towards_a_server_that_never_greets_fails_that_call_only(
    mysql_url: str,
) -> None:
    # aiomysql's connect_timeout bounds the TCP connect only, and open_pool the
    # pool's first connections: a connection the pool made later (a second call
    # while the first holds its connection) waited for the greeting forever with
    # no timeout=, and held the pool's lock meanwhile, so every later call of the
    # loop waited too.
    parts = urlsplit(mysql_url)
    server, accepted, relays = await greets_once(parts.hostname or "", parts.port or 3306)
    port = server.sockets[0].getsockname()[1]
    url = f"mysql://root@127.0.0.1:{port}{parts.path}"
    db = mysql.Database.from_url(url, timeout=None, minsize=1, maxsize=2, connect_timeout=0.3)
    users = db.query(
        "SELECT id FROM (SELECT 1 AS id UNION SELECT 2 UNION SELECT 3) AS t WHERE id IN {keys}",
        key="id",
        name="users_by_id",
    )
    with quiet() as problems:
        async with batchy.scope():
            assert await users(1) == {"id": 1}  # the pool's one connection, through
        held = await db.pool.acquire()  # a call in flight holds it: the next must grow
        async with asyncio.timeout(30):  # (the test's own limit: it hung here)
            with pytest.raises(mysql.ConnectionLostError) as info:
                async with batchy.scope():
                    await users(2)
        assert str(info.value) == (
            f"loader 'users_by_id' cannot reach MySQL at 127.0.0.1:{port} (OperationalError: "
            "(2003, \"Can't connect to MySQL server on '127.0.0.1': no greeting within 0.3 s "
            '(connect_timeout)")) while loading keys [2]. Check that the server is running and '
            "reachable; the next call reconnects."
        )
        db.pool.release(held)  # the call in flight ends: its connection serves the next
        async with batchy.scope():
            assert await users(3) == {"id": 3}
        await db.close()
        await close_server(server, accepted)
        await asyncio.gather(*relays)
    assert problems == []


async def test_a_call_that_times_out_while_its_pool_opens_leaves_no_opening_behind() -> None:
    # timeout= is shorter than the silent server's wait: the call fails at its own
    # time limit, and the opening it started ends too (connect_timeout follows
    # timeout=), so the next call connects again instead of joining it.
    server, accepted = await silent_server()
    port = server.sockets[0].getsockname()[1]
    db = mysql.Database.from_url(f"mysql://root@127.0.0.1:{port}/test", timeout=0.3)
    users = db.one("users")
    with quiet() as problems:
        for attempt in (1, 2):
            with pytest.raises(mysql.QueryInterruptedError):
                async with batchy.scope():
                    await users(1)
            await asyncio.sleep(0.3)  # the opening's own time limit, the same 0.3 s
            assert len(accepted) == attempt
            assert open_pools(db) == 0 and others() == []
        await close_server(server, accepted)
    assert problems == []


def test_a_server_that_never_greets_fails_each_request_of_sync_code(
    blackhole_port: int,
) -> None:
    # batchy.run per request: each run's pool opening is bounded by connect_timeout,
    # not only by the loader's timeout= (asyncio.run then cancels what is left).
    db = mysql.Database.from_url(
        f"mysql://root@127.0.0.1:{blackhole_port}/test", timeout=5, connect_timeout=0.3
    )
    users = db.one("users")

    @batchy.task
    async def view() -> Any:
        return await users(1)

    with quiet() as problems:
        for _ in range(2):
            started = time.monotonic()
            with pytest.raises(mysql.ConnectionLostError, match=r"no greeting within 0\.3 s"):
                batchy.run(view())
            assert time.monotonic() - started < 2
    assert problems == [] and open_pools(db) == 0


async def test_a_batch_opening_a_connection_survives_a_garbage_collection(
    mysql_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = aiomysql.pool.connect

    async def slow_connect(**options: Any) -> Any:
        # As during a real handshake, what the task waits on is held only by this
        # frame (asyncio's stream protocol holds its reader weakly), and the loop
        # holds tasks weakly: nothing outside the task keeps it alive.
        loop = asyncio.get_running_loop()
        handshake = loop.create_future()
        ref = weakref.ref(handshake)
        loop.call_later(0.1, lambda: (f := ref()) is not None and f.set_result(None))
        await handshake
        return await real(**options)

    async def collect() -> None:
        await asyncio.sleep(0.05)
        gc.collect()

    monkeypatch.setattr(aiomysql.pool, "connect", slow_connect)
    # timeout=None: with a timeout, its timer holds the task anyway.
    db = mysql.Database.from_url(mysql_url, minsize=0, maxsize=2, timeout=None)
    ones = db.query("SELECT id FROM (SELECT 1 AS id) AS t WHERE id IN {keys}", key="id")
    collector = asyncio.ensure_future(collect())
    async with batchy.scope():
        assert await asyncio.wait_for(ones(1), 5) == {"id": 1}  # the batch's task
    await collector
    await db.close()

    # A task nobody keeps (aiodataloader dispatches its batches so) calling fetch.
    done = asyncio.Event()
    rows: list[Any] = []

    async def fetch() -> None:
        rows.extend(await db.fetch("SELECT 2 AS two"))
        done.set()

    asyncio.ensure_future(fetch())  # noqa: RUF006 - unreferenced on purpose
    collector = asyncio.ensure_future(collect())
    await asyncio.wait_for(done.wait(), 5)
    assert rows == [{"two": 2}]
    await collector
    await db.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": "postgres://x@y/z"}, "takes a URL like 'mysql://user:password@host:3306/"),
        ({"minsize": 5, "maxsize": 2}, "got minsize=5 above maxsize=2"),
        ({"maxsize": -1}, "needs minsize and maxsize as ints >= 0, got minsize=1, maxsize=-1"),
    ],
)
def test_from_url_checks_its_arguments_at_once(options: dict[str, Any], message: str) -> None:
    url = options.pop("url", "mysql://root@127.0.0.1:3306/test")
    with pytest.raises(batchy.UsageError, match=r"^mysql\.Database\.from_url\(\) ") as info:
        mysql.Database.from_url(url, **options)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"url": "mysql://x@y/z"},
            "takes a URL like 'postgresql://user:password@host:5432/database', got 'mysql://x@y/z'",
        ),
        ({"min_size": 5, "max_size": 2}, "got min_size=5 above max_size=2: the pool would open"),
        (
            {"max_size": 0},
            "needs min_size as an int >= 0 and max_size as an int >= 1, got min_size=1, max_size=0",
        ),
    ],
)
def test_postgres_from_url_checks_its_arguments_at_once(
    options: dict[str, Any], message: str
) -> None:
    url = options.pop("url", "postgresql://postgres@127.0.0.1:5432/test")
    with pytest.raises(batchy.UsageError, match=r"^postgres\.Database\.from_url\(\) ") as info:
        postgres.Database.from_url(url, **options)
    assert message in str(info.value)


# -- loaders made per request ----------------------------------------------------------


async def test_loaders_made_per_request_share_what_the_column_holds(db: Any) -> None:
    # Module-level loaders learn once that a key column returns ints, and then
    # send the plain IN list; loaders made per request learn it from the database.
    await make_items(db)
    sent: list[str] = []
    # The statements of key batches: PostgreSQL reads them with their columns' types.
    name = "_described" if hasattr(db, "_described") else "_rows"
    rows = getattr(db, name)

    async def recording(sql: str, params: Any, **options: Any) -> Any:
        sent.append(sql)
        return await rows(sql, params, **options)

    setattr(db, name, recording)
    for _ in range(3):
        items = db.one("lazy_items")  # a new loader per request
        async with batchy.scope():
            assert (await items(7))["label"] == "item7"
    assert ["batchy__pos" in sql for sql in sent] == [True, False, False]
    groups = db.many("lazy_items", "grp")  # another column: learnt on its own
    async with batchy.scope():
        assert len(await groups(2)) == 10
    assert "batchy__pos" in sent[-1]


# -- SQLite's connections ---------------------------------------------------------------


def test_an_sqlite_database_closes_its_connections_when_collected(tmp_path: Path) -> None:
    db = sqlite.Database(str(tmp_path / "gc.db"), threads=2)
    assert batchy.run(db.fetch("SELECT 1 AS one")) == [{"one": 1}]
    live, lock = db._conns, db._lock
    conns = list(live)
    assert conns
    del db
    gc.collect()
    # The last reference may go on a worker thread (its last statement's closure),
    # and the finalizer with it: wait until it has closed them all. Touching a
    # connection while another thread closes it can crash the interpreter.
    deadline = time.monotonic() + 10
    while live and time.monotonic() < deadline:
        time.sleep(0.01)
    with lock:  # and has left its critical section
        assert live == []
    for conn in conns:  # closed, so Python 3.13 has no unclosed database to warn about
        with pytest.raises(sqlite3.ProgrammingError, match="closed database"):
            conn.execute("SELECT 1")
