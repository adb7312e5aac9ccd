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
from batchy_contrib.jobs._postgres_sql import VERSION
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


async def _reads(dsn: str, schema: str, until: asyncio.Future[object]) -> tuple[float, float]:
    """A worker's view while ``until`` runs: the longest a plain read of the jobs table
    took, and the share of the time such reads spent waiting."""
    slowest = waited = 0.0
    began = time.monotonic()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while not until.done():
            start = time.monotonic()
            await conn.execute(f'SELECT count(*) FROM "{schema}".jobs')
            took = time.monotonic() - start
            slowest = max(slowest, took)
            waited += max(0.0, took - 0.005)
            await asyncio.sleep(0.01)
    return slowest, waited / (time.monotonic() - began)


@pytest.mark.usefixtures("quick")
async def test_a_migration_behind_an_open_transaction_gives_up_and_names_it(
    postgres_dsn: str, at_version_8: str, app_transaction: psycopg.Connection[object]
) -> None:
    """Before, the migration waited for the transaction for ever, and so did every read
    of the jobs table behind it: the whole queue stood still."""
    stores = [PostgresBackend(postgres_dsn, schema=at_version_8) for _ in range(3)]
    began = time.monotonic()
    # Three processes start at once (workers of the new release), each migrating.
    migrating = asyncio.ensure_future(
        asyncio.wait_for(asyncio.gather(*(s.migrate() for s in stores), return_exceptions=True), 20)
    )
    try:
        slowest, waiting = await _reads(postgres_dsn, at_version_8, migrating)
        errors = await migrating
    finally:
        for store in stores:
            await store.close()
    assert time.monotonic() - began < 5  # 2 s of attempts, not 20 s (nor for ever)
    assert slowest < 0.5  # an attempt holds the table up for 0.2 s at most
    assert waiting < 0.1, waiting  # and none while the old transaction holds it
    assert all(isinstance(e, MigrationTimeout) for e in errors), errors
    message = str(errors[0])
    pid = app_transaction.info.backend_pid
    assert message.startswith(
        f"cannot migrate job schema {at_version_8!r} from version 8 to {VERSION}: other sessions "
        "held its tables through "
    )
    assert " attempts over 2 s (an attempt waits at most 0.2 s for a lock, and none while a " in (
        message
    )
    assert f"pid {pid} (idle in transaction for 2 s" in message
    assert f"holds a lock on {at_version_8}.jobs. End that transaction" in message
    assert "(await backend.migrate()) while no transaction holds" in message
    assert isinstance(errors[0], SchemaVersionError)  # what callers already catch
    # Nothing of the migration stayed: the schema is still version 8, and usable as such.
    assert _version(postgres_dsn, at_version_8) == 8
    app_transaction.commit()  # the application ends its transaction: the migration goes through
    again = PostgresBackend(postgres_dsn, schema=at_version_8)
    await again.migrate()
    await again.close()
    assert _version(postgres_dsn, at_version_8) == VERSION


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
    assert _version(postgres_dsn, at_version_8) == VERSION


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
    assert _version(postgres_dsn, at_version_8) == VERSION


@pytest.mark.usefixtures("quick")
def test_a_blocking_push_checks_the_schema_again_after_a_failed_migration(
    postgres_dsn: str, at_version_8: str, app_transaction: psycopg.Connection[object]
) -> None:
    """Its connection stayed open after the MigrationTimeout, so the next push skipped
    the schema check and wrote into a version 8 schema with version 10's statements."""
    store = PostgresBackend(postgres_dsn, schema=at_version_8)
    try:
        for _ in range(2):
            with pytest.raises(MigrationTimeout):
                store.push_sync([Envelope("new", "default", "{}")], time.time())
        assert _version(postgres_dsn, at_version_8) == 8
        app_transaction.commit()
        assert store.push_sync([Envelope("new", "default", "{}")], time.time()) == [True]
        assert _version(postgres_dsn, at_version_8) == VERSION
    finally:
        asyncio.run(store.close())


@pytest.mark.usefixtures("quick")
async def test_a_migration_that_alters_no_table_does_not_wait_for_the_tables_holders(
    postgres_dsn: str, at_version_8: str, app_transaction: psycopg.Connection[object]
) -> None:
    """Version 9 to 10 only replaces functions: an open transaction on the jobs table
    does not stand in its way (the first look at the tables' holders made it wait
    for that transaction, then give up)."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        # Version 9 as the test's schema has it, but for the stamp (9 to 10 is
        # idempotent: CREATE OR REPLACE and ALTER FUNCTION).
        conn.execute(f'UPDATE "{at_version_8}".version SET version = 9')
    await asyncio.sleep(0.3)  # the application's transaction is older than LOCK_WAIT
    store = PostgresBackend(postgres_dsn, schema=at_version_8)
    began = time.monotonic()
    try:
        await asyncio.wait_for(store.migrate(), 5)
    finally:
        await store.close()
    assert time.monotonic() - began < 1.0
    assert _version(postgres_dsn, at_version_8) == VERSION
