"""The PostgreSQL store under a DBA's settings: what ``ALTER ROLE`` or ``ALTER DATABASE ... SET`` gives every session."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest

from batchy.jobs import ConfigError, Envelope
from batchy_contrib.jobs import _postgres_sql
from batchy_contrib.jobs.postgres import PostgresBackend

pytestmark = pytest.mark.timeout(60)

Role = Callable[..., str]


@pytest.fixture
def role(postgres_dsn: str, postgres_schema: str) -> Iterator[Role]:
    """``role(setting=value, ...)``: the DSN of a new role whose sessions start with those
    settings (as ``ALTER ROLE ... SET`` gives them), allowed to create schemas."""
    made: list[str] = []

    def make(**settings: str) -> str:
        name = f"batchy_env_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute(f"CREATE ROLE {name} LOGIN")
            made.append(name)
            admin.execute(f"GRANT CREATE ON DATABASE {admin.info.dbname} TO {name}")
            for key, value in settings.items():
                admin.execute(f"ALTER ROLE {name} SET {key} = {value}")
        return postgres_dsn.replace("postgres@", f"{name}@")

    yield make
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        for name in made:
            admin.execute(f'DROP SCHEMA IF EXISTS "{postgres_schema}" CASCADE')
            admin.execute(f"DROP OWNED BY {name} CASCADE")
            admin.execute(f"DROP ROLE {name}")


# What a DBA may set for every session, and what the store's sessions run with.
HOSTILE = {
    "default_transaction_isolation": "'serializable'",
    "search_path": "pg_temp, public",
    "extra_float_digits": "-15",
    "lock_timeout": "'10ms'",
    "statement_timeout": "'50ms'",
    "idle_in_transaction_session_timeout": "'100ms'",
}
STOCK = {
    "transaction_isolation": "read committed",
    "search_path": "pg_catalog, pg_temp",
    "extra_float_digits": "3",
    "lock_timeout": "0",
    "statement_timeout": "0",
    "idle_in_transaction_session_timeout": "0",
}
_SHOW = ", ".join(f"current_setting('{name}')" for name in STOCK)


async def test_every_connection_of_the_store_runs_with_the_settings_its_steps_need(
    role: Role, postgres_schema: str
) -> None:
    """The pool's, the blocking pool's and the others' connections: a role's
    serializable isolation failed concurrent cycles, heartbeats and pushes with
    serialization errors; its lock_timeout failed commits queued for the server's
    NOTIFY lock; its statement_timeout a busy heartbeat (see the next tests)."""
    store = PostgresBackend(role(**HOSTILE), schema=postgres_schema)
    try:
        await store.push([Envelope("a", "default", "{}")], time.time())
        shown = [await store._all(f"SELECT {_SHOW}")]
        if await store._one("SELECT current_setting('server_version_num')::int") >= 140000:
            assert await store._one("SELECT current_setting('idle_session_timeout')") == "0"
        async with await store._connect() as own:  # the listener's, and the migration's
            shown.append(await (await own.execute(f"SELECT {_SHOW}")).fetchall())
        assert store.push_sync([Envelope("b", "default", "{}")], time.time()) == [True]
        assert store._sync is not None
        with store._sync.connection() as conn:
            shown.append(conn.execute(f"SELECT {_SHOW}").fetchall())
        for rows in shown:
            assert dict(zip(STOCK, rows[0], strict=True)) == STOCK
    finally:
        await store.close()


async def test_the_listening_connection_outlives_a_roles_idle_session_timeout(
    role: Role, postgres_dsn: str, postgres_schema: str
) -> None:
    """The server ended the idle LISTEN connection every 100 ms, and each time the
    process logged a warning and lost the wake-ups sent until it listened again."""
    with psycopg.connect(postgres_dsn) as conn:
        if conn.info.server_version < 140000:
            pytest.skip("idle_session_timeout is new in PostgreSQL 14")
    store = PostgresBackend(role(idle_session_timeout="'100ms'"), schema=postgres_schema)
    try:
        listener = await store._listening()
        await asyncio.sleep(0.5)  # five of the role's timeouts
        assert listener.reconnects == 0
        await store.push([Envelope("a", "default", "{}")], time.time())
        await asyncio.wait_for(store.wait_for_work("w", ["default"], 10.0), 5)
    finally:
        await store.close()


async def _waiting(dsn: str, user: str, kind: str) -> None:
    """Until a session of ``user`` waits for a lock of ``kind`` (pg_locks.locktype)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as watch:
        while not await (
            await watch.execute(
                "SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE NOT l.granted AND l.locktype = %s AND a.usename = %s",
                (kind, user),
            )
        ).fetchone():
            await asyncio.sleep(0.01)


