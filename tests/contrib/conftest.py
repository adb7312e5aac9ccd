"""Fixtures for the data-source tests: private MariaDB and PostgreSQL databases, SQLite files, dead servers."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from batchy_contrib.sql import mysql, postgres, sqlite

HERE = Path(__file__).resolve().parent
BLOG = HERE.parents[1] / "examples" / "blog"
for path in (HERE, BLOG):  # contrib_helpers, and the blog example's modules
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from contrib_helpers import PG_HOST, PG_PORT, Blackhole, Statements, pg_url  # noqa: E402

# One database per test session: tests of other sessions on the same server
# (and the demo's blog_* tables in `test`) never see each other's tables.
DATABASE = f"batchy_contrib_{os.getpid()}"


@pytest.fixture(scope="session")
def _mysql_database() -> Iterator[str]:
    import pymysql

    try:
        conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", connect_timeout=2)
    except pymysql.err.OperationalError:
        yield DATABASE  # the `mariadb` fixture skips or fails the test
        return
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
    try:
        yield DATABASE
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        conn.close()


#: The PostgreSQL session database's own case-insensitive collations (ICU, nondeterministic):
#: case only, and case and accents.
PG_SETUP = [
    "CREATE EXTENSION IF NOT EXISTS citext",
    "CREATE COLLATION batchy_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
    "CREATE COLLATION batchy_ci_ai (provider = icu, locale = 'und-u-ks-level1', deterministic = false)",
]


@pytest.fixture(scope="session")
def _postgres_database() -> Iterator[str]:
    """The session's PostgreSQL database (the same name as MariaDB's), dropped at the end."""
    import psycopg

    try:
        admin = psycopg.connect(
            f"postgresql://postgres@{PG_HOST}:{PG_PORT}/postgres",
            autocommit=True,
            connect_timeout=2,
        )
    except psycopg.OperationalError:
        yield DATABASE  # the `postgres_server` fixture skips or fails the test
        return
    with admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DATABASE}")
        with psycopg.connect(pg_url(DATABASE, counted=False), autocommit=True) as conn:
            for statement in PG_SETUP:
                conn.execute(statement)
        try:
            yield DATABASE
        finally:
            admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")


@pytest.fixture
def postgres_url(postgres_server: tuple[str, int], _postgres_database: str) -> str:
    """The session database, through the proxy that counts the statements the server receives."""
    return pg_url(_postgres_database)


@pytest.fixture
async def postgres_db(postgres_url: str) -> AsyncIterator[postgres.Database]:
    db = await postgres.connect(postgres_url, max_size=4)
    yield db
    await db.close()


@pytest.fixture
def mysql_url(mariadb: tuple[str, int], _mysql_database: str) -> str:
    host, port = mariadb
    return f"mysql://root@{host}:{port}/{_mysql_database}"


@pytest.fixture
async def mysql_db(mysql_url: str) -> AsyncIterator[mysql.Database]:
    db = await mysql.connect(mysql_url, minsize=1, maxsize=4)
    yield db
    await db.close()


@pytest.fixture
async def sqlite_db(tmp_path: Path) -> AsyncIterator[sqlite.Database]:
    db = sqlite.Database(str(tmp_path / "test.db"), trace=Statements())
    yield db
    await db.close()


@pytest.fixture(params=["sqlite", "mysql", "postgres"])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """The same tests on every backend: they must behave alike."""
    if request.param == "sqlite":
        database: Any = sqlite.Database(str(tmp_path / "test.db"), trace=Statements())
    elif request.param == "postgres":
        database = await postgres.connect(request.getfixturevalue("postgres_url"), max_size=4)
    else:
        url = request.getfixturevalue("mysql_url")
        database = await mysql.connect(url, minsize=1, maxsize=4)
    yield database
    await database.close()


@pytest.fixture
def blackhole_port() -> Iterator[int]:
    hole = Blackhole()
    yield hole.port
    hole.close()
