"""Databases declared at import time: the same module-level loaders in every kind of event loop.

``mysql.Database.from_url``, ``postgres.Database.from_url`` and
``sqlite.Database``, against the real MariaDB, PostgreSQL and SQLite: a new loop per ``batchy.run`` (a Flask or Django view, also from
several threads), one long-lived loop with concurrent requests (an ASGI app),
a ``batchy.jobs`` worker, and pytest's async tests. The server sees one
statement per loader per round, each loop's pool closes with its loop, and
nothing reaches the user's log: no warning, no "Event loop is closed". The
guides' sync examples run here too; tests/contrib/test_sql_loops.py has the
per-loop pools' edge cases.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from contrib_helpers import Statements, pg_url, statements
from sql_lazy_helpers import (
    MODULE_DATABASE,
    Site,
    group,
    make_items,
    open_pools,
    quiet,
    server_connections,
)

import batchy
from batchy.jobs import MemoryBackend, Queue, Worker
from batchy.testing import record
from batchy_contrib.sql import mysql, postgres, sqlite


@pytest.fixture(params=["sqlite", "mysql", "postgres"])
def lazy_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A database made as a module makes it: in sync code, with no event loop running."""
    if request.param == "sqlite":
        db: Any = sqlite.Database(str(tmp_path / "lazy.db"), trace=Statements())
        yield db
        db.close_now()
        return
    if request.param == "postgres":
        db = postgres.Database.from_url(request.getfixturevalue("postgres_url"), max_size=4)
    else:
        db = mysql.Database.from_url(request.getfixturevalue("mysql_url"), maxsize=4)
    yield db
    assert open_pools(db) == 0, "a loop's pool outlived its loop"


# -- 1. a new event loop per request: batchy.run in a Flask or Django view -----------


def test_flask_style_batchy_run_per_request(lazy_db: Any) -> None:
    batchy.run(make_items(lazy_db))
    site = Site(lazy_db)  # module-level loaders: declared once, used by every request
    with quiet() as problems:
        for n in range(3):  # three requests, each with its own event loop
            ids = list(range(n, n + 10))
            page, sent, rec = batchy.run(site.counted(ids))
            assert page == [group(i) for i in ids]
            assert sent == 2 and rec.rounds == 2  # the server saw one statement per round
            assert rec.calls(site.items) == [ids]
            assert [sorted(c) for c in rec.calls(site.groups)] == [[0, 1, 2, 3, 4]]
            assert open_pools(lazy_db) == 0  # the request's pool closed with its loop
    assert problems == []
    assert server_connections(lazy_db) == 0


def test_parallel_batches_per_request_need_connections_the_loop_then_closes(
    lazy_db: Any,
) -> None:
    # A round of two loaders runs on two connections: the second is made while the
    # first is in use, just before the request's loop shuts down. (On psycopg_pool's
    # pool, whose background task swallows the cancellation asyncio.run sends at
    # shutdown, asyncio.run then waited forever.)
    batchy.run(make_items(lazy_db))
    site = Site(lazy_db)

    async def page(i: int) -> tuple[Any, int]:
        before = await statements(lazy_db)
        async with batchy.scope():
            got = await batchy.gather(site.items(i), site.groups(i % 5))
        return got, await statements(lazy_db) - before

    with quiet() as problems:
        for i in range(5):
            (item, siblings), sent = batchy.run(page(i))
            assert item["id"] == i and [s["id"] for s in siblings] == group(i)
            assert sent == 2
            assert open_pools(lazy_db) == 0
    assert problems == []
    assert server_connections(lazy_db) == 0


