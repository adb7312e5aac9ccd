"""Stores whose clock a test sets: memory, SQLite, Redis and PostgreSQL, frozen at a time.

Memory and SQLite read :func:`batchy.jobs._clock.store_now`, which
:func:`freeze` patches to read :data:`NOW`;
PostgreSQL's ``clock()`` function and the Redis scripts' ``clock()`` are
replaced here to read a time the test writes. Redis still expires unique keys,
kept results and worker records on its own clock, which no script reads.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from batchy.jobs import Backend, MemoryBackend, SQLiteBackend, _clock

from .conftest import REDIS_DB

__all__ = ["NOW", "OPEN", "Frozen", "freeze"]

NOW = [0.0]  # what the patched store_now() returns (memory, SQLite)


def freeze(monkeypatch: pytest.MonkeyPatch, t: float) -> None:
    """The memory and SQLite stores' clock reads :data:`NOW`, set to ``t``, for the test."""
    NOW[0] = t
    monkeypatch.setattr(_clock, "store_now", lambda: NOW[0])


@dataclass
class Frozen:
    """A store whose clock the test sets."""

    store: Backend
    set_clock: Callable[[float], Awaitable[None]]
    close: Callable[[], Awaitable[None]]


async def memory_store(place: Any) -> Frozen:
    async def set_clock(t: float) -> None:
        NOW[0] = t

    async def close() -> None:
        return None

    return Frozen(MemoryBackend(), set_clock, close)


async def sqlite_store(place: Any) -> Frozen:
    store = SQLiteBackend(place / f"jobs-{uuid.uuid4().hex[:8]}.db")
    frozen = await memory_store(place)
    return Frozen(store, frozen.set_clock, store.close)


# The scripts' clock reads Redis's TIME; here a key the test writes.
_REDIS_TIME = "local t = redis.call('TIME')\n  return tonumber(t[1]) + tonumber(t[2]) / 1000000"
_REDIS_FAKE = "return tonumber(redis.call('GET', p..'test:clock'))"


async def redis_store(place: Any) -> Frozen:
    from batchy_contrib.jobs.redis import RedisBackend

    host, port = place
    store = RedisBackend(
        f"redis://{host}:{port}/{REDIS_DB}", prefix=f"model:{uuid.uuid4().hex[:8]}:"
    )
    store._admin_script("list")  # made on first use: make them now, to patch them too
    for scripts in (store._scripts, store._admin_scripts):
        for name, script in scripts.items():
            assert _REDIS_TIME in script.script, name
            scripts[name] = store.redis.register_script(
                script.script.replace(_REDIS_TIME, _REDIS_FAKE)
            )

    async def set_clock(t: float) -> None:
        await store.redis.set(store.prefix + "test:clock", repr(t))

    async def close() -> None:
        keys = [k async for k in store.redis.scan_iter(match=store.prefix + "*")]
        await store.redis.delete(*keys)
        await store.close()

    return Frozen(store, set_clock, close)


async def postgres_store(place: Any) -> Frozen:
    import psycopg

    from batchy_contrib.jobs.postgres import PostgresBackend

    schema = f"batchy_model_{uuid.uuid4().hex[:12]}"
    store = PostgresBackend(place, schema=schema)
    await store.migrate()
    conn = await psycopg.AsyncConnection.connect(place, autocommit=True)
    await conn.execute(
        f'CREATE TABLE "{schema}".test_clock (t float8 NOT NULL); '
        f'INSERT INTO "{schema}".test_clock VALUES (0); '
        f'CREATE OR REPLACE FUNCTION "{schema}".clock() RETURNS float8 LANGUAGE sql VOLATILE '
        f'AS $$ SELECT t FROM "{schema}".test_clock $$'
    )

    async def set_clock(t: float) -> None:
        await conn.execute(f'UPDATE "{schema}".test_clock SET t = %s', (t,))

    async def close() -> None:
        await store.close()
        await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        await conn.close()

    return Frozen(store, set_clock, close)


#: How to open each kind of store; ``place`` is a directory (SQLite), a
#: ``(host, port)`` (Redis) or a DSN (PostgreSQL).
OPEN: dict[str, Callable[[Any], Awaitable[Frozen]]] = {
    "memory": memory_store,
    "sqlite": sqlite_store,
    "redis": redis_store,
    "postgres": postgres_store,
}