async def test_stores_creating_a_schema_together_under_repeatable_read_find_it_made(
    role: Role, postgres_dsn: str, postgres_schema: str
) -> None:
    """A store that waited for another's creation read the version in a snapshot taken
    before it waited: no schema there, so it created the tables again and failed with
    "relation jobs already exists ... the schema holds tables that are not the store's"."""
    dsn = role(default_transaction_isolation="'repeatable read'")
    user = dsn.split("//")[1].split("@")[0]
    store = PostgresBackend(dsn, schema=postgres_schema)
    other = PostgresBackend(postgres_dsn, schema=postgres_schema)
    try:
        with psycopg.connect(dsn) as first:  # another process, creating it
            first.execute("SELECT pg_advisory_xact_lock(%s)", (store.names.setup_lock,))
            creating = asyncio.ensure_future(store.migrate())
            await _waiting(postgres_dsn, user, "advisory")
            for statement in store.names.prepare()[2:] + store.names.upgrade(None):
                first.execute(statement)
            first.commit()
        await asyncio.wait_for(creating, 20)
        assert await store.push([Envelope("a", "default", "{}")], time.time()) == [True]
        claimed = await other.cycle([], ["default"], 10, "w", 30.0, time.time())
        assert [c.id for c in claimed] == ["a"]
    finally:
        await store.close()
        await other.close()


async def test_a_keyed_push_waits_for_an_open_transactions_key_past_a_roles_timeouts(
    role: Role, postgres_dsn: str, postgres_schema: str
) -> None:
    """A role's statement_timeout of 50 ms cut the push's wait for the key (up to 10 s,
    by design) with a bare "canceling statement due to statement timeout"."""
    dsn = role(statement_timeout="'50ms'", lock_timeout="'10ms'")
    user = dsn.split("//")[1].split("@")[0]
    store = PostgresBackend(dsn, schema=postgres_schema)
    try:
        await store.migrate()
        with psycopg.connect(dsn) as app:
            app.execute("SET statement_timeout = 0")  # (the app's own choice)
            store.push_sync(
                [Envelope("first", "default", "{}", key="k")], time.time(), connection=app
            )
            pushing = asyncio.ensure_future(
                store.push([Envelope("second", "default", "{}", key="k")], time.time())
            )
            await _waiting(postgres_dsn, user, "advisory")
            await asyncio.sleep(0.3)  # longer than the role's timeouts
            app.commit()
        assert await asyncio.wait_for(pushing, 20) == [True]
    finally:
        await store.close()


async def test_an_app_transaction_ended_while_the_store_opened_is_told_why(
    role: Role, postgres_dsn: str, postgres_schema: str
) -> None:
    """The first enqueue opens the store (connections, schema) while the application's
    transaction waits: a role's idle_in_transaction_session_timeout ended it, and the
    error said only "terminating connection due to idle-in-transaction timeout"."""
    dsn = role(idle_in_transaction_session_timeout="'100ms'")
    user = dsn.split("//")[1].split("@")[0]
    store = PostgresBackend(dsn, schema=postgres_schema)
    try:
        async with await psycopg.AsyncConnection.connect(dsn) as app:
            await app.execute("SELECT 1")  # the application's transaction, begun
            with psycopg.connect(postgres_dsn) as other:  # another process, creating it
                other.execute("SELECT pg_advisory_xact_lock(%s)", (store.names.setup_lock,))
                pushing = asyncio.ensure_future(
                    store.push([Envelope("a", "default", "{}")], time.time(), connection=app)
                )
                await _waiting(postgres_dsn, user, "advisory")
                await asyncio.sleep(0.3)  # longer than the role's timeout
            with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout) as raised:
                await asyncio.wait_for(pushing, 20)
        (note,) = raised.value.__notes__
        assert note.startswith(
            f"{store!r}: this enqueue first opened the store's connections and checked its "
            "schema, which took "
        )
        assert note.endswith(
            " s while your transaction waited, longer than the server's "
            "idle_in_transaction_session_timeout; open the store before your transactions "
            "begin (await backend.migrate() at start-up); nothing was enqueued"
        )
        assert (await store.status("a", time.time())).state == "unknown"
    finally:
        await store.close()


async def test_times_read_back_exactly_whatever_the_roles_extra_float_digits(
    role: Role, postgres_schema: str
) -> None:
    """Times are float8 seconds read back as text: at extra_float_digits -15 the store's
    clock read 2e9 and a job due in 15 s was due in 20."""
    store = PostgresBackend(role(extra_float_digits="-15"), schema=postgres_schema)
    try:
        await store.push([Envelope("later", "default", "{}", due=time.time() + 15)], time.time())
        due_in = await store._one(store.names.sql("SELECT {s}.next_due(ARRAY['default'])"))
        assert 13.0 < due_in <= 15.0
        assert abs(await store._one(store.names.sql("SELECT {s}.clock()")) - time.time()) < 60
    finally:
        await store.close()


@pytest.fixture
def shadowing(postgres_dsn: str) -> Iterator[str]:
    """A schema of functions that match the store's calls more closely than the catalog's."""
    schema = f"shadow_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO PUBLIC")
        admin.execute(f"CREATE TABLE {schema}.jobs (id int)")
        admin.execute(
            f"CREATE FUNCTION {schema}.array_length(text[], int) RETURNS int "
            "LANGUAGE sql AS 'SELECT 0'"
        )
        admin.execute(
            f"CREATE FUNCTION {schema}.unnest(text[]) RETURNS SETOF text "
            "LANGUAGE sql AS $$ SELECT 'shadow'::text $$"
        )
    yield schema
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA {schema} CASCADE")


