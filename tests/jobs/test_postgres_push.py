"""The PostgreSQL push's two statements: a job pushed alone is stored as the same job in a batch."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchy.jobs import Envelope
from batchy_contrib.jobs.postgres import PostgresBackend

pytestmark = pytest.mark.timeout(120)

# Few ids, queues, unique and ordering keys: repeats (a duplicate id, a unique key
# taken, a key's second job waiting behind its head) are what the two forms could
# disagree on. Payloads include what text parameters make hard (quotes, braces,
# commas, backslashes, NULL-looking words, non-ASCII).
ENVELOPE = st.builds(
    Envelope,
    id=st.sampled_from(["a", "b", "c", "d", 'e"', "f,g"]),
    queue=st.sampled_from(["default", "mail", "{x}"]),
    payload=st.text(
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30
    )
    | st.sampled_from(['{"job":"x"}', "NULL", "a\\b", '"', "{1,2}", "ö€😀"]),
    due=st.none() | st.sampled_from([0.0, 0.25, 500.0]),  # seconds from now (see below)
    unique=st.none() | st.sampled_from(["u1", "u2"]),
    unique_ttl=st.sampled_from([0.0, 60.0]),
    key=st.none() | st.sampled_from(["k1", "k2"]),
)


# The stores' clock, stopped: every time a push writes is exact, whenever it runs.
STOPPED = 1_000_000.0


def _stop_clock(conn: psycopg.Connection[Any], schema: str) -> None:
    conn.execute(
        f'CREATE OR REPLACE FUNCTION "{schema}".clock() RETURNS float8 LANGUAGE sql '
        f"AS $$ SELECT {STOPPED}::float8 $$"
    )


def _rows(conn: psycopg.Connection[Any], schema: str) -> dict[str, object]:
    s = f'"{schema}"'
    jobs = conn.execute(
        f"SELECT id, queue, payload, state, okey, due FROM {s}.jobs ORDER BY seq"
    ).fetchall()
    uniques = conn.execute(f"SELECT key, expires FROM {s}.uniques ORDER BY key").fetchall()
    queues = conn.execute(f"SELECT name FROM {s}.queues ORDER BY name").fetchall()
    return {"jobs": jobs, "uniques": uniques, "queues": queues}


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(drafts=st.lists(ENVELOPE, min_size=1, max_size=6))
def test_jobs_pushed_one_by_one_are_stored_as_the_same_jobs_pushed_together(
    postgres_dsn: str, drafts: list[Envelope]
) -> None:
    """``push`` of one envelope sends plain values (the server builds the arrays), of more
    sends arrays: stored rows, answers and unique keys agree, for the sync push too."""
    schemas = [f"batchy_test_{uuid.uuid4().hex[:12]}" for _ in range(3)]
    alone, together, sync = (PostgresBackend(postgres_dsn, schema=s) for s in schemas)
    now = time.time()
    batch = [e if e.due is None else dataclasses.replace(e, due=now + e.due) for e in drafts]

    async def push() -> tuple[list[bool], list[bool]]:
        try:
            await alone.migrate()
            await together.migrate()
            with psycopg.connect(postgres_dsn, autocommit=True) as conn:
                for schema in schemas:
                    _stop_clock(conn, schema)
            one = [ok for e in batch for ok in await alone.push([e], now)]
            return one, await together.push(batch, now)
        finally:
            await alone.close()
            await together.close()

    try:
        sync.push_sync([], now)  # its schema, made before the clocks stop
        one, many = asyncio.run(push())
        by_sync = [ok for e in batch for ok in sync.push_sync([e], now)]
        assert one == many == by_sync
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            stored = [_rows(conn, s) for s in schemas]
        assert stored[0] == stored[1] == stored[2]
        dues = {STOPPED + (0.0 if e.due is None else e.due - now) for e in batch}
        assert {job[5] for job in stored[0]["jobs"]} <= dues
        assert [j[0] for j in stored[0]["jobs"]] == list(
            dict.fromkeys(e.id for e, ok in zip(batch, many, strict=True) if ok)
        )
    finally:
        asyncio.run(sync.close())
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            for s in schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{s}" CASCADE')


async def test_a_push_of_more_keys_than_the_lock_table_holds_says_how_to_enqueue_them(
    postgres_dsn: str, postgres_schema: str
) -> None:
    """Each ordering key stays locked until the push's transaction ends; 20,000 of
    them at once overflow the server's lock table (64 per connection by default)."""
    from batchy.jobs import ConfigError

    store = PostgresBackend(postgres_dsn, schema=postgres_schema)
    many = [Envelope(f"j{i}", "default", "{}", key=f"k{i}") for i in range(20_000)]
    expected = (
        r"PostgresBackend schema='batchy_test_\w+'>: enqueueing 20000 jobs with 20000 distinct "
        r"ordering keys in one transaction ran out of PostgreSQL's lock table \(each key stays "
        r"locked until the transaction ends\); {}\. Enqueue jobs with ordering keys in batches "
        r"of at most a few hundred keys, or raise the server's max_locks_per_transaction"
    )
    jobs = f'SELECT count(*) FROM "{postgres_schema}".jobs'
    try:
        with pytest.raises(ConfigError, match=expected.format("nothing was enqueued")):
            await store.push(many, time.time())
        with pytest.raises(ConfigError, match=expected.format("nothing was enqueued")):
            await asyncio.to_thread(store.push_sync, many, time.time())
        roll_back = expected.format("the application's transaction is aborted: roll it back")
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as app:
            with pytest.raises(ConfigError, match=roll_back):
                await store.push(many, time.time(), connection=app)
            await app.rollback()
        with psycopg.connect(postgres_dsn) as app_sync:
            with pytest.raises(ConfigError, match=roll_back):
                await asyncio.to_thread(store.push_sync, many, time.time(), connection=app_sync)
            app_sync.rollback()
            assert app_sync.execute(jobs).fetchone() == (0,)
        # In batches of a few hundred keys, all of them go in.
        for i in range(0, len(many), 500):
            assert all(await store.push(many[i : i + 500], time.time()))
        with psycopg.connect(postgres_dsn) as conn:
            assert conn.execute(jobs).fetchone() == (20_000,)
    finally:
        await store.close()
