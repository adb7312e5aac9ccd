"""What the tests of databases declared at import time share: a page, its tables, and quiet().

Importable: tests/contrib/conftest.py puts this folder on sys.path.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pymysql
from contrib_helpers import PG_HOST, PG_PORT, statements

import batchy
from batchy.testing import record
from batchy_contrib.sql import mysql, postgres

# The session's private database (tests/contrib/conftest.py: DATABASE), which the
# mysql_url and postgres_url fixtures create; module-level databases need its name at import.
MODULE_DATABASE = f"batchy_contrib_{os.getpid()}"


async def make_items(db: Any, n: int = 50) -> None:
    with warnings.catch_warnings():  # MariaDB notes a DROP of a missing table
        warnings.simplefilter("ignore")
        await db.execute("DROP TABLE IF EXISTS lazy_items")
    await db.execute("CREATE TABLE lazy_items (id INTEGER PRIMARY KEY, grp INTEGER, label TEXT)")
    p = db.dialect.param
    await db.executemany(
        f"INSERT INTO lazy_items VALUES ({p}, {p}, {p})", [(i, i % 5, f"item{i}") for i in range(n)]
    )


class Site:
    """A page's loaders and handler, declared once (as a module would) over one database."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.items = db.one("lazy_items")
        self.groups = db.many("lazy_items", "grp", order_by="id")

    @batchy.task
    def view(self, i: int) -> Any:  # two rounds: the item, then its group
        item = yield self.items(i)
        siblings = yield self.groups(item["grp"])
        return [s["id"] for s in siblings]

    async def counted(self, ids: list[int]) -> tuple[list[Any], int, Any]:
        """The page for ``ids``, the statements the database ran for it, and what batchy saw."""
        before = await statements(self.db)
        with record() as rec:
            async with batchy.scope():
                page = await batchy.gather(*(self.view(i) for i in ids))
        return page, await statements(self.db) - before, rec


def group(i: int) -> list[int]:
    return list(range(i % 5, 50, 5))


def open_pools(db: Any) -> int:
    """Event loops that hold a pool of ``db`` (SQLite has none: its threads serve any loop)."""
    return len(db._per_loop) if isinstance(db, (mysql.Database, postgres.Database)) else 0


def server_connections(db: Any) -> int:
    """Connections the server lists to the session's database (0 for SQLite), closed ones gone."""
    if isinstance(db, postgres.Database):
        return _postgres_connections()
    if not isinstance(db, mysql.Database):
        return 0
    host, _, port = db.host.rpartition(":")
    conn = pymysql.connect(host=host, port=int(port), user="root", connect_timeout=2)
    try:
        deadline = time.monotonic() + 3  # the server lists a closed connection briefly
        while True:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = %s",
                    (MODULE_DATABASE,),
                )
                (count,) = cur.fetchone()
            if count == 0 or time.monotonic() > deadline:
                return int(count)
            time.sleep(0.05)
    finally:
        conn.close()


def _postgres_connections() -> int:
    url = f"postgresql://postgres@{PG_HOST}:{PG_PORT}/postgres"
    with psycopg.connect(url, autocommit=True, connect_timeout=2) as conn:
        deadline = time.monotonic() + 3  # the server lists a closed connection briefly
        while True:
            row = conn.execute(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = %s", [MODULE_DATABASE]
            ).fetchone()
            count = int(row[0]) if row else 0
            if count == 0 or time.monotonic() > deadline:
                return count
            time.sleep(0.05)


class _Collect(logging.Handler):
    def __init__(self, found: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.found = found

    def emit(self, record: logging.LogRecord) -> None:
        self.found.append(f"asyncio log: {record.getMessage()}")


@contextmanager
def quiet() -> Iterator[list[str]]:
    """What would reach a user's stderr or log in the block: warnings, errors in ``__del__``
    (unraisable), and asyncio's log ("Task was destroyed", errors closing an async generator).

    Garbage is collected before the block ends, so a connection or transport
    left open ("Unclosed connection", "unclosed transport") shows up here.
    """
    gc.collect()  # what earlier tests left (a memcached socket) is theirs, not the block's
    found: list[str] = []
    handler = _Collect(found)
    asyncio_log = logging.getLogger("asyncio")
    asyncio_log.addHandler(handler)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = lambda u: found.append(f"unraisable: {u.exc_value!r} in {u.object!r}")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield found
            gc.collect()
        found.extend(f"{w.category.__name__}: {w.message}" for w in caught)
    finally:
        sys.unraisablehook = previous_hook
        asyncio_log.removeHandler(handler)
