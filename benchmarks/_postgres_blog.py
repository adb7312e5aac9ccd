"""PostgreSQL for the data-source benchmarks: the blog in a database of its own, statements counted.

:func:`blog_database` creates ``bench_pg_blog`` on the server of
``BATCHY_BENCH_PG`` (dropped again by :meth:`BlogDatabase.drop`), seeds the
blog, and gives two database objects over it: one straight to the server for
the timed renders, and one through the proxy of examples/blog/pg_statements.py
that counts the statements the server receives, for the counted ones (so the
proxy costs the timed renders nothing). :func:`matching_cost` measures what
matching rows to text keys on the server costs over matching them in Python.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg

import batchy
from benchmarks._util import fmt_ms, table

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


# -- what matching text keys on the server costs -----------------------------------------

NAMES = 100_000
#: Batch sizes, and the renders of each timed per contender (more for the short ones).
SIZES = {10: 301, 1_000: 61, 10_000: 21}


def matching_cost(pg: BlogDatabase) -> str:
    """Text keys: ``one()`` (rows matched to keys on the server, by position) against a
    ``query()`` with ``= ANY`` matched in Python (what the loaders did before), in turns."""
    db = pg.db

    async def setup() -> None:
        await db.execute("DROP TABLE IF EXISTS bench_names")
        await db.execute(
            "CREATE TABLE bench_names AS SELECT i AS id, 'name' || i AS name, 'x' AS note"
            f" FROM generate_series(1, {NAMES}) i"
        )
        await db.execute("CREATE UNIQUE INDEX ON bench_names (name)")
        await db.execute("ANALYZE bench_names")

    batchy.run(setup())
    matched = db.one("bench_names", "name")
    in_python = db.query("SELECT * FROM bench_names WHERE name IN {keys}", key="name")
    rng = random.Random(15)
    rows: list[list[Any]] = []

    async def measure() -> None:
        for size, turns in SIZES.items():
            keys = [f"name{rng.randint(1, NAMES * 11 // 10)}" for _ in range(size)]

            async def load(loader: batchy.Loader[Any, Any], keys: list[str] = keys) -> Any:
                async with batchy.scope():
                    return await batchy.gather(*(loader(k) for k in keys))

            assert await load(matched) == await load(in_python)  # and a warm-up
            times: dict[str, list[float]] = {"python": [], "server": []}
            for _ in range(turns):  # in turns, so a burst elsewhere hits both
                for name, loader in (("python", in_python), ("server", matched)):
                    gc.collect()
                    start = time.perf_counter()
                    await load(loader)
                    times[name].append(time.perf_counter() - start)
            py, server = (statistics.median(times[k]) for k in ("python", "server"))
            cost = f"{(server / py - 1) * 100:+.0f}%"
            rows.append([size, turns, fmt_ms(py), fmt_ms(server), cost])

    asyncio.run(measure())
    return table(
        f"text keys on PostgreSQL ({NAMES:,} rows, unique index), medians of renders in "
        "turns: matched in Python (query, = ANY) vs on the server (one, by position)",
        ["keys", "renders", "matched in Python", "matched on the server", "cost"],
        rows,
    )
