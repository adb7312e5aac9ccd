"""Migrating a live PostgreSQL job schema: it never stalls the queue behind an open transaction.

A migration alters tables that workers and applications use. PostgreSQL grants
locks in order: an ``ALTER TABLE`` waiting for an application's open transaction
makes every later statement on that table wait behind it, so a migration that
waits without a limit stops every worker's turn and every enqueue for as long as
that transaction stays open.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator

import psycopg
import pytest
from psycopg import sql

from batchy.jobs import Envelope, Outcome
from batchy_contrib.jobs import _postgres_schema, _postgres_sql
from batchy_contrib.jobs._postgres_sql import VERSION
from batchy_contrib.jobs.postgres import MigrationTimeout, PostgresBackend, SchemaVersionError

from .conftest import missing

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


@pytest.fixture
def prepared_transaction(postgres_dsn: str, at_version_8: str) -> Iterator[str]:
    """An application's transaction that enqueued into the jobs table and was prepared
    (two-phase commit), with a quote in its gid: no session runs it, its locks stay."""
    gid = f"app's {at_version_8}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        if conn.execute("SHOW max_prepared_transactions").fetchone() == ("0",):
            missing("PostgreSQL refuses PREPARE TRANSACTION (max_prepared_transactions = 0)")
        conn.execute("BEGIN")
        conn.execute(
            f'INSERT INTO "{at_version_8}".jobs (id, queue, payload, due) '
            "VALUES ('app', 'default', '{}', 0)"
        )
        conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(gid))
    yield gid
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_prepared_xacts WHERE gid = %s", (gid,)).fetchone():
            conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(gid))


def _version(dsn: str, schema: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(f'SELECT version FROM "{schema}".version').fetchone()
    assert row is not None
    return int(row[0])


async def _reads(
    dsn: str, schema: str, until: asyncio.Future[object], longer_than: str = "1ms"
) -> tuple[int, int]:
    """A worker's view while ``until`` runs: how many plain reads of the jobs table it
    made, and how many of them waited ``longer_than`` for a lock.

    A read waits for a lock only behind a lock request that conflicts with it (a
    migration's ``ALTER TABLE``). The server tells those reads apart, through a
    ``lock_timeout`` that ends their wait: a read's duration would count a busy
    machine's delays as waits too.
    """
    reads = held_up = 0
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(sql.SQL("SET lock_timeout = {}").format(longer_than))
        while not until.done():
            try:
                await conn.execute(f'SELECT count(*) FROM "{schema}".jobs')
            except psycopg.errors.LockNotAvailable:
                held_up += 1
            reads += 1
            await asyncio.sleep(0.01)
    return reads, held_up


def _age(message: str, what: str) -> int:
    """The age in whole seconds that ``message`` gives after ``what``."""
    found = re.search(re.escape(what) + r"(\d+) s", message)
    assert found, (what, message)
    return int(found.group(1))


@pytest.mark.usefixtures("quick")
async def test_a_migration_behind_an_open_transaction_gives_up_and_names_it(
    postgres_dsn: str, at_version_8: str, app_transaction: psycopg.Connection[object]
) -> None:
    """Before, the migration waited for the transaction for ever, and so did every read
    of the jobs table behind it: the whole queue stood still."""
    pid = app_transaction.info.backend_pid
    # The transaction is older than LOCK_WAIT from the first attempt on (a lower
    # bound, whatever the machine's load): no attempt may queue behind it.
    await asyncio.sleep(0.3)
    stores = [PostgresBackend(postgres_dsn, schema=at_version_8) for _ in range(3)]
    began = time.monotonic()
    # Three processes start at once (workers of the new release), each migrating.
    migrating = asyncio.ensure_future(
        asyncio.wait_for(asyncio.gather(*(s.migrate() for s in stores), return_exceptions=True), 20)
    )
    try:
        reads, held_up = await _reads(postgres_dsn, at_version_8, migrating)
        errors = await migrating
    finally:
        for store in stores:
            await store.close()
    # 2 s of attempts, not the 20 s of wait_for (nor for ever); the margin is a busy
    # machine's: an attempt's pause never runs past MIGRATE_FOR.
    assert time.monotonic() - began < 10
    # No attempt asked for the table's lock while the old transaction held it, so
    # no read waited behind one (before, every read waited as long as the migration).
    assert reads > 0 and held_up == 0, (reads, held_up)
    assert all(isinstance(e, MigrationTimeout) for e in errors), errors
    message = str(errors[0])
    assert message.startswith(
        f"cannot migrate job schema {at_version_8!r} from version 8 to {VERSION}: other transactions "
        "held its tables through "
    )
    assert " attempts over 2 s (an attempt waits at most 0.2 s for a lock, and none while a " in (
        message
    )
    # It held the table through the 2 s of attempts (and more on a busy machine).
    assert _age(message, f"pid {pid} (idle in transaction for ") >= 2
    assert re.search(r"idle in transaction for \d+ s, last query 'INSERT INTO ", message)
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
    # The transaction is new: the first attempts ask for the table's lock, and
    # give up after LOCK_WAIT (0.2 s), when the server ends their wait.
    reading = asyncio.ensure_future(_reads(postgres_dsn, at_version_8, migrating, "1s"))
    try:
        await asyncio.sleep(2.0)  # a few attempts gave up meanwhile
        assert not migrating.done()
        await asyncio.to_thread(app_transaction.commit)
        await migrating
    finally:
        await store.close()
    reads, held_up = await reading
    # No read waited 1 s behind an attempt (5 times LOCK_WAIT, for a busy machine);
    # one that waited without a limit held every read up until the commit, 2 s.
    assert reads > 0 and held_up == 0, (reads, held_up)
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
async def test_a_migration_behind_a_prepared_transaction_gives_up_and_names_it(
    postgres_dsn: str, at_version_8: str, prepared_transaction: str
) -> None:
    """A prepared transaction's locks have no session: the look at the tables' holders
    missed it, every attempt waited for its lock (and every read of the jobs table
    behind it), and MigrationTimeout named nobody."""
    await asyncio.sleep(0.3)  # prepared longer ago than LOCK_WAIT
    store = PostgresBackend(postgres_dsn, schema=at_version_8)
    migrating = asyncio.ensure_future(asyncio.wait_for(store.migrate(), 20))
    try:
        reads, held_up = await _reads(postgres_dsn, at_version_8, migrating)
        with pytest.raises(MigrationTimeout) as raised:
            await migrating
    finally:
        await store.close()
    # No attempt asked for the tables' locks: no read waited behind one.
    assert reads > 0 and held_up == 0, (reads, held_up)
    message = str(raised.value)
    gid = "'app''s " + at_version_8 + "'"  # as SQL spells it
    named = f"worker and enqueue behind it. prepared transaction {gid} (prepared "
    assert _age(message, named) >= 2  # through the 2 s of attempts (more on a busy machine)
    message = re.sub(r"\(prepared \d+ s ago", "(prepared 2 s ago", message)
    assert (
        f"worker and enqueue behind it. prepared transaction {gid} (prepared 2 s ago by role "
        f"postgres on database test) holds a lock on {at_version_8}.jobs. Finish prepared "
        f"transaction {gid} from a session on database test: COMMIT PREPARED {gid} or "
        f"ROLLBACK PREPARED {gid}, whichever its transaction manager meant (no session runs "
        "it: pg_terminate_backend cannot end it), or migrate at deploy time " in message
    )
    assert _version(postgres_dsn, at_version_8) == 8
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"COMMIT PREPARED {gid}")  # as the message says
    again = PostgresBackend(postgres_dsn, schema=at_version_8)
    await again.migrate()
    await again.close()
    assert _version(postgres_dsn, at_version_8) == VERSION


@pytest.mark.usefixtures("quick")
async def test_a_migration_that_alters_no_table_does_not_wait_for_the_tables_holders(
    postgres_dsn: str,
    at_version_8: str,
    app_transaction: psycopg.Connection[object],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Version 12 to 13 only replaces a function: an open transaction on the jobs table
    does not stand in its way (the first look at the tables' holders made it wait
    for that transaction, then give up). Version 15 builds indexes, so the test
    plays a release of version 13."""
    monkeypatch.setattr(_postgres_sql, "VERSION", 13)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        # Version 12 as the test's schema has it, but for the stamp (12 to 13 is
        # idempotent: CREATE OR REPLACE).
        conn.execute(f'UPDATE "{at_version_8}".version SET version = 12')
    await asyncio.sleep(0.3)  # the application's transaction is older than LOCK_WAIT
    store = PostgresBackend(postgres_dsn, schema=at_version_8)
    try:
        with caplog.at_level(logging.WARNING, "batchy.jobs"):
            await asyncio.wait_for(store.migrate(), 5)
    finally:
        await store.close()
    # The first attempt went through: none waited or was held back (each failed
    # attempt logs this line once), whatever the time it took on a busy machine.
    assert "migration waits for a lock" not in caplog.text
    assert _version(postgres_dsn, at_version_8) == 13


class Autovacuum:
    """A session that holds the jobs table as an autovacuum worker does, and gives way as
    the server makes one (but to prevent wraparound): it ends once a lock request on
    the table has waited ``deadlock_timeout``. A real worker cannot be summoned on cue
    (nor at all where autovacuum is off): a migration's connection sees this session
    as one through :func:`seen_by`."""

    def __init__(self, dsn: str, schema: str, query: str) -> None:
        self.dsn, self.query = dsn, query
        self.table = f'"{schema}".jobs'
        self.conn = psycopg.connect(dsn)
        self.conn.execute(f"LOCK TABLE {self.table} IN SHARE UPDATE EXCLUSIVE MODE")
        self.pid = self.conn.info.backend_pid
        self.cancelled = False
        self._stop = threading.Event()
        self._watch = threading.Thread(target=self._give_way)
        if not query.endswith("(to prevent wraparound)"):
            self._watch.start()

    def _give_way(self) -> None:
        waited = (
            "SELECT count(*) FROM pg_locks WHERE relation = %s::regclass AND NOT granted "
            "AND clock_timestamp() - waitstart >= current_setting('deadlock_timeout')::interval"
        )
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.wait(0.01):
                if conn.execute(waited, (self.table,)).fetchone() != (0,):
                    self.conn.rollback()
                    self.cancelled = True
                    return

    def close(self) -> None:
        self._stop.set()
        if self._watch.is_alive():
            self._watch.join()
        self.conn.close()


async def seen_by(conn: psycopg.AsyncConnection[object], *workers: Autovacuum) -> None:
    """``conn`` sees ``workers`` as autovacuum workers running their queries: its
    temporary view, which a session's unqualified names find before ``pg_catalog``'s."""
    kind = sql.SQL(" ").join(
        sql.SQL("WHEN {} THEN 'autovacuum worker'").format(w.pid) for w in workers
    )
    query = sql.SQL(" ").join(sql.SQL("WHEN {} THEN {}").format(w.pid, w.query) for w in workers)
    await conn.execute(
        sql.SQL(
            "CREATE TEMP VIEW pg_stat_activity AS SELECT pid, state, xact_start, "
            "CASE pid {kind} ELSE backend_type END AS backend_type, "
            "CASE pid {query} ELSE query END AS query FROM pg_catalog.pg_stat_activity"
        ).format(kind=kind, query=query)
    )


@pytest.fixture
def autovacuum(postgres_dsn: str, at_version_8: str) -> Iterator[Callable[[str], Autovacuum]]:
    """Starts sessions that hold the jobs table as autovacuum workers (``query``)."""
    made: list[Autovacuum] = []

    def start(query: str) -> Autovacuum:
        made.append(Autovacuum(postgres_dsn, at_version_8, query))
        return made[-1]

    yield start
    for worker in made:
        worker.close()


@pytest.mark.usefixtures("quick")
async def test_a_migration_goes_through_an_autovacuum_which_gives_way(
    postgres_dsn: str,
    at_version_8: str,
    autovacuum: Callable[[str], Autovacuum],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An autovacuum worker holding the jobs table counted as an old transaction: the
    attempts held back for it until MigrationTimeout named it, while the server would
    have cancelled it for the migration's lock request. That request must also wait out
    deadlock_timeout, when the server cancels it: one that gave up after LOCK_WAIT
    never got past it."""
    vacuum = autovacuum(f"autovacuum: VACUUM ANALYZE {at_version_8}.jobs")
    await asyncio.sleep(0.3)  # older than LOCK_WAIT
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await seen_by(conn, vacuum)
        with caplog.at_level(logging.WARNING, "batchy.jobs"):
            await asyncio.wait_for(
                _postgres_schema.ensure_async(conn, _postgres_schema.Names(at_version_8)), 10
            )
    assert vacuum.cancelled  # it gave way to the migration's lock request
    # One attempt, that waited deadlock_timeout and went through (not 2 s of attempts,
    # and a timeout): a failed attempt logs this line.
    assert "migration waits for a lock" not in caplog.text
    assert _version(postgres_dsn, at_version_8) == VERSION


@pytest.mark.usefixtures("quick")
@pytest.mark.parametrize("wraparound", [False, True], ids=["autovacuum", "to prevent wraparound"])
async def test_a_migration_names_the_transactions_in_its_way_not_an_autovacuum(
    postgres_dsn: str,
    at_version_8: str,
    app_transaction: psycopg.Connection[object],
    autovacuum: Callable[[str], Autovacuum],
    wraparound: bool,
) -> None:
    """Beside an application's old transaction, an autovacuum worker is not named (it
    would have given way), and one that vacuums to prevent wraparound is: the server
    does not cancel that one."""
    query = f"autovacuum: VACUUM ANALYZE {at_version_8}.jobs"
    if wraparound:
        query = f"autovacuum: VACUUM {at_version_8}.jobs (to prevent wraparound)"
    vacuum = autovacuum(query)
    await asyncio.sleep(0.3)
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await seen_by(conn, vacuum)
        with pytest.raises(MigrationTimeout) as raised:
            await _postgres_schema.ensure_async(conn, _postgres_schema.Names(at_version_8))
    message = str(raised.value)
    assert f"pid {app_transaction.info.backend_pid} (idle in transaction for " in message
    assert (f"pid {vacuum.pid} (idle in transaction for " in message) == wraparound
    assert not vacuum.cancelled  # nothing asked for the locks: the transaction held them


@pytest.fixture
async def at_version_14(postgres_dsn: str, postgres_schema: str) -> AsyncIterator[str]:
    """A schema taken back to version 14 (its listings' indexes), a job of each kind in it."""
    store = PostgresBackend(postgres_dsn, schema=postgres_schema)
    await store.push([Envelope(f"job{i}", "default", "{}") for i in range(4)], time.time())
    claimed = await store.cycle([], ["default"], 3, "w", 60.0, time.time())
    ends = [
        Outcome(claimed[0].id, "done", result="1", keep=3600.0, token=claimed[0].token),
        Outcome(claimed[1].id, "dead", reason="boom", traceback="", token=claimed[1].token),
    ]
    await store.cycle(ends, ["default"], 0, "w", 60.0, time.time())
    await store.close()
    s = f'"{postgres_schema}"'
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"DROP INDEX {s}.dead_died_id, {s}.results_expires_id")
        conn.execute(f"CREATE INDEX dead_died ON {s}.dead (died)")
        conn.execute(f"CREATE INDEX results_expires ON {s}.results (expires)")
        conn.execute(f"UPDATE {s}.version SET version = 14")
    yield postgres_schema


def _indexes(
    dsn: str, schema: str, tables: tuple[str, ...] = ("jobs", "dead", "results")
) -> dict[str, str]:
    """The schema's indexes of ``tables`` but primary keys: {name: columns}."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s "
            "AND tablename = ANY(%s) AND indexname NOT LIKE '%%_pkey'",
            (schema, list(tables)),
        ).fetchall()
    return {name: definition.split(" USING btree ")[1] for name, definition in rows}


async def test_the_jobs_table_has_the_indexes_the_worker_needs_and_no_more(
    postgres_dsn: str, postgres_schema: str
) -> None:
    """Every index of the jobs table is written by every claim or finish of every job
    (a claim sets the state and lease, a finish deletes the row): each one taxes the
    worker's claim/finish path, whose throughput is the store's point. Measure a new
    one on the no-op benchmark first, and list it here only if the jobs a second
    allow it (an index of running jobs by id, for an operator's page, took server
    CPU per job from 42.5 to 48.0 µs and 13% of the jobs a second: the page reads
    ``jobs_lease`` and sorts instead)."""
    store = PostgresBackend(postgres_dsn, schema=postgres_schema)
    try:
        await store.migrate()
    finally:
        await store.close()
    assert _indexes(postgres_dsn, postgres_schema, ("jobs",)) == {  # and jobs_pkey (id)
        "jobs_ready": "(queue, due, seq) WHERE (state = 0)",
        "jobs_lease": "(lease) WHERE (state = 1)",
        "jobs_okey": "(okey, seq) WHERE (okey IS NOT NULL)",
        "jobs_blocked": "(seq) WHERE (state = 2)",
    }


async def test_a_version_14_schema_gets_indexes_in_the_order_of_its_listings(
    postgres_dsn: str, at_version_14: str
) -> None:
    """Version 15 indexes dead and done jobs by (time, id), and drops the indexes of the
    time alone; it adds no index of the jobs table (each would be written by every
    claim). An index an operator built beforehand (CONCURRENTLY, so that the migration
    need not build it while writers wait) is kept."""
    s = f'"{at_version_14}"'
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE INDEX CONCURRENTLY dead_died_id ON {s}.dead (died, id)")
        (built,) = conn.execute(f"SELECT '{s}.dead_died_id'::regclass::oid").fetchone() or (0,)
    store = PostgresBackend(postgres_dsn, schema=at_version_14)
    try:
        await store.migrate()
        assert _version(postgres_dsn, at_version_14) == VERSION == 16
        assert _indexes(postgres_dsn, at_version_14) == {
            "jobs_ready": "(queue, due, seq) WHERE (state = 0)",
            "jobs_lease": "(lease) WHERE (state = 1)",
            "jobs_okey": "(okey, seq) WHERE (okey IS NOT NULL)",
            "jobs_blocked": "(seq) WHERE (state = 2)",
            "dead_died_id": "(died, id)",
            "results_expires_id": "(expires, id)",
        }
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            assert conn.execute(f"SELECT '{s}.dead_died_id'::regclass::oid").fetchone() == (built,)
        now = time.time()
        pages = {
            state: [j.id for j in (await store.list_jobs(state, now))[0]]
            for state in ("queued", "running", "dead", "done")
        }
        assert pages == {
            "queued": ["job3"],
            "running": ["job2"],
            "dead": ["job1"],
            "done": ["job0"],
        }
    finally:
        await store.close()


async def test_a_new_schema_has_the_indexes_a_migrated_one_has(
    postgres_dsn: str, postgres_schema: str, at_version_14: str
) -> None:
    fresh = PostgresBackend(postgres_dsn, schema=postgres_schema + "_new")
    try:
        await fresh.migrate()
        migrated = PostgresBackend(postgres_dsn, schema=at_version_14)
        await migrated.migrate()
        await migrated.close()
        assert _indexes(postgres_dsn, postgres_schema + "_new") == _indexes(
            postgres_dsn, at_version_14
        )
    finally:
        await fresh.close()
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{postgres_schema}_new" CASCADE')


@pytest.mark.usefixtures("quick")
async def test_a_migration_to_15_waits_for_nobody_reading_the_kept_results(
    postgres_dsn: str, at_version_14: str
) -> None:
    """Version 15 replaces an index of ``results`` and of ``dead``: its DROP INDEX locks
    the table out of every reader too. An application's transaction that read a
    result, left open, is waited for as one that enqueued is, and named."""
    app = psycopg.connect(postgres_dsn)
    try:
        app.execute(f'SELECT result FROM "{at_version_14}".results')
        await asyncio.sleep(0.3)  # older than LOCK_WAIT
        store = PostgresBackend(postgres_dsn, schema=at_version_14)
        try:
            with pytest.raises(MigrationTimeout) as raised:
                await asyncio.wait_for(store.migrate(), 20)
            message = str(raised.value)
            assert f"pid {app.info.backend_pid} (idle in transaction for " in message
            assert f"holds a lock on {at_version_14}.results. End that transaction" in message
            assert _version(postgres_dsn, at_version_14) == 14
            app.commit()
            await store.migrate()
        finally:
            await store.close()
    finally:
        app.close()
    assert _version(postgres_dsn, at_version_14) == VERSION
