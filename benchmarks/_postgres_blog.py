"""PostgreSQL for the data-source benchmarks: the blog in a database of its own, statements counted.

:func:`blog_database` creates ``bench_pg_blog`` on the server of
``BATCHY_BENCH_PG`` (dropped again by :meth:`BlogDatabase.drop`), seeds the
blog, and gives two database objects over it: one straight to the server for
the timed renders, and one through the proxy of examples/blog/pg_statements.py
that counts the statements the server receives, for the counted ones (so the
proxy costs the timed renders nothing).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

import batchy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "blog"))
import blog_seed
from pg_statements import StatementCounter

from batchy_contrib.sql import postgres

SERVER = os.environ.get("BATCHY_BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
DATABASE = "bench_pg_blog"
_COUNTERS: dict[str, StatementCounter] = {}  # host:port of a counted database -> its proxy


@dataclass
class BlogDatabase:
    db: postgres.Database  # straight to the server
    counted: postgres.Database  # through the counting proxy

    def drop(self) -> None:
        with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")


def received(db: postgres.Database) -> int:
    """Statements the server received from ``db`` so far (a database made by blog_database)."""
    return _COUNTERS[db.host].count


def blog_database(*, users: int, posts: int, comments: int) -> BlogDatabase | None:
    """A fresh ``bench_pg_blog`` database with the blog seeded, or None if there is no server."""
    try:
        admin = psycopg.connect(f"{SERVER}/postgres", autocommit=True, connect_timeout=2)
    except psycopg.OperationalError as error:
        print(f"(PostgreSQL not reachable at {SERVER}: {error}; its rows skipped)")
        return None
    with admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DATABASE}")
    url = f"{SERVER}/{DATABASE}"
    db = postgres.Database.from_url(url, max_size=4)

    async def seed() -> None:
        await blog_seed.seed(db, users=users, posts=posts, comments=comments)
        await db.execute("ANALYZE")

    batchy.run(seed())
    server = urlsplit(SERVER)
    counter = StatementCounter(server.hostname or "127.0.0.1", server.port or 5432)
    counted = postgres.Database.from_url(counter.url(url), max_size=4)
    _COUNTERS[counted.host] = counter
    return BlogDatabase(db, counted)
