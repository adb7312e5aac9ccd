"""Fixtures of the job tests: one ``backend`` fixture run on memory, SQLite, Redis (db 11), PostgreSQL."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any, NoReturn

import pytest

from batchy.jobs import Backend, MemoryBackend, Queue, SQLiteBackend, Worker

#: The Redis database of the tests (BATCHY_TEST_REDIS_DB: another, beside other runs).
REDIS_DB = int(os.environ.get("BATCHY_TEST_REDIS_DB", "11"))
#: The PostgreSQL database of the tests; each test gets a schema of its own in it.
POSTGRES_DSN = os.environ.get("BATCHY_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


def _postgres_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1):
            return True
    except OSError:
        return False


def missing(message: str) -> NoReturn:
    """What a test needs of a server is missing: under CI=true it fails, else it skips
    (visibly); ``make services`` sets up what it says."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{message}; CI needs every server as `make services` sets it up")
    pytest.skip(message)


@pytest.fixture
def postgres_dsn() -> str:
    """The test database's DSN; under CI=true a missing server fails, else the test skips."""
    if "127.0.0.1:5432" in POSTGRES_DSN and not _postgres_reachable():
        missing("postgres is not reachable on 127.0.0.1:5432")
    return POSTGRES_DSN


@pytest.fixture
def postgres_schema(postgres_dsn: str) -> Iterator[str]:
    """A fresh schema name (``batchy_test_<hex>``), dropped with everything in it after the test."""
    schema = f"batchy_test_{uuid.uuid4().hex[:12]}"
    yield schema
    import psycopg

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        # A connection the test left in a transaction holds locks on the schema:
        # say which, rather than wait for it forever.
        conn.execute("SET lock_timeout = '10s'")
        try:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        except psycopg.errors.LockNotAvailable:
            rows = conn.execute(
                "SELECT pid, state, xact_start, query_start, wait_event, query "
                "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchall()
            raise AssertionError(
                f"schema {schema} could not be dropped: sessions left open hold its locks: {rows}"
            ) from None


@pytest.fixture
async def postgres_app_store(postgres_dsn: str, postgres_schema: str) -> AsyncIterator[Any]:
    """A PostgreSQL store, migrated, beside an application table ``users (id int)`` in its schema."""
    import psycopg

    from batchy_contrib.jobs.postgres import PostgresBackend

    backend = PostgresBackend(postgres_dsn, schema=postgres_schema)
    await backend.migrate()
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await conn.execute(f'CREATE TABLE "{postgres_schema}".users (id int PRIMARY KEY)')
    yield backend
    await backend.close()


@pytest.fixture(params=["memory", "sqlite", "redis", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[Backend]:
    if request.param == "memory":
        store: Backend = MemoryBackend()
    elif request.param == "sqlite":
        store = SQLiteBackend(tmp_path / "jobs.db")
    elif request.param == "postgres":
        from batchy_contrib.jobs.postgres import PostgresBackend

        store = PostgresBackend(
            request.getfixturevalue("postgres_dsn"),
            schema=request.getfixturevalue("postgres_schema"),
        )
    else:
        host, port = request.getfixturevalue("redis_server")
        from batchy_contrib.jobs.redis import RedisBackend

        store = RedisBackend(
            f"redis://{host}:{port}/{REDIS_DB}", prefix=f"test:{uuid.uuid4().hex[:8]}:"
        )
    yield store
    if request.param == "redis":
        keys = [k async for k in store.redis.scan_iter(match=store.prefix + "*")]  # type: ignore[attr-defined]
        if keys:
            await store.redis.delete(*keys)  # type: ignore[attr-defined]
    await store.close()


@pytest.fixture
def queue(backend: Backend) -> Queue:
    return Queue(backend)


def declared(queue: Queue) -> Queue:
    """``queue`` with a job type declared: a worker of a queue of none refuses to run."""

    @queue.job(name="noop")
    async def noop() -> None:
        return None

    return queue


def fast_worker(queue: Queue, **options):
    """A worker with test-sized intervals."""
    options.setdefault("poll_interval", 0.02)
    options.setdefault("lease", 2.0)
    options.setdefault("concurrency", 10)
    return Worker(queue, **options)


class FaultyStore(MemoryBackend):
    """A memory store that awaits ``fault(step)`` before each step a worker takes
    (its turn, heartbeat, counters, goodbye): a subclass raises or dawdles there."""

    async def fault(self, step: str) -> None:
        return None

    async def cycle(self, *args: Any) -> Any:
        await self.fault("cycle")
        return await super().cycle(*args)

    async def heartbeat(self, *args: Any) -> Any:
        await self.fault("heartbeat")
        return await super().heartbeat(*args)

    async def add_counts(self, *args: Any) -> None:
        await self.fault("add_counts")
        await super().add_counts(*args)

    async def forget_worker(self, *args: Any) -> None:
        await self.fault("forget_worker")
        await super().forget_worker(*args)
