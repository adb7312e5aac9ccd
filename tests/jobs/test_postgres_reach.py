"""A new PostgreSQL store's first contact: a server it cannot reach, and a role without the rights."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from batchy.jobs import ConfigError, Envelope, Queue
from batchy_contrib.jobs import _postgres_pools
from batchy_contrib.jobs.postgres import PostgresBackend

pytestmark = pytest.mark.timeout(60)


def _port_nothing_answers() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)  # the kernel takes the connections; nobody ever reads or answers them
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (a stopped server, say)."""
    yield from _port_nothing_answers()


@pytest.fixture
def closed_port() -> int:
    """A port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_first_enqueue_to_a_server_that_is_down_names_the_store(closed_port: int) -> None:
    # The first connect of a store raised psycopg's bare "connection failed: ..."
    # from deep in the pool's opening: no store, no schema, no word of what to do.
    dsn = f"postgresql://app:secret@127.0.0.1:{closed_port}/app"
    store = PostgresBackend(dsn, schema="jobs_here")
    queue = Queue(store)

    @queue.job(name="hello")
    async def hello(x: int) -> None: ...

    try:
        with pytest.raises(psycopg.OperationalError) as info:
            await hello.enqueue(1)
        with pytest.raises(psycopg.OperationalError) as sync_info:
            await asyncio.to_thread(hello.enqueue_sync, 1)
    finally:
        await store.close()
    for error in (info.value, sync_info.value):
        message = str(error)
        assert type(error) is psycopg.OperationalError  # still what the worker calls an outage
        assert store.unreachable(error)
        assert message.startswith(
            f"cannot reach PostgreSQL postgresql://app:***@127.0.0.1:{closed_port}/app schema "
            "'jobs_here': OperationalError: connection failed: "
        ), message
        assert "Connection refused" in message and "secret" not in message
        assert message.endswith(
            "; this call sent nothing (an enqueue enqueued nothing), and the next one connects "
            "again. Check that the server is up and that the DSN points at it (host, port, "
            "database, user and password)"
        )
        assert isinstance(error.__cause__, psycopg.OperationalError)


async def test_a_first_connect_to_a_server_that_never_answers_gives_up(
    silent_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # psycopg waits 130 s for a connection's first answer unless told otherwise: an
    # enqueue (or migrate) to a stopped server, or a wrong port behind a proxy, held
    # its request that long. The store's connects now give up after CONNECT_WITHIN
    # (10 s; libpq's least, 2 s, here).
    monkeypatch.setattr(_postgres_pools, "CONNECT_WITHIN", 2)
    store = PostgresBackend(f"postgresql://app@127.0.0.1:{silent_port}/app")
    try:
        with pytest.raises(psycopg.OperationalError) as info:
            await store.migrate()
        with pytest.raises(psycopg.OperationalError) as sync_info:
            await asyncio.to_thread(store.push_sync, [Envelope("a", "default", "{}")], time.time())
    finally:
        await store.close()
    for error in (info.value, sync_info.value):
        assert str(error).startswith(
            f"cannot reach PostgreSQL postgresql://app@127.0.0.1:{silent_port}/app schema "
            "'batchy': ConnectionTimeout: connection timeout expired; this call sent nothing"
        ), str(error)


def test_the_connect_timeout_of_the_dsn_or_environment_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    options = _postgres_pools.connect_options
    assert options("postgresql://db/app") == {"autocommit": True, "connect_timeout": 10}
    assert options("postgresql://db/app?connect_timeout=3") == {"autocommit": True}
    assert options("host=db dbname=app connect_timeout=30") == {"autocommit": True}
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "4")
    assert options("postgresql://db/app") == {"autocommit": True}


@pytest.fixture
def role(postgres_dsn: str) -> Iterator[str]:
    """A login role with no rights beyond PUBLIC's (and no CREATE on the database)."""
    name = f"batchy_role_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN")
        # PUBLIC may hold CREATE on the test database: this role must not.
        database = admin.info.dbname
        granted = admin.execute(
            "SELECT has_database_privilege('public', current_database(), 'CREATE')"
        ).fetchone()
    if granted and granted[0]:
        pytest.skip(f"PUBLIC holds CREATE on database {database}; the role would have it too")
    yield name
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f"DROP OWNED BY {name}")
        admin.execute(f"DROP ROLE {name}")