async def test_functions_of_another_schema_on_the_search_path_are_not_called(
    role: Role, postgres_schema: str, shadowing: str
) -> None:
    """The store's functions ran with their caller's search_path: in an application's
    transaction, array_length(text[], int) of a schema on it (an exact match, where the
    catalog's takes anyarray) was called, and the push stored nothing and said so."""
    dsn = role(search_path=f"{shadowing}, public")
    store = PostgresBackend(dsn, schema=postgres_schema)
    try:
        await store.migrate()
        jobs = [Envelope("a", "default", "{}"), Envelope("b", "default", "{}", key="k")]
        async with await psycopg.AsyncConnection.connect(dsn) as app:
            assert await store.push(jobs, time.time(), connection=app) == [True, True]
            await app.commit()
        claimed = await store.cycle([], ["default"], 10, "w", 30.0, time.time())
        assert sorted(c.id for c in claimed) == ["a", "b"]
    finally:
        await store.close()


async def test_a_read_only_database_is_refused_saying_so(role: Role, postgres_schema: str) -> None:
    """A read-only role or database (or a replica) failed the first enqueue with "cannot
    execute CREATE SCHEMA in a read-only transaction", or a worker's turn with a page of
    the cycle's SQL."""
    store = PostgresBackend(role(default_transaction_read_only="on"), schema=postgres_schema)
    try:
        for push in (
            lambda: asyncio.ensure_future(store.push([Envelope("a", "q", "{}")], time.time())),
            lambda: asyncio.to_thread(store.push_sync, [Envelope("a", "q", "{}")], time.time()),
        ):
            with pytest.raises(ConfigError) as raised:
                await push()
            message = str(raised.value)
            assert message.startswith(f"{store.describe()} cannot write: its transactions start ")
            assert "read-only (default_transaction_read_only = on, set for this role or" in message
            assert "ALTER ROLE <role> SET default_transaction_read_only = off" in message
            assert message.endswith("; nothing was written")
    finally:
        await store.close()


def _functions(dsn: str, schema: str) -> dict[str, tuple[list[str] | None, str]]:
    """The schema's functions: {name(arguments): (settings, text)}."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT p.oid::regprocedure::text, p.proconfig, p.prosrc FROM pg_proc p "
            "WHERE p.pronamespace = %s::regnamespace",
            (f'"{schema}"',),
        ).fetchall()
    return {name.split(".", 1)[1]: (config, text) for name, config, text in rows}


# Version 15's SQL functions, which ran with their caller's search_path.
_OLD_CLOCK = (
    "CREATE OR REPLACE FUNCTION {s}.clock() RETURNS float8 LANGUAGE sql VOLATILE "
    "AS $$ SELECT extract(epoch FROM clock_timestamp())::float8 $$"
)
_OLD_WAKE = (
    "CREATE OR REPLACE FUNCTION {s}.wake(p_queue text, p_due boolean) RETURNS void "
    "LANGUAGE sql AS $$ SELECT pg_notify('x', CASE WHEN p_due THEN 'd' ELSE '1' END "
    "|| p_queue) $$"
)


async def test_every_function_runs_with_the_catalog_alone_new_or_migrated_from_15(
    postgres_dsn: str, postgres_schema: str
) -> None:
    """The PL/pgSQL functions set their search_path; the two SQL ones (clock, wake) name
    the catalog's functions in full instead, so that their callers inline them (a
    function with a setting of its own is called, each time: wake, once per job,
    made a push of 1,000 jobs a quarter slower)."""
    store = PostgresBackend(postgres_dsn, schema=postgres_schema)
    try:
        await store.migrate()
    finally:
        await store.close()
    fresh = _functions(postgres_dsn, postgres_schema)
    assert len(fresh) == 10
    for name, (config, text) in fresh.items():
        if name.startswith(("clock(", "wake(")):
            assert config is None and "pg_catalog." in text
        else:
            assert config is not None and "search_path=pg_catalog, pg_temp" in config
    s = f'"{postgres_schema}"'
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # as version 15 made them
        for name in fresh:
            if not name.startswith(("clock(", "wake(")):
                conn.execute(f"ALTER FUNCTION {s}.{name} RESET search_path")
        conn.execute(_OLD_CLOCK.format(s=s))
        conn.execute(_OLD_WAKE.format(s=s))
        conn.execute(f"UPDATE {s}.version SET version = 15")
    store = PostgresBackend(postgres_dsn, schema=postgres_schema)
    try:
        await store.migrate()
        await store.push([Envelope("a", "default", "{}")], time.time())
    finally:
        await store.close()
    assert _functions(postgres_dsn, postgres_schema) == fresh
    assert _postgres_sql.VERSION == 16
