"""The PostgreSQL push's two statements: a job pushed alone is stored as the same job in a batch."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchy.jobs import Envelope, Queue
from batchy_contrib.jobs._postgres_schema import Names, ensure_sync
from batchy_contrib.jobs.postgres import PostgresBackend

pytestmark = pytest.mark.timeout(120)

# Few ids, queues, unique and ordering keys: repeats (a duplicate id, a unique key
# taken, a key's second job waiting behind its head) are what the two forms could
# disagree on. Payloads include what text parameters make hard (quotes, braces,
# commas, backslashes, NULL-looking words, non-ASCII).
ENVELOPE = st.builds(
    Envelope,
    id=st.sampled_from(["a", "b", "c", "d", 'e"', "f,g"]),
    # (A queue name holds letters, digits and _-.: only: every store's door checks.)
    queue=st.sampled_from(["default", "mail", "mail.v2:x-y"]),
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
    """Each ordering key stays locked until the push's transaction ends; more keys
    than the server's lock table holds (max_locks_per_transaction per connection,
    64 by default) overflow it, with every way to push."""
    from batchy.jobs import ConfigError

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        room = conn.execute(
            "SELECT current_setting('max_locks_per_transaction')::int * "
            "(current_setting('max_connections')::int + "
            "current_setting('max_prepared_transactions')::int)"
        ).fetchone()
    # (The table is sized for all backends, not only connections, and may grow into
    # the server's spare shared memory: three times the count overflows it.)
    n = max(20_000, 3 * int(room[0])) if room else 20_000
    store = PostgresBackend(postgres_dsn, schema=postgres_schema)
    many = [Envelope(f"j{i}", "default", "{}", key=f"k{i}") for i in range(n)]
    expected = (
        rf"PostgresBackend schema='batchy_test_\w+'>: enqueueing {n} jobs with {n} distinct "
        r"ordering keys \('k0', 'k1', 'k10', \.\.\.\) ran out of PostgreSQL's lock table, which all sessions share \(each "
        r"key stays locked until its transaction ends, with the keys of earlier enqueues in "
        r"the same transaction\); {}\. Enqueue jobs with ordering keys in separate "
        r"transactions of at most a few hundred keys each, or raise the server's "
        r"max_locks_per_transaction"
    )
    jobs = f'SELECT count(*) FROM "{postgres_schema}".jobs'
    nothing = expected.replace("{}", "nothing was enqueued")
    roll_back = expected.replace("{}", "the application's transaction is aborted: roll it back")
    try:
        with pytest.raises(ConfigError, match=nothing):
            await store.push(many, time.time())
        with pytest.raises(ConfigError, match=nothing):
            await asyncio.to_thread(store.push_sync, many, time.time())
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as app:
            with pytest.raises(ConfigError, match=roll_back):
                await store.push(many, time.time(), connection=app)
            await app.rollback()
        with psycopg.connect(postgres_dsn) as app_sync:
            with pytest.raises(ConfigError, match=roll_back):
                await asyncio.to_thread(store.push_sync, many, time.time(), connection=app_sync)
            app_sync.rollback()
            assert app_sync.execute(jobs).fetchone() == (0,)
        # Through a queue, the error names the job type in front.
        queue = Queue(store)

        @queue.job(name="mail.send")
        async def send(i: int) -> None: ...

        calls = [send.options(key=f"k{i}").call(i) for i in range(n)]
        with pytest.raises(ConfigError, match=rf"^cannot enqueue {n} jobs \('mail\.send'\): "):
            await queue.enqueue_many(calls)
        # In batches of a few hundred keys, all of them go in.
        for i in range(0, n, 500):
            assert all(await store.push(many[i : i + 500], time.time()))
        with psycopg.connect(postgres_dsn) as conn:
            assert conn.execute(jobs).fetchone() == (n,)
    finally:
        await store.close()


async def test_a_push_of_many_keys_holds_each_of_them_until_it_commits(
    postgres_dsn: str, postgres_schema: str
) -> None:
    """A push of more than 64 keys locks them all at once: a push of one of them
    waits, and its job lands behind the first one's (without the lock it would
    not see the uncommitted head, and the key would have two)."""
    store = PostgresBackend(postgres_dsn, schema=postgres_schema)
    await store.migrate()
    rows = f'SELECT id, state FROM "{postgres_schema}".jobs WHERE okey = %s ORDER BY seq'
    try:
        with psycopg.connect(postgres_dsn) as app:
            big = [Envelope(f"big{i}", "default", "{}", key=f"k{i}") for i in range(200)]
            assert all(store.push_sync(big, time.time(), connection=app))
            late = asyncio.ensure_future(
                store.push([Envelope("late", "default", "{}", key="k5")], time.time())
            )
            await asyncio.sleep(0.5)
            assert not late.done()  # waiting for the big push's keys
            app.commit()
            assert await asyncio.wait_for(late, 10) == [True]
            assert app.execute(rows, ("k5",)).fetchall() == [("big5", 0), ("late", 2)]
    finally:
        await store.close()


async def test_a_turn_puts_off_only_the_outcomes_whose_key_a_transaction_holds(
    postgres_dsn: str, postgres_schema: str
) -> None:
    from batchy.jobs import Outcome

    store = PostgresBackend(postgres_dsn, schema=postgres_schema)
    mine = f'SELECT id FROM "{postgres_schema}".jobs WHERE id LIKE %s ORDER BY id'
    try:
        await store.push([Envelope(f"j{i}", "q", "{}", key=f"k{i}") for i in range(100)], 0.0)
        claims = await store.cycle([], ["q"], 100, "w", 60.0, time.time())
        assert len(claims) == 100
        with psycopg.connect(postgres_dsn) as app:
            assert store.push_sync([Envelope("x", "q", "{}", key="k5")], 0.0, connection=app)
            done = [Outcome(c.id, "done", token=c.token) for c in claims]
            assert await store.cycle(done, ["q"], 0, "w", 60.0, time.time()) == []
            with psycopg.connect(postgres_dsn, autocommit=True) as look:
                assert look.execute(mine, ("j%",)).fetchall() == [("j5",)]  # put off
                app.commit()
                await asyncio.wait_for(store._put_off.settle("w"), 10)
                assert look.execute(mine, ("j%",)).fetchall() == []
    finally:
        await store.close()


def test_keys_of_one_hash_are_locked_in_one_order_by_every_step(
    postgres_dsn: str, postgres_schema: str
) -> None:
    """hashtext('k191518') = hashtext('k289282'): in key order, {k191518, k2} and
    {k2, k289282} took the two locks in opposite orders, and two steps could
    deadlock (PostgreSQL then aborts one: a failed enqueue or turn)."""
    names = Names(postgres_schema)
    lock = names.sql("SELECT {s}.lock_keys(%s)")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT hashtext('k191518') = hashtext('k289282')").fetchone() == (
            True,
        )
        ensure_sync(conn, names)
    errors: list[BaseException] = []

    def step(conn: psycopg.Connection[Any], keys: list[str]) -> None:
        try:
            with conn.transaction():
                conn.execute(lock, (keys,))
        except BaseException as error:  # reported below
            errors.append(error)

    with (
        psycopg.connect(postgres_dsn, autocommit=True) as holder,
        psycopg.connect(postgres_dsn, autocommit=True) as a,
        psycopg.connect(postgres_dsn, autocommit=True) as b,
    ):
        with holder.transaction():
            holder.execute(lock, (["k191518"],))  # the shared hash, held for now
            first = threading.Thread(target=step, args=(a, ["k191518", "k2"]))
            first.start()
            time.sleep(0.3)  # a waits for the shared hash
            second = threading.Thread(target=step, args=(b, ["k2", "k289282"]))
            second.start()
            time.sleep(0.3)  # b has taken what it could, and waits
        first.join(10)
        second.join(10)
    assert not first.is_alive() and not second.is_alive()
    assert errors == []
