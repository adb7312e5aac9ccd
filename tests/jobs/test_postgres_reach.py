"""A new PostgreSQL store's first contact: a server it cannot reach."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import psycopg
import pytest

from batchy.jobs import Envelope, Queue
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
