"""Migrating a live PostgreSQL job schema: it never stalls the queue behind an open transaction.

A migration alters tables that workers and applications use. PostgreSQL grants
locks in order: an ``ALTER TABLE`` waiting for an application's open transaction
makes every later statement on that table wait behind it, so a migration that
waits without a limit stops every worker's turn and every enqueue for as long as
that transaction stays open.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest

from batchy.jobs import Envelope
from batchy_contrib.jobs import _postgres_schema
from batchy_contrib.jobs.postgres import MigrationTimeout, PostgresBackend, SchemaVersionError

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attempts that wait 0.2 s for a lock, for 2 s in all (1 s and 60 s in use)."""
    monkeypatch.setattr(_postgres_schema, "LOCK_WAIT", 0.2)
    monkeypatch.setattr(_postgres_schema, "MIGRATE_FOR", 2.0)


@pytest.fixture
async def at_version_8(postgres_dsn: str, postgres_schema: str) -> AsyncIterator[str]:
    """A schema taken back to version 8, whose migration alters the jobs table."""
    store = PostgresBackend(postgres_dsn, schema=postgres_schema)
    await store.push([Envelope("old", "default", "{}")], time.time())
    await store.close()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f'ALTER TABLE "{postgres_schema}".jobs DROP CONSTRAINT jobs_claimed')
        conn.execute(f'UPDATE "{postgres_schema}".version SET version = 8')
    yield postgres_schema


@pytest.fixture
def app_transaction(postgres_dsn: str, at_version_8: str) -> Iterator[psycopg.Connection[object]]:
    """An application's transaction, left open, that enqueued into the jobs table."""
    conn = psycopg.connect(postgres_dsn)
    conn.execute(
        f'INSERT INTO "{at_version_8}".jobs (id, queue, payload, due) '
        "VALUES ('app', 'default', '{}', 0)"
    )
    yield conn
    conn.close()


def _version(dsn: str, schema: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(f'SELECT version FROM "{schema}".version').fetchone()
    assert row is not None
    return int(row[0])


async def _slowest_read(dsn: str, schema: str, until: asyncio.Future[object]) -> float:
    """The longest a plain read of the jobs table took while ``until`` ran (a worker's view)."""
    slowest = 0.0
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while not until.done():
            began = time.monotonic()
            await conn.execute(f'SELECT count(*) FROM "{schema}".jobs')
            slowest = max(slowest, time.monotonic() - began)
            await asyncio.sleep(0.02)
    return slowest


@pytest.mark.usefixtures("quick")
async def test_a_migration_behind_an_open_transaction_gives_up_and_names_it(
    postgres_dsn: str, at_version_8: str, app_transaction: psycopg.Connection[object]
) -> None:
    """Before, the migration waited for the transaction for ever, and so did every read
    of the jobs table behind it: the whole queue stood still."""
    store = PostgresBackend(postgres_dsn, schema=at_version_8)
    began = time.monotonic()
    migrating = asyncio.ensure_future(asyncio.wait_for(store.migrate(), 20))
    try:
        slowest = await _slowest_read(postgres_dsn, at_version_8, migrating)
        with pytest.raises(MigrationTimeout) as raised:
            await migrating
    finally:
        await store.close()
    assert time.monotonic() - began < 5  # 2 s of attempts, not 20 s (nor for ever)
    assert slowest < 1.0  # each attempt held the table up for 0.2 s at most
    message = str(raised.value)
    pid = app_transaction.info.backend_pid
    assert message.startswith(
        f"cannot migrate job schema {at_version_8!r} from version 8 to 10: a lock on its tables "
        "was not granted within 0.2 s in any of "
    )
    assert f"pid {pid} (idle in transaction" in message
    assert f"holds a lock on {at_version_8}.jobs. End that transaction" in message
    assert "(await backend.migrate()) while no transaction holds" in message
    assert isinstance(raised.value, SchemaVersionError)  # what callers already catch
    # Nothing of the migration stayed: the schema is still version 8, and usable as such.
    assert _version(postgres_dsn, at_version_8) == 8
    app_transaction.commit()  # the application ends its transaction: the migration goes through
    again = PostgresBackend(postgres_dsn, schema=at_version_8)
    await again.migrate()
    await again.close()
    assert _version(postgres_dsn, at_version_8) == 10


async def test_a_migration_goes_through_once_the_transaction_ends(
    postgres_dsn: str,
    at_version_8: str,
    app_transaction: psycopg.Connection[object],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_postgres_schema, "LOCK_WAIT", 0.2)
    store = PostgresBackend(postgres_dsn, schema=at_version_8)
    migrating = asyncio.ensure_future(asyncio.wait_for(store.migrate(), 20))
    try:
        await asyncio.sleep(1.0)  # a few attempts gave up meanwhile
        assert not migrating.done()
        await asyncio.to_thread(app_transaction.commit)
        await migrating
    finally:
        await store.close()
    assert _version(postgres_dsn, at_version_8) == 10


@pytest.mark.usefixtures("quick")
def test_a_blocking_connection_migrates_the_same_way(
    postgres_dsn: str, at_version_8: str, app_transaction: psycopg.Connection[object]
) -> None:
    """The blocking path (the sync enqueue's first connection) gives up the same way."""
    names = _postgres_schema.Names(at_version_8)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        began = time.monotonic()
        with pytest.raises(MigrationTimeout, match=f"pid {app_transaction.info.backend_pid} "):
            _postgres_schema.ensure_sync(conn, names)
        assert time.monotonic() - began < 5
        app_transaction.commit()
        _postgres_schema.ensure_sync(conn, names)
    assert _version(postgres_dsn, at_version_8) == 10