def _as(dsn: str, role: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, user=role)


async def test_a_role_that_cannot_create_the_schema_is_told_what_it_needs(
    postgres_dsn: str, postgres_schema: str, role: str
) -> None:
    # It raised psycopg's "permission denied for database test": nothing said that the
    # store was creating its schema, nor which grant (or deploy step) fixes it.
    store = PostgresBackend(_as(postgres_dsn, role), schema=postgres_schema)
    database = psycopg.conninfo.conninfo_to_dict(postgres_dsn).get("dbname", "test")
    try:
        with pytest.raises(ConfigError) as info:
            await store.migrate()
        with pytest.raises(ConfigError) as sync_info:
            store.push_sync([Envelope("a", "default", "{}")], time.time())
    finally:
        await store.close()
    for error in (info.value, sync_info.value):
        assert str(error) == (
            f"cannot create or migrate the job schema {postgres_schema!r} in database "
            f"{database!r} as role {role!r} (permission denied for database {database}): "
            "that needs CREATE on the database (the first time) and ownership of the schema's "
            "tables (a migration). Run `batchy migrate APP` (or `await backend.migrate()`) once "
            "at deploy time as a role that has them (the owner of the database), or GRANT CREATE "
            "ON DATABASE "
            f'"{database}" TO "{role}"; nothing was created'
        )
        assert isinstance(error.__cause__, psycopg.errors.InsufficientPrivilege)


async def test_a_role_without_rights_on_a_made_schema_is_told_the_grants(
    postgres_dsn: str, postgres_schema: str, role: str
) -> None:
    owner = PostgresBackend(postgres_dsn, schema=postgres_schema)
    await owner.migrate()
    await owner.close()
    store = PostgresBackend(_as(postgres_dsn, role), schema=postgres_schema)
    queue = Queue(store)

    @queue.job(name="hello")
    async def hello(x: int) -> None: ...

    try:
        with pytest.raises(ConfigError) as info:
            await hello.enqueue(1)
        with pytest.raises(ConfigError) as sync_info:
            await asyncio.to_thread(hello.enqueue_sync, 1)
    finally:
        await store.close()
    s, r = f'"{postgres_schema}"', f'"{role}"'
    for error in (info.value, sync_info.value):
        message = str(error)
        assert f"cannot read the job schema {postgres_schema!r} in database " in message
        assert f"as role {role!r} (permission denied for schema {postgres_schema}): " in message
        assert message.endswith(
            "the store's role needs USAGE on the schema, SELECT, INSERT, UPDATE and DELETE on "
            "its tables, USAGE on its sequences and EXECUTE on its functions. As the schema's "
            f"owner: GRANT USAGE ON SCHEMA {s} TO {r}; GRANT SELECT, INSERT, UPDATE, DELETE ON "
            f"ALL TABLES IN SCHEMA {s} TO {r}; GRANT USAGE ON ALL SEQUENCES IN SCHEMA {s} TO "
            f"{r}; GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {s} TO {r}"
        ), message
        assert message.startswith("cannot enqueue job 'hello'"), message
    # The grants it names are enough.
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        for grant in str(info.value).split("As the schema's owner: ")[1].split("; "):
            admin.execute(grant)  # type: ignore[arg-type]
    store = PostgresBackend(_as(postgres_dsn, role), schema=postgres_schema)
    try:
        assert await store.push([Envelope("a", "default", "{}")], time.time()) == [True]
    finally:
        await store.close()