def test_flask_threads_each_with_their_own_loop(lazy_db: Any) -> None:
    batchy.run(make_items(lazy_db))
    site = Site(lazy_db)
    # SQLite's trace and the PostgreSQL proxy count for every thread at once: count the total.
    total = isinstance(lazy_db, (sqlite.Database, postgres.Database))
    total_before = batchy.run(statements(lazy_db)) if total else 0

    def request(n: int) -> tuple[list[Any], int]:  # a threaded server's worker thread
        page, sent, _ = batchy.run(site.counted([n, n + 1, n + 2]))
        return page, sent

    with quiet() as problems, ThreadPoolExecutor(4) as threads:
        results = list(threads.map(request, range(12)))
    assert [page for page, _ in results] == [[group(n + j) for j in range(3)] for n in range(12)]
    if total:
        assert batchy.run(statements(lazy_db)) - total_before == 24
    else:
        assert [sent for _, sent in results] == [2] * 12
    assert problems == []
    assert open_pools(lazy_db) == 0 and server_connections(lazy_db) == 0


# -- 2. one long-lived loop, concurrent requests: an ASGI app -------------------------


def make_app(site: Site) -> Any:
    """A bare ASGI app (what a framework boils down to): ``GET /?ids=1,2`` returns the page."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        ids = [int(i) for i in scope["query_string"].decode().removeprefix("ids=").split(",")]
        async with batchy.scope():  # one scope per request; batches are shared by the loop
            page = await batchy.gather(*(site.view(i) for i in ids))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": json.dumps(page).encode()})

    return app


async def serve(app: Any, queries: list[str], counter: Any) -> tuple[list[Any], int, Any]:
    """What an ASGI server does in its one loop: lifespan, concurrent requests, shutdown."""
    lifespan: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    lifespan.put_nowait({"type": "lifespan.startup"})
    life = asyncio.ensure_future(app({"type": "lifespan"}, lifespan.get, _ignore))

    async def request(query: str) -> Any:
        body: list[bytes] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                body.append(message["body"])

        scope = {"type": "http", "method": "GET", "path": "/", "query_string": query.encode()}
        await app(scope, receive, send)
        return json.loads(b"".join(body))

    before = await counter()
    with record() as rec:
        pages = await asyncio.gather(*(request(q) for q in queries))
    sent = await counter() - before
    lifespan.put_nowait({"type": "lifespan.shutdown"})
    await life
    return pages, sent, rec


async def _ignore(message: dict[str, Any]) -> None:
    pass


def test_asgi_style_one_loop_concurrent_requests_share_batches(lazy_db: Any) -> None:
    batchy.run(make_items(lazy_db))
    site = Site(lazy_db)
    app = make_app(site)
    queries = [f"ids={n},{n + 10},{n + 20}" for n in range(5)]
    with quiet() as problems:  # uvicorn's way: the whole server in one asyncio.run
        pages, sent, rec = asyncio.run(serve(app, queries, lambda: statements(lazy_db)))
    assert pages == [[group(n), group(n + 10), group(n + 20)] for n in range(5)]
    # Five requests in flight together: one statement per loader per round in all.
    assert sent == 2 and rec.rounds == 2
    assert rec.calls(site.items) == [[n + 10 * j for n in range(5) for j in range(3)]]
    assert problems == []
    assert open_pools(lazy_db) == 0 and server_connections(lazy_db) == 0


# -- 3. a batchy.jobs worker ----------------------------------------------------------


def test_a_jobs_worker_uses_the_module_level_loaders(lazy_db: Any) -> None:
    batchy.run(make_items(lazy_db))
    site = Site(lazy_db)
    queue = Queue(MemoryBackend())
    labels: list[str] = []

    @queue.job(name="label")
    async def label(i: int) -> None:
        item = await site.items(i)
        labels.append(item["label"])

    async def worker() -> tuple[int, Any]:  # what `batchy worker app:queue` runs
        await queue.enqueue_many(label.call(i) for i in range(20))
        before = await statements(lazy_db)
        with record() as rec:
            await Worker(queue, concurrency=20, poll_interval=0.02, burst=True).run()
        return await statements(lazy_db) - before, rec

    with quiet() as problems:
        sent, rec = asyncio.run(worker())
    assert sorted(labels) == sorted(f"item{i}" for i in range(20))
    calls = rec.calls(site.items)
    assert sent == len(calls) and len(calls) <= 2  # the concurrent jobs' loads batched
    assert sorted(k for call in calls for k in call) == list(range(20))
    assert problems == []
    assert open_pools(lazy_db) == 0 and server_connections(lazy_db) == 0


# -- 4. pytest's async tests: a new loop per test, the same module-level database -----

_SQLITE_DIR = tempfile.mkdtemp(prefix="batchy-lazy-")
MODULE_DBS: dict[str, Any] = {
    "mysql": mysql.Database.from_url(f"mysql://root@127.0.0.1:3306/{MODULE_DATABASE}", maxsize=4),
    "postgres": postgres.Database.from_url(pg_url(MODULE_DATABASE), max_size=4),
    "sqlite": sqlite.Database(os.path.join(_SQLITE_DIR, "lazy.db"), trace=Statements()),
}
MODULE_SITES = {name: Site(db) for name, db in MODULE_DBS.items()}
EARLIER_POOLS: list[Any] = []


@pytest.fixture(scope="module", autouse=True)
def _module_sqlite() -> Iterator[None]:
    yield
    MODULE_DBS["sqlite"].close_now()
    shutil.rmtree(_SQLITE_DIR, ignore_errors=True)


@pytest.mark.parametrize("run", [1, 2, 3])
@pytest.mark.parametrize("store", ["sqlite", "mysql", "postgres"])
async def test_module_level_loaders_in_async_tests(
    store: str, run: int, request: pytest.FixtureRequest
) -> None:
    if store in ("mysql", "postgres"):
        url = request.getfixturevalue(f"{store}_url")
        assert urlsplit(url).path == f"/{MODULE_DATABASE}"
    db, site = MODULE_DBS[store], MODULE_SITES[store]
    await make_items(db)
    page, sent, rec = await site.counted([run, run + 5])
    assert page == [group(run), group(run + 5)]
    assert sent == 2 and rec.rounds == 2
    if store in ("mysql", "postgres"):
        assert open_pools(db) == 1  # this test's loop: earlier tests' loops took theirs along
        assert all(pool.closed for pool in EARLIER_POOLS)
        EARLIER_POOLS.append(db.pool)


# -- the guides' sync examples ------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "blog"
SYNC_OUTPUT = [
    "[{'name': 'ada', 'posts': ['Hello', 'Again']}, {'name': 'bob', 'posts': ['Hi']}]",
    "  batch calls per loader: [1, 1]",
    "[{'name': 'bob', 'posts': ['Hi']}, {'name': None, 'posts': []}]",
    "  batch calls per loader: [1, 1]",
]


def run_example(name: str, *args: str) -> list[str]:
    # -X dev shows ResourceWarnings and asyncio's debug complaints on stderr.
    out = subprocess.run(
        [sys.executable, "-X", "dev", str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0 and out.stderr == "", out.stdout + out.stderr
    return out.stdout.splitlines()


def test_the_sqlite_sync_guide() -> None:
    assert run_example("guide_sync_sqlite.py") == SYNC_OUTPUT


def test_the_mysql_sync_guide(mysql_url: str) -> None:
    assert run_example("guide_sync_mysql.py", mysql_url) == SYNC_OUTPUT


def test_the_postgres_sync_guide(postgres_url: str) -> None:
    assert run_example("guide_sync_postgres.py", postgres_url) == SYNC_OUTPUT


@pytest.mark.parametrize(
    ("guide", "example"),
    [
        ("20-mysql.rst", "guide_sync_mysql.py"),
        ("21-sqlite.rst", "guide_sync_sqlite.py"),
        ("24-postgres.rst", "guide_sync_postgres.py"),
    ],
)
def test_the_guides_show_the_sync_examples(guide: str, example: str) -> None:
    text = (EXAMPLES.parents[1] / "docs" / "guides" / guide).read_text()
    assert "Sync code (Flask, Django)" in text and example in text
    for line in SYNC_OUTPUT:
        assert line in text, (guide, line)
