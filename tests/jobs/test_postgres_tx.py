"""Transactional enqueue on PostgreSQL: a job written in the app's transaction lives or dies with it."""

from __future__ import annotations

import asyncio
import math
import time
import uuid

import psycopg
import pytest
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from batchy.jobs import ConfigError, Envelope, JobStateError, Queue, Worker
from batchy_contrib.jobs.postgres import PostgresBackend

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def store(postgres_app_store: PostgresBackend) -> PostgresBackend:
    return postgres_app_store


@pytest.fixture
def newer_store(postgres_dsn: str, postgres_schema: str) -> PostgresBackend:
    """A store on a schema that a later release of batchy made (version 99)."""
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{postgres_schema}"')
        admin.execute(f'CREATE TABLE "{postgres_schema}".version (version int NOT NULL)')
        admin.execute(f'INSERT INTO "{postgres_schema}".version VALUES (99)')
    return PostgresBackend(postgres_dsn, schema=postgres_schema)


def job(queue: str = "default") -> Envelope:
    return Envelope(uuid.uuid4().hex, queue, '{"job": "welcome", "args": [1], "kwargs": {}}')


async def test_a_rolled_back_transaction_leaves_no_job(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    env = job()
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        assert await store.push([env], time.time(), connection=conn) == [True]
        await conn.rollback()
    assert (await store.status(env.id, time.time())).state == "unknown"


async def test_an_exception_between_insert_and_commit_leaves_neither(
    store: PostgresBackend, postgres_dsn: str, postgres_schema: str
) -> None:
    env = job()
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        with pytest.raises(ZeroDivisionError):
            async with conn.transaction():
                await conn.execute(f'INSERT INTO "{postgres_schema}".users VALUES (1)')
                await store.push([env], time.time(), connection=conn)
                1 / 0
        rows = await (await conn.execute(f'SELECT * FROM "{postgres_schema}".users')).fetchall()
    assert rows == []
    assert (await store.status(env.id, time.time())).state == "unknown"


async def test_a_committed_job_runs_and_sees_the_rows_of_its_transaction(
    store: PostgresBackend, postgres_dsn: str, postgres_schema: str
) -> None:
    queue = Queue(store)
    found: list[object] = []

    @queue.job(name="welcome")
    async def welcome(user_id: int) -> None:
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            cur = await conn.execute(
                f'SELECT id FROM "{postgres_schema}".users WHERE id = %s', (user_id,)
            )
            found.append(await cur.fetchone())

    worker = Worker(queue, poll_interval=5.0)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(0.2)
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            for uid in range(1, 21):
                async with conn.transaction():
                    await conn.execute(f'INSERT INTO "{postgres_schema}".users VALUES (%s)', (uid,))
                    payload = f'{{"job": "welcome", "args": [{uid}], "kwargs": {{}}}}'
                    await store.push(
                        [Envelope(uuid.uuid4().hex, "default", payload)],
                        time.time(),
                        connection=conn,
                    )
                    await asyncio.sleep(0.005)  # a worker woken early would miss the row
        deadline = time.monotonic() + 10
        while len(found) < 20:
            assert time.monotonic() < deadline, found
            await asyncio.sleep(0.01)
    finally:
        worker.stop()
        await task
    assert None not in found and len(found) == 20  # every worker found its row


def test_the_sync_twin_writes_in_the_apps_transaction(
    postgres_dsn: str, postgres_schema: str
) -> None:
    store = PostgresBackend(postgres_dsn, schema=postgres_schema)
    kept, dropped = job(), job()
    with psycopg.connect(postgres_dsn) as conn:
        store.push_sync([kept], time.time(), connection=conn)
        conn.commit()
        store.push_sync([dropped], time.time(), connection=conn)
        conn.rollback()
    states = asyncio.run(_states(store, [kept.id, dropped.id]))
    assert states == ["queued", "unknown"]


async def _states(store: PostgresBackend, ids: list[str]) -> list[str]:
    try:
        return [(await store.status(i, time.time())).state for i in ids]
    finally:
        await store.close()


async def test_job_enqueue_takes_the_apps_connection(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    queue = Queue(store)

    @queue.job
    async def send_welcome(user_id: int) -> None:
        return None

    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        dropped = await send_welcome.options(connection=conn).enqueue(42)
        await conn.rollback()
        kept = await send_welcome.options(connection=conn).enqueue(43)
        (also,) = await queue.enqueue_many([send_welcome.call(44)], connection=conn)
        await conn.commit()
    assert [(await h.status()).state for h in (dropped, kept, also)] == [
        "unknown",
        "queued",
        "queued",
    ]


def test_job_enqueue_sync_takes_the_apps_connection(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    queue = Queue(store)

    @queue.job
    async def send_welcome(user_id: int) -> None:
        return None

    with psycopg.connect(postgres_dsn) as conn:
        dropped = send_welcome.options(connection=conn).enqueue_sync(1)
        conn.rollback()
        kept = send_welcome.options(connection=conn).enqueue_sync(2)
        conn.commit()
    assert asyncio.run(_states(store, [dropped.id, kept.id])) == ["unknown", "queued"]


# -- what would break "the job exists if and only if the transaction commits" ----------


async def _count(store: PostgresBackend) -> int:
    rows = await store._all(store.names.sql("SELECT count(*) FROM {s}.jobs"))
    return int(rows[0][0])


async def test_a_blocking_connection_awaited_is_refused_before_it_writes(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    with psycopg.connect(postgres_dsn) as conn:
        with pytest.raises(ConfigError) as error:
            await store.push([job()], time.time(), connection=conn)
        # Nothing ran on it: no transaction was opened by the refused call.
        assert conn.info.transaction_status == TransactionStatus.IDLE
        shown = repr(conn)
    assert str(error.value) == (
        f"{store!r}: connection={shown} is a blocking psycopg.Connection, but "
        "`await ...enqueue(...)` needs a psycopg.AsyncConnection; with this connection call "
        "enqueue_sync(...) instead; nothing was enqueued"
    )
    assert await _count(store) == 0


async def test_an_async_connection_given_to_the_sync_twin_is_refused(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        with pytest.raises(ConfigError) as error:
            await asyncio.to_thread(store.push_sync, [job()], time.time(), connection=conn)
        assert conn.info.transaction_status == TransactionStatus.IDLE
    assert "is a psycopg.AsyncConnection, but enqueue_sync(...) needs a blocking" in str(
        error.value
    )
    assert str(error.value).endswith("nothing was enqueued")
    assert await _count(store) == 0


async def test_something_that_is_not_a_connection_is_refused_by_name(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    pool = AsyncConnectionPool(postgres_dsn, open=False)  # the application's own
    with pytest.raises(ConfigError) as error:
        await store.push([job()], time.time(), connection=pool)
    assert str(error.value) == (
        f"{store!r}: connection={pool!r} is not a psycopg connection (got AsyncConnectionPool); "
        "pass the psycopg 3 connection your transaction runs on (an AsyncConnection to "
        "`await enqueue(...)`, a Connection to enqueue_sync(...)), not a pool, cursor or other "
        "driver's connection; nothing was enqueued"
    )


async def test_an_autocommit_connection_outside_a_transaction_is_refused(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        with pytest.raises(ConfigError) as error:
            await store.push([job()], time.time(), connection=conn)
        assert "is in autocommit mode with no transaction open" in str(error.value)
        assert await _count(store) == 0
        # Inside a transaction block the same connection is fine, and rolls back.
        env = job()
        with pytest.raises(ZeroDivisionError):
            async with conn.transaction():
                await store.push([env], time.time(), connection=conn)
                1 / 0
        assert (await store.status(env.id, time.time())).state == "unknown"
        async with conn.transaction():
            await store.push([env], time.time(), connection=conn)
        assert (await store.status(env.id, time.time())).state == "queued"


async def test_a_connection_to_another_database_is_refused(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    await store.pool()  # the store knows its database once connected
    other = psycopg.conninfo.make_conninfo(postgres_dsn, dbname="postgres")
    async with await psycopg.AsyncConnection.connect(other) as conn:
        with pytest.raises(ConfigError) as error:
            await store.push([job()], time.time(), connection=conn)
        assert conn.info.transaction_status == TransactionStatus.IDLE
    mine = psycopg.conninfo.conninfo_to_dict(postgres_dsn)["dbname"]
    assert (
        f"is connected to database 'postgres', but this store's jobs are in database {mine!r}"
        in (str(error.value))
    )


async def test_keyed_jobs_need_read_committed_and_others_do_not(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
        keyed = Envelope(uuid.uuid4().hex, "default", job().payload, key="account-7")
        with pytest.raises(ConfigError) as error:
            await store.push([keyed], time.time(), connection=conn)
        assert "runs its transaction at isolation level 'repeatable read'" in str(error.value)
        # The refused call began no transaction of the app's: it may still set its level.
        assert conn.info.transaction_status == TransactionStatus.IDLE
        plain = job()
        assert await store.push([plain], time.time(), connection=conn) == [True]
        await conn.commit()
        # PostgreSQL runs READ UNCOMMITTED as READ COMMITTED: keyed jobs are fine there.
        await conn.set_isolation_level(psycopg.IsolationLevel.READ_UNCOMMITTED)
        assert await store.push([keyed], time.time(), connection=conn) == [True]
        await conn.commit()
    with psycopg.connect(postgres_dsn) as sync:
        sync.isolation_level = psycopg.IsolationLevel.SERIALIZABLE
        with pytest.raises(ConfigError, match="isolation level 'serializable'"):
            store.push_sync([keyed], time.time(), connection=sync)
        assert sync.info.transaction_status == TransactionStatus.IDLE
    assert await _count(store) == 2


async def test_an_autocommit_connection_in_a_pipeline_is_refused(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        async with conn.pipeline():
            await conn.execute("SELECT 1")  # its result still pending: ACTIVE, not IDLE
            with pytest.raises(ConfigError, match="outside a pipeline block"):
                await store.push([job()], time.time(), connection=conn)
    assert await _count(store) == 0


async def test_the_apps_row_factory_does_not_change_what_the_push_reads(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_dsn, row_factory=dict_row) as conn:
        assert await store.push([job(), job()], time.time(), connection=conn) == [True, True]
        await conn.commit()
    with psycopg.connect(postgres_dsn, row_factory=dict_row) as sync:
        assert store.push_sync([job()], time.time(), connection=sync) == [True]
        sync.commit()
    assert await _count(store) == 3


async def test_a_new_queue_in_an_open_transaction_does_not_hold_up_other_enqueues(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        await store.push([job("fresh")], time.time(), connection=conn)
        # The app's transaction is still open: a push of its own to the same new
        # queue must not wait for it (it waited on the queue name's row).
        pushed = await asyncio.wait_for(store.push([job("fresh")], time.time()), 5)
        assert pushed == [True]
        await conn.rollback()
    assert await _count(store) == 1


# -- an open transaction that holds an ordering key stalls no worker ------------------


async def _keyed_scenario(
    store: PostgresBackend, postgres_dsn: str, *, hold: float, stop_while_held: bool
) -> tuple[list[tuple[str, int, float]], float]:
    """A key's head runs while an app transaction enqueues the key's next job and stays
    open ``hold`` seconds; unkeyed jobs are enqueued meanwhile. What ran, and when."""
    queue = Queue(store)
    ran: list[tuple[str, int, float]] = []

    @queue.job(name="head")
    async def head(i: int) -> None:
        await asyncio.sleep(0.2)
        ran.append(("head", i, time.monotonic()))

    @queue.job(name="plain")
    async def plain(i: int) -> None:
        ran.append(("plain", i, time.monotonic()))

    worker = Worker(queue, concurrency=10, poll_interval=0.05, lease=1.0)
    task = asyncio.create_task(worker.run())
    await head.options(key="acct").enqueue(1)
    await asyncio.sleep(0.05)  # it runs
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        async with conn.transaction():
            await head.options(key="acct", connection=conn).enqueue(2)
            began = time.monotonic()
            for i in range(4):
                await plain.enqueue(i)
                await asyncio.sleep(hold / 4)
            if stop_while_held:
                worker.stop()  # its last hand-in waits for the key
                await asyncio.sleep(0.2)
                assert not task.done()
        committed = time.monotonic()
    if stop_while_held:
        await asyncio.wait_for(task, 5)
    else:
        deadline = time.monotonic() + 5
        while len([r for r in ran if r[0] == "head"]) < 2:
            assert time.monotonic() < deadline, ran
            await asyncio.sleep(0.02)
        worker.stop()
        await task
    plains = [t - began for kind, _, t in ran if kind == "plain"]
    return [(k, i, t - committed) for k, i, t in ran], max(plains) if plains else 0.0


async def test_an_open_transaction_holding_a_key_stalls_no_worker(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    # Held 2 s, twice the lease: the head's outcome waits that long, renewed.
    ran, last_plain = await _keyed_scenario(store, postgres_dsn, hold=2.0, stop_while_held=False)
    # The unkeyed jobs ran as they came, while the transaction was open: the
    # worker finishing the key's head waited for it with its whole turn, and
    # all four ran after the commit.
    assert [i for k, i, _ in ran if k == "plain"] == [0, 1, 2, 3]
    assert last_plain < 2.0, ran
    assert all(t < 0 for k, _, t in ran if k == "plain"), ran
    # The key's jobs ran once each, in order, the second after the commit.
    assert [(k, i) for k, i, _ in ran if k == "head"] == [("head", 1), ("head", 2)]
    assert next(t for k, i, t in ran if (k, i) == ("head", 2)) > 0
    statuses = await store.info(time.time())
    assert statuses.dead == 0


async def test_a_worker_stopping_while_a_key_is_held_hands_in_its_outcome_after_all(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    ran, _ = await _keyed_scenario(store, postgres_dsn, hold=0.8, stop_while_held=True)
    assert [(k, i) for k, i, _ in ran if k == "head"] == [("head", 1)]
    counts = await store.info(time.time())
    # Head 1 is done (not back on the queue for a second run); head 2 waits its turn.
    assert (counts.queues[0].name, counts.queues[0].size) == ("default", 1)


async def test_a_retry_kept_while_its_key_is_held_keeps_its_due_time(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    queue = Queue(store)

    @queue.job(name="flaky", retries=3, backoff=lambda n, error: 5.0)
    async def flaky(i: int) -> None:
        await asyncio.sleep(0.2)
        raise RuntimeError("not yet")

    worker = Worker(queue, concurrency=2, poll_interval=0.05)
    task = asyncio.create_task(worker.run())
    first = await flaky.options(key="acct").enqueue(1)
    await asyncio.sleep(0.05)
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        async with conn.transaction():
            await flaky.options(key="acct", connection=conn).enqueue(2)
            await asyncio.sleep(0.4)  # the retry outcome is put off meanwhile
            worker.stop()  # so its last hand-in sends it
            await asyncio.sleep(0.1)
    await asyncio.wait_for(task, 5)
    rows = await store._all(
        store.names.sql("SELECT due - {s}.clock() FROM {s}.jobs WHERE id = %s"), (first.id,)
    )
    # Due in the backoff's 5 s, on the store's clock (not decades away).
    assert 0 < rows[0][0] < 6, rows
    assert (await first.status()).state == "retrying"


async def test_a_key_that_open_transactions_hold_one_after_another_keeps_running(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    queue = Queue(store)
    ran: list[int] = []

    @queue.job(name="step")
    async def step(i: int) -> None:
        ran.append(i)

    worker = Worker(queue, concurrency=4, poll_interval=0.05)
    task = asyncio.create_task(worker.run())
    stop = asyncio.Event()

    async def app(offset: float, first: int) -> None:
        # Transactions of ~0.1 s, two connections overlapping: the key is never free.
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            await asyncio.sleep(offset)
            i = first
            while not stop.is_set():
                async with conn.transaction():
                    await step.options(key="K", connection=conn).enqueue(i)
                    await asyncio.sleep(0.1)
                i += 2

    apps = [asyncio.create_task(app(0.0, 0)), asyncio.create_task(app(0.05, 1))]
    await asyncio.sleep(3.0)
    stop.set()
    await asyncio.gather(*apps)
    worker.stop()
    await task
    # With only tries at the key, 1 job ran in 4 s (the key is never free at a
    # try); handed in from the lock's queue, about one per transaction.
    assert len(ran) >= 5, ran


async def test_a_worker_waiting_to_hand_in_as_it_stops_holds_up_no_other_worker(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    first, second = Queue(store), Queue(store)  # two workers on one store object
    ran: list[tuple[str, int, float]] = []

    @first.job(name="head", queue="a")
    async def head(i: int) -> None:
        await asyncio.sleep(0.2)
        ran.append(("head", i, time.monotonic()))

    @second.job(name="plain", queue="b")
    async def plain(i: int) -> None:
        ran.append(("plain", i, time.monotonic()))

    a = Worker(first, concurrency=2, poll_interval=0.05)
    b = Worker(second, concurrency=2, poll_interval=0.05)
    tasks = [asyncio.create_task(a.run()), asyncio.create_task(b.run())]
    await head.options(key="K").enqueue(1)
    await asyncio.sleep(0.05)
    enqueued: dict[int, float] = {}
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        async with conn.transaction():
            await head.options(key="K", connection=conn).enqueue(2)
            await asyncio.sleep(0.4)  # head 1's outcome is put off
            a.stop()  # a waits for the key before it goes
            for i in range(4):
                enqueued[i] = time.monotonic()
                await plain.enqueue(i)
                await asyncio.sleep(0.25)
            assert not tasks[0].done()
    await asyncio.wait_for(tasks[0], 5)
    b.stop()
    await tasks[1]
    lags = [t - enqueued[i] for kind, i, t in ran if kind == "plain"]
    assert len(lags) == 4 and max(lags) < 0.2, lags  # b went on meanwhile
    assert [i for kind, i, _ in ran if kind == "head"] == [1]


async def test_closing_the_store_stops_a_hand_in_still_waiting() -> None:
    from batchy.jobs import Outcome
    from batchy_contrib.jobs._postgres_later import PutOff

    never = asyncio.Event()

    async def hand_in(worker: str, outcomes: list[Outcome], wait: float) -> bool:
        await never.wait()  # its key is never free
        return True

    put_off = PutOff(hand_in, 1)
    put_off.add("w", [Outcome("j1", "done", token="t")], 30.0)
    assert put_off.claims("w") == [("j1", "t")]  # renewed meanwhile
    await asyncio.sleep(0)
    put_off.cancel()
    await asyncio.wait_for(put_off.settle("w"), 1)  # it stopped: no task left pending
    assert put_off.claims("w") == []


async def test_a_worker_stopping_while_a_transaction_never_ends_stops_after_one_lease(
    store: PostgresBackend, postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The app's transaction holds the key far longer than the worker's lease: the
    # stopping worker used to wait for it in forget_worker, for as long as it stayed open.
    queue = Queue(store)
    ran: list[int] = []

    @queue.job(name="head")
    async def head(i: int) -> None:
        await asyncio.sleep(0.1)
        ran.append(i)

    worker = Worker(queue, concurrency=2, poll_interval=0.05, lease=1.0)
    task = asyncio.create_task(worker.run())
    first = await head.options(key="acct").enqueue(1)
    await asyncio.sleep(0.05)
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        async with conn.transaction():
            await head.options(key="acct", connection=conn).enqueue(2)
            await asyncio.sleep(0.3)  # head 1's outcome is put off
            worker.stop()
            stopped = time.monotonic()
            await asyncio.wait_for(asyncio.shield(task), 4)
            took = time.monotonic() - stopped
        assert 0.9 < took < 2.5, took  # one lease after its heartbeat stopped
        assert first.id in caplog.text and "has not ended" in caplog.text
    # Nothing lost: head 1 runs again (its outcome never went in), then head 2.
    again = Worker(queue, concurrency=2, poll_interval=0.05, lease=1.0)
    other = asyncio.create_task(again.run())
    deadline = time.monotonic() + 6
    while ran != [1, 1, 2]:
        assert time.monotonic() < deadline, ran
        await asyncio.sleep(0.05)
    again.stop()
    await other


async def test_a_refused_enqueue_names_the_job(store: PostgresBackend, postgres_dsn: str) -> None:
    queue = Queue(store)

    @queue.job(name="welcome")
    async def welcome(user: int) -> None:
        return None

    with psycopg.connect(postgres_dsn) as conn:
        with pytest.raises(ConfigError) as error:
            await welcome.options(connection=conn).enqueue(42)
        shown = repr(conn)
    head, _, rest = str(error.value).partition("): ")
    assert head.startswith("cannot enqueue job 'welcome' (id "), head
    assert rest.startswith(f"{store!r}: connection={shown} is a blocking psycopg.Connection")
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        with pytest.raises(ConfigError) as error:
            await asyncio.to_thread(
                queue.enqueue_many_sync, [welcome.call(1), welcome.call(2)], connection=conn
            )
    assert str(error.value).startswith(f"cannot enqueue 2 jobs ('welcome'): {store!r}: connection=")
    assert await _count(store) == 0


async def test_a_schema_of_a_newer_release_keeps_its_error_type_when_enqueued_in_a_transaction(
    postgres_dsn: str, newer_store: PostgresBackend
) -> None:
    from batchy_contrib.jobs.postgres import SchemaVersionError

    store = newer_store
    queue = Queue(store)

    @queue.job(name="welcome")
    async def welcome(user: int) -> None:
        return None

    try:
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            # It became a plain ConfigError that blamed connection=.
            with pytest.raises(SchemaVersionError) as error:
                await welcome.options(connection=conn).enqueue(1)
        assert str(error.value).startswith("cannot enqueue job 'welcome' (id ")
        assert "version 99" in str(error.value) and "connection=" not in str(error.value)
        with pytest.raises(SchemaVersionError):
            await welcome.enqueue(1)
    finally:
        await store.close()


async def test_a_stop_with_nothing_left_to_hand_in_does_not_wait_for_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from batchy.jobs import Outcome
    from batchy_contrib.jobs._postgres_later import PutOff

    never = asyncio.Event()

    async def hand_in(worker: str, outcomes: list[Outcome], wait: float) -> bool:
        await never.wait()  # its key is never free
        return True

    put_off = PutOff(hand_in, 1)
    put_off.add("w", [Outcome("j1", "done", token="t")], 30.0)
    await asyncio.sleep(0)
    put_off.lost("w", ["j1"])  # its lease moved on: the store would refuse it
    began = time.monotonic()
    await asyncio.wait_for(put_off.settle("w"), 1)  # it waited the whole lease
    assert time.monotonic() - began < 0.2
    assert "still waiting" not in caplog.text


class Heads:
    """A store with a small pool and a job type ``head`` whose runs note their name and time.

    ``pool_size=2`` leaves room for one hand-in of put-off outcomes at a time.
    """

    def __init__(self, dsn: str, schema: str) -> None:
        self.store = PostgresBackend(dsn, schema=schema, pool_size=2)
        self.queue = Queue(self.store)
        self.ran: list[str] = []
        self.at: dict[str, float] = {}

        @self.queue.job(name="head")
        async def head(name: str, seconds: float) -> None:
            await asyncio.sleep(seconds)
            self.ran.append(name)
            self.at[name] = time.monotonic()

        self.head = head

    async def begin(self, *runs: tuple[str, float]) -> None:
        """Each ``(key, seconds)``: a head of that key (named after it), running."""
        for key, seconds in runs:
            await self.head.options(key=key).enqueue(key, seconds)
        await asyncio.sleep(0.05)


async def test_hand_ins_waiting_for_keys_leave_the_pool_to_the_worker(
    postgres_dsn: str, postgres_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Two keys held by one open transaction, pool_size=2: each hand-in held a
    # connection while it waited, and turns, heartbeats and enqueues of the store
    # waited for the pool's 30 s timeout (a stop took 61 s).
    heads = Heads(postgres_dsn, postgres_schema)
    store, head, ran = heads.store, heads.head, heads.ran
    worker = Worker(heads.queue, concurrency=4, poll_interval=0.05, lease=2.0, shutdown_timeout=1.0)
    task = asyncio.create_task(worker.run())
    try:
        await heads.begin(("A", 0.2), ("B", 0.3))
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            async with conn.transaction():
                await head.options(key="A", connection=conn).enqueue("A2", 0)
                await head.options(key="B", connection=conn).enqueue("B2", 0)
                await asyncio.sleep(0.6)  # both heads done, both outcomes put off
                began = time.monotonic()
                await asyncio.wait_for(head.enqueue("plain", 0), 3)  # the pool has room
                while "plain" not in ran:
                    assert time.monotonic() - began < 3, ran
                    await asyncio.sleep(0.02)
                worker.stop()
                began = time.monotonic()
                await asyncio.wait_for(asyncio.shield(task), 10)
                assert time.monotonic() - began < 4.5  # shutdown, then one lease at most
        assert "PoolTimeout" not in caplog.text
    finally:
        worker.kill()
        await asyncio.gather(task, return_exceptions=True)
        await store.close()


@pytest.mark.parametrize("bad", [0, 1, -3, 2.5, "10", None])
def test_a_pool_too_small_for_a_worker_is_refused(bad: object) -> None:
    with pytest.raises(ConfigError) as error:
        PostgresBackend("postgresql://localhost/test", pool_size=bad)  # type: ignore[arg-type]
    assert str(error.value) == (
        f"PostgresBackend pool_size={bad!r} must be an int >= 2: a worker's turns, "
        "heartbeats and hand-ins of outcomes waiting for an ordering key each need a "
        "connection at times, and one would make them wait in turn; the default is 10"
    )


async def test_concurrent_enqueues_meeting_one_schema_error_each_name_their_own_job(
    newer_store: PostgresBackend,
) -> None:
    from batchy_contrib.jobs.postgres import SchemaVersionError

    store = newer_store
    queue = Queue(store)

    @queue.job(name="welcome")
    async def welcome(user: int) -> None:
        return None

    @queue.job(name="invoice")
    async def invoice(user: int) -> None:
        return None

    try:
        # Both wait on the store's one opening, which raises one error object: each
        # caller's job was written into that same object, the other's in front.
        errors = await asyncio.gather(
            welcome.enqueue(1), invoice.enqueue(2), return_exceptions=True
        )
    finally:
        await store.close()
    assert [type(e) for e in errors] == [SchemaVersionError, SchemaVersionError]
    first, second = (str(e) for e in errors)
    assert first.startswith("cannot enqueue job 'welcome' (id ") and "invoice" not in first
    assert second.startswith("cannot enqueue job 'invoice' (id ") and "welcome" not in second
    assert first.count("cannot enqueue") == second.count("cannot enqueue") == 1


async def test_a_key_held_long_does_not_hold_up_the_outcomes_of_a_key_already_free(
    postgres_dsn: str, postgres_schema: str
) -> None:
    # pool_size=2: one hand-in waits at a time. It waited for key A for as long as
    # A's transaction stayed open, and B's outcome (B's key long free) behind it.
    heads = Heads(postgres_dsn, postgres_schema)
    store, head, ran = heads.store, heads.head, heads.at
    worker = Worker(heads.queue, concurrency=4, poll_interval=0.05, lease=3.0)
    task = asyncio.create_task(worker.run())
    try:
        await heads.begin(("A", 0.1), ("B", 0.3))
        async with (
            await psycopg.AsyncConnection.connect(postgres_dsn) as long,
            await psycopg.AsyncConnection.connect(postgres_dsn) as short,
        ):
            async with long.transaction():
                await head.options(key="A", connection=long).enqueue("A2", 0)
                async with short.transaction():
                    await head.options(key="B", connection=short).enqueue("B2", 0)
                    await asyncio.sleep(0.6)  # A's head is done first: its hand-in waits
                committed = time.monotonic()
                while "B2" not in ran:
                    assert time.monotonic() - committed < 2.5, ran  # A stays open 4 s
                    await asyncio.sleep(0.02)
                await asyncio.sleep(max(0.0, 4.0 - (time.monotonic() - committed)))
                assert "A2" not in ran
        deadline = time.monotonic() + 10
        while "A2" not in ran:
            assert time.monotonic() < deadline, ran
            await asyncio.sleep(0.02)
    finally:
        worker.stop()
        await task
        await store.close()


def test_put_off_outcomes_are_handed_in_on_a_second_event_loop_too(
    postgres_dsn: str, postgres_schema: str
) -> None:
    # The hand-ins' semaphore was made once, bound to the first loop that waited on
    # it: on the next loop (asyncio.run twice) the hand-in failed and was dropped.
    heads = Heads(postgres_dsn, postgres_schema)
    store, head, ran = heads.store, heads.head, heads.ran

    async def round_(a: str, b: str) -> None:
        worker = Worker(heads.queue, concurrency=4, poll_interval=0.05, lease=3.0)
        task = asyncio.create_task(worker.run())
        await heads.begin((a, 0.1), (b, 0.2))
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            async with conn.transaction():
                await head.options(key=a, connection=conn).enqueue(a + "2", 0)
                await head.options(key=b, connection=conn).enqueue(b + "2", 0)
                # Both outcomes put off, one hand-in at a time; longer than the
                # tries of a failing hand-in (0.1 + 0.2 + 0.4 + 0.8 s).
                await asyncio.sleep(2.0)
        deadline = time.monotonic() + 6
        while not {a + "2", b + "2"} <= set(ran):
            assert time.monotonic() < deadline, ran
            await asyncio.sleep(0.02)
        worker.stop()
        await task
        await store.close()

    asyncio.run(round_("A", "B"))
    asyncio.run(round_("C", "D"))
    assert sorted(ran) == ["A", "A2", "B", "B2", "C", "C2", "D", "D2"]  # each once


async def test_an_enqueue_waiting_for_its_own_transactions_key_fails_with_the_fix(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    # The second enqueue forgot connection=: it waited for a key its own open
    # transaction holds, which cannot end until the enqueue returns (for ever, before).
    queue = Queue(store)

    @queue.job(name="sync_account", ordered_by="account")
    async def sync_account(account: int, step: str) -> None:
        return None

    with psycopg.connect(postgres_dsn, autocommit=True) as admin:  # the test's patience
        admin.execute(f"ALTER FUNCTION {store.names.quoted}.push(text[], text[], text[], "
                      "float8[], text[], float8[], text[]) SET lock_timeout = '300ms'")  # fmt: skip
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        async with conn.transaction():
            await sync_account.options(connection=conn).enqueue(42, "charge")
            with pytest.raises(ConfigError) as error:
                await asyncio.wait_for(sync_account.enqueue(42, "email"), 10)
            with pytest.raises(ConfigError):  # the blocking twin too
                await asyncio.to_thread(sync_account.enqueue_sync, 42, "email")
    assert str(error.value).startswith("cannot enqueue job 'sync_account' (id ")
    assert str(error.value).endswith(
        f"{store!r}: the ordering key 'sync_account:42' stayed held by another open "
        "transaction for 10 s: one that enqueued a job with such a key and has not ended. If "
        "that transaction is your own, enqueue in it (connection=...): this push waited for "
        "it, and it cannot end until the push returns; nothing was enqueued"
    )
    assert await _count(store) == 1  # the first, committed


async def test_an_operators_action_on_a_key_an_open_transaction_holds_fails_with_the_reason(
    store: PostgresBackend, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from batchy_contrib.jobs import _postgres_admin

    monkeypatch.setattr(_postgres_admin, "KEY_WAIT", "'300ms'")  # the test's patience
    queue = Queue(store)

    @queue.job(name="sync_account", ordered_by="account")
    async def sync_account(account: int, step: str) -> None:
        return None

    first = await sync_account.enqueue(7, "charge")
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        async with conn.transaction():  # holds key 7 until it ends
            await sync_account.options(connection=conn).enqueue(7, "email")
            with pytest.raises(JobStateError) as error:
                await asyncio.wait_for(queue.admin.delete(first.id), 10)
    assert str(error.value) == (
        f"cannot delete job(s) {first.id}: an ordering key of theirs (or their row) stayed "
        "held by another open transaction for 10 s, an application's that enqueued a job with "
        "that key, most likely; nothing changed. Try again once it has ended"
    )
    assert await queue.admin.delete(first.id) == 1  # once it has ended


async def test_a_connection_to_another_server_with_a_database_of_the_same_name_is_refused(
    store: PostgresBackend, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the database's name was compared: a connection to another server with a
    # database "test" and the store's schema (a staging copy, a restored dump) took
    # the job, which committed there and never ran. Here the store is told its
    # server is another one; it asks its own connection again before refusing.
    await store.pool()
    real = store._server
    assert real is not None and real.isdigit()  # the cluster's system identifier
    store._server = "1"  # as if its connection reached another cluster
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        assert await store.push([job()], time.time(), connection=conn) == [True]  # asked again
        await conn.rollback()
        assert store._server == real
    from batchy_contrib.jobs import _postgres_push

    monkeypatch.setattr(_postgres_push, "SERVER_ID", "SELECT '1'")  # the store's server says 1
    monkeypatch.setattr(_postgres_push, "OPENING", "SELECT '1', 'off', false")  # (as it opens)
    store._vouched.clear()
    for connect in (psycopg.AsyncConnection.connect, psycopg.Connection.connect):
        connection = connect(postgres_dsn)
        conn = await connection if asyncio.iscoroutine(connection) else connection
        store._server = "1"
        with pytest.raises(ConfigError) as error:
            if isinstance(conn, psycopg.AsyncConnection):
                await store.push([job()], time.time(), connection=conn)
            else:
                store.push_sync([job()], time.time(), connection=conn)
        assert conn.info.transaction_status == TransactionStatus.IDLE  # as it was
        assert str(error.value).startswith(f"{store!r}: connection=<psycopg.")
        assert str(error.value).endswith(
            f"> reaches another PostgreSQL server (system "
            f"identifier {real}) than this store's (1), though both have a database "
            f"{store._database!r}; the job would be written where no worker of this store "
            "looks: enqueue through a connection to the store's server, or leave out "
            "connection=; nothing was enqueued"
        )
        await conn.close() if isinstance(conn, psycopg.AsyncConnection) else conn.close()
    assert await _count(store) == 0


async def test_an_aborted_or_closed_connection_is_refused_with_the_reason(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    # A raw InFailedSqlTransaction (the blocking keyed path also left its cursor
    # open), and a closed autocommit connection was said to be in autocommit mode.
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            await conn.execute("SELECT 1 / 0")
        with pytest.raises(ConfigError) as error:
            await store.push([job()], time.time(), connection=conn)
        assert str(error.value) == (
            f"{store!r}: connection={conn!r} is in a transaction that an earlier statement's "
            "error aborted, so nothing it writes can commit; roll it back and enqueue in the "
            "transaction that runs again; nothing was enqueued"
        )
    sync = psycopg.connect(postgres_dsn, autocommit=True)
    sync.close()
    with pytest.raises(ConfigError) as error:
        store.push_sync([job()], time.time(), connection=sync)
    assert str(error.value) == (
        f"{store!r}: connection={sync!r} is closed; enqueue through the open connection your "
        "transaction runs on; nothing was enqueued"
    )


async def test_keyed_jobs_in_a_transaction_under_client_encoding_sql_ascii_are_taken(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    # psycopg gives text as bytes under SQL_ASCII: the isolation level read as
    # b'read committed' was refused as not READ COMMITTED, by a message that said it was.
    keyed = Envelope(uuid.uuid4().hex, "default", job().payload, key="account-7")
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        await conn.execute("SET client_encoding TO 'SQL_ASCII'")
        assert await store.push([keyed], time.time(), connection=conn) == [True]
        await conn.commit()
    assert (await store.status(keyed.id, time.time())).state == "queued"


async def test_an_id_the_connections_encoding_cannot_carry_is_refused_by_name(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    env = Envelope("order-\u20ac5", "default", job().payload)
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        await conn.execute("SET client_encoding TO 'LATIN1'")
        with pytest.raises(ConfigError) as error:
            await store.push([env], time.time(), connection=conn)
        assert str(error.value) == (
            f"{store!r}: connection={conn!r} uses client_encoding 'iso8859-1', which cannot "
            "carry '\u20ac' of job id 'order-\u20ac5' (or of its arguments); enqueue through a "
            "connection with client_encoding 'UTF8', or leave out connection=; nothing was "
            "enqueued"
        )
        await conn.rollback()
    assert await store.push([env], time.time()) == [True]  # the store's own connection: UTF8


async def test_an_id_another_open_transaction_is_enqueueing_fails_with_the_reason(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    # A second request enqueueing the same options(id=...) as an open transaction
    # got a bare LockNotAvailable after 10 s, which named neither the id nor the fix.
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:  # the test's patience
        admin.execute(f"ALTER FUNCTION {store.names.quoted}.push(text[], text[], text[], "
                      "float8[], text[], float8[], text[]) SET lock_timeout = '300ms'")  # fmt: skip
    env = Envelope("welcome-42", "default", job().payload)
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        async with conn.transaction():
            await store.push([env], time.time(), connection=conn)
            with pytest.raises(ConfigError) as error:
                await store.push([env], time.time())
    assert str(error.value) == (
        f"{store!r}: another open transaction is enqueueing a job with one of these ids or "
        "unique keys (job id 'welcome-42') and has not ended after 10 s. If that transaction "
        "is your own, enqueue in it (connection=...); otherwise the id is taken once it "
        "commits. Nothing was enqueued"
    )
    assert await store.push([env], time.time()) == [False]  # committed: the id is taken


async def test_keyed_enqueues_in_opposite_orders_deadlock_with_a_note_on_the_fix(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    def keyed(key: str) -> Envelope:
        return Envelope(uuid.uuid4().hex, "default", job().payload, key=key)

    async with (
        await psycopg.AsyncConnection.connect(postgres_dsn) as one,
        await psycopg.AsyncConnection.connect(postgres_dsn) as two,
    ):
        await store.push([keyed("a")], time.time(), connection=one)
        await store.push([keyed("b")], time.time(), connection=two)
        results = await asyncio.gather(
            store.push([keyed("b")], time.time(), connection=one),
            store.push([keyed("a")], time.time(), connection=two),
            return_exceptions=True,
        )
        await one.rollback()
        await two.rollback()
    (deadlock,) = [r for r in results if isinstance(r, BaseException)]
    assert isinstance(deadlock, psycopg.errors.DeadlockDetected)  # the driver's, to retry on
    assert deadlock.__notes__[-1].endswith(
        "in opposite orders; enqueue a transaction's keyed jobs in one enqueue_many (it takes "
        "their keys in one order), or in a fixed order"
    )


async def test_a_unique_key_an_open_transaction_took_over_does_not_hold_the_workers_turns(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    # The prune waited for the unique key's row: the turn, its claims and (turns
    # being one at a time per process) every job of the process waited for the
    # application's transaction to end.
    def unique(ttl: float) -> Envelope:
        return Envelope(
            uuid.uuid4().hex, "default", job().payload, unique="nightly", unique_ttl=ttl
        )

    assert await store.push([unique(0.01)], time.time()) == [True]
    await asyncio.sleep(0.05)  # expired, not pruned yet
    ready = job()
    assert await store.push([ready], time.time()) == [True]
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        # The app's transaction takes over the expired key: its row stays locked.
        assert await store.push([unique(60)], time.time(), connection=conn) == [True]
        store._pruned = -math.inf  # this turn prunes
        claims = await asyncio.wait_for(
            store.cycle([], ["default"], 10, "w1", 30.0, time.time()), 5
        )
        assert ready.id in [c.id for c in claims]
        await conn.rollback()


async def test_a_blocking_enqueue_waiting_for_a_key_does_not_hold_up_other_threads(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    # Every enqueue_sync without connection= ran on one shared connection under a
    # lock: a request waiting for a key held by an open transaction (up to 10 s)
    # held up every other thread's enqueue, keyed or not, just as long.
    def keyed(key: str) -> Envelope:
        return Envelope(uuid.uuid4().hex, "default", job().payload, key=key)

    store.push_sync([job()], time.time())  # the blocking side is open
    with psycopg.connect(postgres_dsn) as holder:
        store.push_sync([keyed("account-7")], time.time(), connection=holder)  # holds the key
        waiting = asyncio.create_task(
            asyncio.to_thread(store.push_sync, [keyed("account-7")], time.time())
        )
        await asyncio.sleep(0.3)  # it waits for the key now
        assert not waiting.done()
        await asyncio.to_thread(store.push_sync, [job()], time.time())
        assert not waiting.done()  # this one went past it: the key is still held
        holder.rollback()
        assert await asyncio.wait_for(waiting, 10) == [True]


async def test_an_outcome_put_off_behind_a_key_outlasts_a_statement_timeout_of_the_role(
    postgres_dsn: str, postgres_schema: str
) -> None:
    # Each try of a hand-in waiting for a key was cut by the role's (here the
    # connection's) statement_timeout; after five the outcome was dropped and the
    # finished job ran again, on a worker that was never paused or killed.
    dsn = psycopg.conninfo.make_conninfo(postgres_dsn, options="-c statement_timeout=150ms")
    store = PostgresBackend(dsn, schema=postgres_schema)
    queue = Queue(store)
    runs: list[int] = []

    @queue.job(name="sync_account", ordered_by="account")
    async def sync_account(account: int, step: int) -> None:
        if (account, step) == (7, 0):
            await asyncio.sleep(0.5)  # ends while the transaction below holds its key
        runs.append(step)

    worker = Worker(queue, concurrency=2, poll_interval=0.05, lease=30)
    task = asyncio.create_task(worker.run())
    try:
        await sync_account.enqueue(7, 0)
        await asyncio.sleep(0.1)
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
            async with conn.transaction():  # holds key 7 past five cut tries
                await sync_account.options(connection=conn).enqueue(7, 1)
                await sync_account.enqueue(8, 0)  # a head of another key: it runs
                await asyncio.sleep(4.5)
        for _ in range(100):
            if runs.count(1) == 1:
                break
            await asyncio.sleep(0.05)
        assert sorted(runs) == [0, 0, 1]  # each once
    finally:
        worker.stop()
        await asyncio.wait_for(task, 10)
        await store.close()


async def test_a_hand_in_that_failed_in_an_outage_goes_in_about_a_second_after_it() -> None:
    # Its pause between tries grew to 5 s, slept out with the store back: the
    # key's next job waited for the outcome that long after the outage.
    import logging

    from batchy.jobs import Outcome
    from batchy_contrib.jobs._postgres_later import PutOff

    tries: list[float] = []
    down = True

    async def hand_in(worker: str, outcomes: list[Outcome], wait: float) -> bool:
        tries.append(time.monotonic())
        if down:
            raise ConnectionError("connection refused")
        return True

    put_off = PutOff(hand_in, 1)
    logging.getLogger("batchy.jobs").disabled = True  # its warning after five failures
    try:
        put_off.add("w", [Outcome("j1", "done", token="t")], 30.0)
        while len(tries) < 5:  # pauses of 0.2, 0.4, 0.8 s, then (before) 1.6 and 3.2 s
            await asyncio.sleep(0.005)
        down, back = False, time.monotonic()
        await asyncio.wait_for(put_off.settle("w"), 10)
    finally:
        logging.getLogger("batchy.jobs").disabled = False
    assert len(tries) == 6 and tries[-1] - back < 2.0, [t - back for t in tries]
