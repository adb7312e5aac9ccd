"""The PostgreSQL store beyond the shared suite: SKIP LOCKED claims, LISTEN wake-ups, schema, bloat."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator

import psycopg
import pytest

from batchy.jobs import Envelope, Outcome, Queue, Worker, WorkerInfo
from batchy_contrib.jobs._postgres_pools import Reach, async_pool
from batchy_contrib.jobs._postgres_schema import Names, ensure_sync
from batchy_contrib.jobs._postgres_sql import VERSION
from batchy_contrib.jobs.postgres import PostgresBackend, SchemaVersionError

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def store(postgres_dsn: str, postgres_schema: str) -> AsyncIterator[PostgresBackend]:
    backend = PostgresBackend(postgres_dsn, schema=postgres_schema)
    yield backend
    await backend.close()


def envelopes(n: int, queue: str = "default") -> list[Envelope]:
    return [Envelope(f"job{i:04d}", queue, "{}") for i in range(n)]


async def test_two_workers_claiming_at_once_never_claim_a_job_twice(
    store: PostgresBackend, postgres_dsn: str, postgres_schema: str
) -> None:
    other = PostgresBackend(postgres_dsn, schema=postgres_schema)  # its own pool
    await store.push(envelopes(400), time.time())
    claimed: dict[str, list[str]] = {"a": [], "b": []}

    async def claim(backend: PostgresBackend, name: str) -> None:
        while True:
            got = await backend.cycle([], ["default"], 7, name, 30.0, time.time())
            if not got:
                return
            claimed[name] += [c.id for c in got]

    try:
        await asyncio.gather(*(claim(b, n) for b, n in ((store, "a"), (other, "b"))))
    finally:
        await other.close()
    everything = claimed["a"] + claimed["b"]
    assert len(everything) == 400 and len(set(everything)) == 400
    assert claimed["a"] and claimed["b"]  # both claimed: neither waited for the other


async def test_an_idle_worker_starts_a_pushed_job_within_milliseconds(
    store: PostgresBackend,
) -> None:
    queue = Queue(store)
    lags: list[float] = []

    @queue.job
    async def stamp(sent: float) -> None:
        lags.append(time.perf_counter() - sent)

    worker = Worker(queue, poll_interval=5.0)
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(0.3)  # idle: it waits on LISTEN
        for _ in range(5):
            await stamp.enqueue(time.perf_counter())
            await asyncio.sleep(0.1)
    finally:
        worker.stop()
        await task
    assert len(lags) == 5 and max(lags) < 0.1, lags


async def test_a_full_cycle_passes_its_wake_up_on_in_its_process_without_a_notify(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    """One push wakes one of two idle workers; its cycle has room for one job of three,
    so the wake-up goes on to the other worker, in this process: the server sends no
    second NOTIFY (every process heard the push's; a NOTIFY per full cycle cost the
    server about a tenth of a no-op job)."""
    await store.migrate()
    heard = await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True)
    try:
        await heard.execute(f'LISTEN "{store.names.channel}"')
        waits = {w: asyncio.ensure_future(store.wait_for_work(w, ["default"], 10.0)) for w in "ab"}
        await asyncio.sleep(0.2)  # both wait
        await store.push(envelopes(3), time.time())  # one transaction: one NOTIFY
        done, _ = await asyncio.wait(waits.values(), return_when=asyncio.FIRST_COMPLETED)
        await asyncio.sleep(0.2)
        assert len(done) == 1  # one wake-up, one worker
        (woken,) = (w for w, f in waits.items() if f in done)
        (other,) = set(waits) - {woken}
        assert len(await store.cycle([], ["default"], 1, woken, 30.0, time.time())) == 1
        await asyncio.wait_for(waits[other], 1.0)  # passed on
        notes = []
        async for note in heard.notifies(timeout=0.5):
            notes.append(note.payload)
        assert notes == ["1default"]  # the push's; the full cycle sent none
    finally:
        for future in waits.values():
            future.cancel()
        await heard.close()


async def test_a_full_cycle_that_took_the_last_ready_job_wakes_nobody(
    store: PostgresBackend,
) -> None:
    """The wake-up goes on only for queues with ready jobs left (the server looks):
    a full cycle that emptied its queue would only make another worker look in vain."""
    await store.migrate()
    waits = [asyncio.ensure_future(store.wait_for_work(w, ["default"], 10.0)) for w in "ab"]
    try:
        await asyncio.sleep(0.2)
        await store.push(envelopes(1), time.time())
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        assert len(await store.cycle([], ["default"], 1, "a", 30.0, time.time())) == 1
        await asyncio.sleep(0.3)
        assert sum(f.done() for f in waits) == 1  # the other one still waits
    finally:
        for future in waits:
            future.cancel()


def test_a_job_updated_while_a_claim_runs_is_claimed_not_only_locked(
    postgres_dsn: str, postgres_schema: str
) -> None:
    """A claim that meets a ready row updated after its statement began (another
    worker claimed and released it) locks the row's newest version: it must claim
    it too, not leave it locked and unclaimed until its turn commits. A claim that
    found its rows again by address (ctid) missed such a row."""
    names = Names(postgres_schema)
    s = names.quoted
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        ensure_sync(admin, names)
        # Many rows held by another transaction make the claim's scan take a while.
        admin.execute(
            f"INSERT INTO {s}.jobs (id, queue, payload, due, state) "
            "SELECT 'j' || g, 'q', '{}', 0, 0 FROM generate_series(1, 150000) g"
        )
        admin.execute(
            f"INSERT INTO {s}.jobs (id, queue, payload, due, state) VALUES ('t', 'q', '{{}}', 1, 0)"
        )
        admin.execute(f"ANALYZE {s}.jobs")
        with psycopg.connect(postgres_dsn) as holder:
            holder.execute(f"SELECT id FROM {s}.jobs WHERE id <> 't' FOR UPDATE").fetchall()
            got: list[tuple[str, str]] = []

            def claim() -> None:
                with psycopg.connect(
                    postgres_dsn, autocommit=True, application_name="batchy-claim-under-test"
                ) as a:
                    got.extend(
                        a.execute(
                            f"SELECT kind, id FROM {s}.cycle('[]'::jsonb, ARRAY['q'], 1, 'wA', "
                            "30, 100, 3600, 0, false)"
                        ).fetchall()
                    )

            thread = threading.Thread(target=claim)
            thread.start()
            # Its claim is scanning past the held rows: seen running on the server, not
            # assumed after a pause (on a busy machine the thread took longer to get
            # there, and the update below came before its statement began).
            deadline = time.monotonic() + 10
            while not admin.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = "
                "'batchy-claim-under-test' AND state = 'active' AND query LIKE '%cycle(%' "
                "AND backend_xmin IS NOT NULL"
            ).fetchone():
                assert time.monotonic() < deadline, "the claim never started"
                time.sleep(0.002)
            time.sleep(0.02)  # past the cycle's first steps, into the claim's scan
            admin.execute(
                f"UPDATE {s}.jobs SET state = 1, owner = 'wB', token = 'tokB', "
                f"lease = {s}.clock() + 30 WHERE id = 't'"
            )
            release = '[["release", "t", "tokB", "q", null, 0, null, 0, "", ""]]'
            admin.execute(
                f"SELECT * FROM {s}.cycle(%s::jsonb, ARRAY['q'], 0, 'wB', 30, 100, 3600, 0, false)",
                (release,),
            ).fetchall()
            thread.join(30)
            holder.rollback()
        owner = admin.execute(f"SELECT state, owner FROM {s}.jobs WHERE id = 't'").fetchone()
    assert [row for row in got if row[0] == "c"] == [("c", "t")] and owner == (1, "wA")


async def test_a_killed_listen_connection_comes_back_and_loses_nothing(
    store: PostgresBackend, postgres_dsn: str
) -> None:
    queue = Queue(store)
    ran: list[int] = []

    @queue.job
    async def note(n: int) -> None:
        ran.append(n)

    worker = Worker(queue, poll_interval=30.0)  # a poll never rescues it here
    task = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(0.3)
        listener = store._listener
        assert listener is not None and listener.connection is not None
        pid = listener.connection.info.backend_pid
        async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            # Pushed while the listener is down: its NOTIFY reaches nobody.
            await note.enqueue(1)
        deadline = time.monotonic() + 5
        while 1 not in ran:
            assert time.monotonic() < deadline, "the job pushed during the outage never ran"
            await asyncio.sleep(0.01)
        assert listener.reconnects == 1
        start = time.monotonic()
        await note.enqueue(2)  # and wake-ups work again
        while 2 not in ran:
            assert time.monotonic() - start < 1.0, "no wake-up after the reconnect"
            await asyncio.sleep(0.005)
    finally:
        worker.stop()
        await task
    assert ran == [1, 2]


async def test_the_schema_is_versioned_made_once_and_refuses_a_newer_one(
    store: PostgresBackend, postgres_dsn: str, postgres_schema: str
) -> None:
    await store.migrate()
    again = PostgresBackend(postgres_dsn, schema=postgres_schema)
    await again.migrate()  # a second creation is a no-op
    await again.close()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        version = f'SELECT version FROM "{postgres_schema}".version'
        assert conn.execute(version).fetchall() == [(VERSION,)]
        conn.execute(f'UPDATE "{postgres_schema}".version SET version = 99')
    newer = PostgresBackend(postgres_dsn, schema=postgres_schema)
    with pytest.raises(SchemaVersionError, match="of version 99, newer than this release"):
        await newer.push(envelopes(1), time.time())
    await newer.close()


async def test_a_store_whose_step_fails_says_so_at_once_not_after_the_pools_timeout(
    store: PostgresBackend, postgres_dsn: str, postgres_schema: str
) -> None:
    await store.migrate()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f'DROP TABLE "{postgres_schema}".cancels')  # the cycle reads it
    broken = PostgresBackend(postgres_dsn, schema=postgres_schema)
    began = time.monotonic()
    # The pool's configure only logged this and retried until its 30 s timeout.
    with pytest.raises(psycopg.errors.UndefinedTable, match="cancels"):
        await asyncio.wait_for(broken.push(envelopes(1), time.time()), 20)
    assert time.monotonic() - began < 10
    await broken.close()


async def test_a_version_1_schema_is_migrated_to_the_current_one(
    store: PostgresBackend, postgres_dsn: str, postgres_schema: str
) -> None:
    await store.push(envelopes(2), time.time())
    await store.cycle([], ["default"], 1, "w", 60.0, time.time())  # one waits, one runs
    await store.close()
    schema = f'"{postgres_schema}"'
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        # Back to what version 1 had: no cancels, no index of blocked jobs, no counts,
        # no runs, results without what the job was, no check of claims' tokens, a
        # heartbeat that said state = 1.
        # (Its heartbeat returned ids alone: a new result type takes a drop.)
        conn.execute(f"ALTER TABLE {schema}.jobs DROP CONSTRAINT jobs_claimed")
        conn.execute(f"DROP FUNCTION {schema}.heartbeat(text, text, float8, text[], text[])")
        conn.execute(f"CREATE FUNCTION {schema}.heartbeat(p_worker text, p_info text, "
                     "p_lease float8, p_ids text[], p_tokens text[]) RETURNS SETOF text "
                     "LANGUAGE sql AS $$ SELECT 'j.state = 1' $$")  # fmt: skip
        for name, returns in (("lock_keys", "void"), ("try_lock_keys", "text[]")):
            conn.execute(f"CREATE OR REPLACE FUNCTION {schema}.{name}(p_keys text[]) "
                         f"RETURNS {returns} LANGUAGE plpgsql AS $$ BEGIN END $$")  # fmt: skip
        conn.execute(f"DROP TABLE {schema}.cancels; DROP INDEX {schema}.jobs_blocked")
        conn.execute(f"DROP TABLE {schema}.counts; DROP TABLE {schema}.runs")
        conn.execute(
            f"ALTER TABLE {schema}.results DROP COLUMN queue, DROP COLUMN okey, DROP COLUMN payload"
        )
        # Its step took ten arrays of outcome fields (version 6 takes one JSON array).
        conn.execute(
            f"CREATE FUNCTION {schema}.cycle(text[], text[], text[], text[], text[], float8[], "
            "text[], float8[], text[], text[], text[], int, text, float8, int, float8, int) "
            "RETURNS TABLE (kind text, id text, queue text, payload text, token text) "
            "LANGUAGE sql AS $$ SELECT NULL::text, NULL, NULL, NULL, NULL $$"
        )
        conn.execute(f"UPDATE {schema}.version SET version = 1")
    again = PostgresBackend(postgres_dsn, schema=postgres_schema)
    await again.migrate()
    await again.close()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        assert conn.execute(f"SELECT version FROM {schema}.version").fetchall() == [(VERSION,)]
        steps = conn.execute(
            "SELECT pg_get_function_identity_arguments(p.oid), p.prosrc FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %s "
            "AND p.proname = 'cycle'",
            (postgres_schema,),
        ).fetchall()
        assert len(steps) == 1 and steps[0][0].startswith("p_outcomes jsonb")
        assert "'m'::text" in steps[0][1]  # version 8's step
        assert "j.id = ANY(ARRAY(SELECT x.id" in steps[0][1]  # version 9's
        assert "INTO k_ids, k_keys FROM" in steps[0][1]  # version 10's
        beat = conn.execute(
            "SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = %s AND p.proname = 'heartbeat'",
            (postgres_schema,),
        ).fetchall()
        assert len(beat) == 1 and "FOR UPDATE OF x SKIP LOCKED" in beat[0][0]  # version 11's
        assert "RETURN QUERY SELECT u.id, u.token" in beat[0][0]  # version 14's
        scans = conn.execute(
            "SELECT p.proname, p.proconfig FROM pg_proc p JOIN pg_namespace n "
            "ON n.oid = p.pronamespace WHERE n.nspname = %s "
            "AND p.proname NOT IN ('clock', 'wake', 'lock_keys', 'try_lock_keys') ORDER BY 1",
            (postgres_schema,),
        ).fetchall()
        readers = ["advance", "cycle", "heartbeat", "next_due", "push", "retry_dead"]
        waiting = {"push", "retry_dead"}  # for an ordering key, 10 s at most: version 11's
        assert scans == [
            (
                name,
                [
                    "enable_seqscan=off",
                    "jit=off",
                    *(["lock_timeout=10s"] * (name in waiting)),
                    "search_path=pg_catalog, pg_temp",  # version 16's
                ],
            )
            for name in readers
        ]
        locks = conn.execute(
            "SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n "
            "ON n.oid = p.pronamespace WHERE n.nspname = %s AND p.proname LIKE '%%lock_keys'",
            (postgres_schema,),
        ).fetchall()
        assert sorted(name for name, _ in locks) == ["lock_keys", "try_lock_keys"]
        assert all("SELECT DISTINCT hashtext(x)" in src for _, src in locks)  # version 9's
        # The check holds the rows that were there, and every write from now on.
        with pytest.raises(psycopg.errors.CheckViolation, match="jobs_claimed"):
            conn.execute(f"UPDATE {schema}.jobs SET state = 0 WHERE state = 1")
        with pytest.raises(psycopg.errors.CheckViolation, match="jobs_claimed"):
            conn.execute(f"UPDATE {schema}.jobs SET token = 'x' WHERE state = 0")
        assert conn.execute(f"SELECT count(*) FROM {schema}.cancels").fetchall() == [(0,)]
        assert conn.execute(f"SELECT count(*) FROM {schema}.counts").fetchall() == [(0,)]
        assert conn.execute(f"SELECT count(*) FROM {schema}.runs").fetchall() == [(0,)]
        kept = f"SELECT count(queue), count(okey), count(payload) FROM {schema}.results"
        assert conn.execute(kept).fetchall() == [(0, 0, 0)]
        found = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
            (postgres_schema, "jobs_blocked"),
        ).fetchall()
        assert found == [("jobs_blocked",)]


async def test_a_version_12_schema_gets_the_push_that_a_skipped_envelope_takes_nothing_from(
    store: PostgresBackend, postgres_dsn: str, postgres_schema: str
) -> None:
    await store.migrate()
    await store.close()
    schema = f'"{postgres_schema}"'
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        # Version 12's push, as far as this test can tell: it stores nothing.
        conn.execute(
            f"CREATE OR REPLACE FUNCTION {schema}.push(p_ids text[], p_queues text[], "
            "p_payloads text[], p_offsets float8[], p_uniques text[], p_ttls float8[], "
            "p_keys text[]) RETURNS boolean[] LANGUAGE sql AS $$ SELECT ARRAY[]::boolean[] $$"
        )
        conn.execute(f"UPDATE {schema}.version SET version = 12")
    again = PostgresBackend(postgres_dsn, schema=postgres_schema)
    try:
        now = time.time()
        assert await again.push([Envelope("job", "a", "{}")], now) == [True]
        skipped = Envelope("job", "b", "{}", unique="once", unique_ttl=60.0)
        other = Envelope("other", "a", "{}", unique="once", unique_ttl=60.0)
        assert await again.push([skipped, other], now) == [False, True]
        assert [q.name for q in (await again.info(now)).queues] == ["a"]
    finally:
        await again.close()


async def test_a_bad_schema_name_is_refused() -> None:
    from batchy.jobs import ConfigError

    with pytest.raises(ConfigError, match="schema='bad name'"):
        PostgresBackend("postgresql://x/y", schema="bad name")


async def test_done_jobs_leave_at_once_and_expired_results_in_batches(
    postgres_dsn: str, postgres_schema: str
) -> None:
    store = PostgresBackend(postgres_dsn, schema=postgres_schema, prune_batch=10, prune_every=0)
    try:
        await store.push(envelopes(25), time.time())
        got = await store.cycle([], ["default"], 25, "w", 30.0, time.time())
        done = [Outcome(c.id, "done", token=c.token, result="1", keep=0.05) for c in got]
        await store.cycle(done, [], 0, "w", 30.0, time.time())
        s = postgres_schema
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:

            def count(table: str) -> int:
                return conn.execute(f'SELECT count(*) FROM "{s}".{table}').fetchone()[0]  # type: ignore[index]

            assert count("jobs") == 0  # a done job's row is deleted by its outcome
            assert count("results") == 25
            await asyncio.sleep(0.1)  # the results expire
            left = []
            for _ in range(3):
                await store.cycle([], ["default"], 1, "w", 30.0, time.time())
                left.append(count("results"))
        assert left == [15, 5, 0]  # at most prune_batch rows per cycle
    finally:
        await store.close()


class Partition:
    """A TCP proxy to the server that can stop forwarding: sockets stay open, nothing
    arrives (a network partition, or a connection a load balancer dropped silently)."""

    def __init__(self, dsn: str) -> None:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
        self.target = (str(info.get("host", "127.0.0.1")), int(info.get("port", 5432)))
        self.open = asyncio.Event()
        self.open.set()
        self.server: asyncio.Server | None = None
        self.pipes: set[asyncio.Task[None]] = set()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self.open.wait()
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        for a, b in ((reader, up_writer), (up_reader, writer)):
            pipe = asyncio.create_task(self._pipe(a, b))
            self.pipes.add(pipe)
            pipe.add_done_callback(self.pipes.discard)

    async def start(self, dsn: str) -> str:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        info = psycopg.conninfo.conninfo_to_dict(dsn)
        info.update(host="127.0.0.1", port=str(port))
        return psycopg.conninfo.make_conninfo(**info)

    async def close(self) -> None:
        self.open.set()
        if self.server is not None:
            self.server.close()
        for pipe in list(self.pipes):
            pipe.cancel()
        await asyncio.gather(*self.pipes, return_exceptions=True)


async def test_a_stop_while_the_server_stops_answering_returns_and_loses_no_job(
    postgres_dsn: str, postgres_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    partition = Partition(postgres_dsn)
    store = PostgresBackend(await partition.start(postgres_dsn), schema=postgres_schema)
    queue = Queue(store)
    runs: list[int] = []

    @queue.job(name="slow")
    async def slow(i: int) -> None:
        runs.append(i)
        await asyncio.sleep(0.3)

    handle = await slow.enqueue(1)
    worker = Worker(queue, poll_interval=0.05, lease=2.0, shutdown_timeout=0.5)
    task = asyncio.create_task(worker.run())
    try:
        while not runs:
            await asyncio.sleep(0.01)
        partition.open.clear()  # the network goes quiet
        worker.stop()
        began = time.monotonic()
        # It waited for as long as the partition lasted.
        await asyncio.wait_for(asyncio.shield(task), 15)
        # Grace, the last turn (a lease), the background tasks' end, slack: the counters
        # and the goodbye are not sent to a store that no longer answers.
        assert time.monotonic() - began < 0.5 + 2 + 1 + 1.5
        assert "did not answer within 2s (the worker's lease)" in caplog.text
    finally:
        partition.open.set()
        worker.kill()
        await asyncio.gather(task, return_exceptions=True)
        await store.close()
        await partition.close()
    # Nothing lost. What the proxy held back reaches the server as the partition
    # ends (the last hand-in, a heartbeat renewing the lease): once that lease has
    # run out, the job is done, by that late hand-in or by a second run.
    again = PostgresBackend(postgres_dsn, schema=postgres_schema)
    try:
        queue.backend = again
        await asyncio.sleep(2.2)
        await Worker(queue, burst=True, poll_interval=0.05).run()
        assert runs in ([1], [1, 1])
        assert (await handle.status()).state == "done"
    finally:
        await again.close()


async def test_a_heartbeat_never_deadlocks_with_its_workers_turn(store: PostgresBackend) -> None:
    # The heartbeat renews finished jobs until their outcomes are in, so it and the
    # turn that hands those in write the same rows, each in its own order (claim
    # order, finish order): PostgreSQL aborted one of them after deadlock_timeout.
    info = WorkerInfo("w", "host", 1, ("default",), 100, (), time.time())
    for r in range(15):
        await store.push([Envelope(f"r{r}j{i}", "default", "{}") for i in range(100)], time.time())
        claims = await store.cycle([], ["default"], 100, "w", 30.0, time.time())
        held = [(c.id, c.token) for c in claims]
        finished = [Outcome(c.id, "done", token=c.token) for c in reversed(claims)]
        turn, _ = await asyncio.gather(  # before: DeadlockDetected, one time in six
            store.cycle(finished, [], 0, "w", 30.0, time.time()),
            store.heartbeat(info, held, 30.0, time.time()),
        )
        assert turn.refused == [], r  # (the beat may come after: then the jobs are gone)
    assert await store._one(store.names.sql("SELECT count(*) FROM {s}.jobs")) == 0
    # A lease that really moved on is still reported lost, skipped rows or not.
    await store.push(envelopes(2), time.time())
    a, b = await store.cycle([], ["default"], 2, "w", 30.0, time.time())
    assert await store.heartbeat(info, [(a.id, a.token), (b.id, "stale")], 30.0, time.time()) == [
        b.id
    ]


async def test_a_user_with_table_rights_only_uses_a_schema_made_before(
    store: PostgresBackend, postgres_dsn: str, postgres_schema: str
) -> None:
    # The docs ask for CREATE the first time only; every new pool ran CREATE SCHEMA /
    # CREATE TABLE IF NOT EXISTS, which PostgreSQL checks before the IF NOT EXISTS.
    await store.migrate()
    role = f"batchy_app_{postgres_schema[-12:]}"
    s = f'"{postgres_schema}"'
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"GRANT USAGE ON SCHEMA {s} TO {role}")
        admin.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {s} TO {role}")
        admin.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {s} TO {role}")
        admin.execute(f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {s} TO {role}")
    app = PostgresBackend(postgres_dsn.replace("postgres@", f"{role}@"), schema=postgres_schema)
    try:
        assert await app.push(envelopes(2), time.time()) == [True, True]
        assert app.push_sync([Envelope("sync", "default", "{}")], time.time()) == [True]
        claimed = await app.cycle([], ["default"], 10, "w", 30.0, time.time())
        assert sorted(c.id for c in claimed) == ["job0000", "job0001", "sync"]
    finally:
        await app.close()
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


async def test_enqueues_after_a_server_restart_do_not_fail_on_connections_it_ended(
    postgres_dsn: str, postgres_schema: str
) -> None:
    # A restart or failover ends every idle connection; the next enqueues failed one
    # per pooled connection (five web requests per process), the blocking one once.
    name = f"batchy_{postgres_schema[-12:]}"
    store = PostgresBackend(f"{postgres_dsn}?application_name={name}", schema=postgres_schema)
    try:
        await store.push(envelopes(1), time.time())
        store.push_sync([Envelope("first", "default", "{}")], time.time())
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (name,),
            ).fetchall()
        assert len(ended) >= 2
        await asyncio.sleep(0.2)
        for i in range(6):
            assert await store.push([Envelope(f"after{i}", "default", "{}")], time.time()) == [True]
        assert store.push_sync([Envelope("sync", "default", "{}")], time.time()) == [True]
    finally:
        await store.close()


async def test_an_outage_line_gives_the_drivers_reason_when_connections_are_refused(
    postgres_dsn: str, postgres_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The pool retries a refused connect on its own: the worker's call only saw no
    # answer within the lease, and the line said so, not that the server refused.
    # A call in flight at the cut fails on the cut instead (its line gives that
    # reason, rightly): on a busy machine a heartbeat may be; then try again.
    for _ in range(3):
        caplog.clear()
        line = await _outage_line(postgres_dsn, postgres_schema, caplog)
        if "server closed the connection unexpectedly" not in line:
            break
    assert "did not answer within 1s (the worker's lease)" in line
    assert "its last try to connect failed: OperationalError: connection failed" in line
    assert "Connection refused" in line


async def _outage_line(
    postgres_dsn: str, postgres_schema: str, caplog: pytest.LogCaptureFixture
) -> str:
    """The outage line of a worker whose server's connections are cut and then refused."""
    params = psycopg.conninfo.conninfo_to_dict(postgres_dsn)
    proxy = _Cut((str(params.get("host", "127.0.0.1")), int(params.get("port", 5432))))
    await proxy.up()
    via = psycopg.conninfo.make_conninfo(postgres_dsn, host="127.0.0.1", port=proxy.port)
    store = PostgresBackend(via, schema=postgres_schema)
    queue = Queue(store)

    @queue.job(name="ping")
    async def ping() -> None:
        return None

    worker = Worker(queue, poll_interval=0.05, lease=1.0)
    task = asyncio.create_task(worker.run())
    try:
        await store.pool()
        await asyncio.sleep(0.2)  # the worker's turns go through the pool
        proxy.down()
        deadline = time.monotonic() + 10
        while "store unreachable" not in caplog.text:
            assert time.monotonic() < deadline, caplog.text
            await asyncio.sleep(0.05)
    finally:
        worker.kill()
        await asyncio.gather(task, return_exceptions=True)
        await store.close()
    (line,) = [r.getMessage() for r in caplog.records if "store unreachable" in r.getMessage()]
    return line


async def test_a_listen_connection_that_cannot_connect_warns_once_per_outage(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Every try warned, up to once a second: 36 lines in a 30 s outage per process.
    from batchy_contrib.jobs._postgres_listen import Listener

    tries = 0
    down = True

    async def connect() -> psycopg.AsyncConnection[object]:
        nonlocal tries
        tries += 1
        if down:
            raise psycopg.OperationalError("connection refused")
        return await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True)

    listener = Listener(connect, "batchy_listen_test")
    with caplog.at_level(logging.DEBUG, logger="batchy.jobs"):
        listener.start()
        await asyncio.sleep(1.2)
        down = False
        await asyncio.wait_for(listener.ready.wait(), 5)
    await listener.close()
    levels = [(r.levelname, r.getMessage()[:40]) for r in caplog.records]
    warnings = [m for level, m in levels if level == "WARNING"]
    assert tries >= 5 and warnings == ["batchy jobs: cannot LISTEN on PostgreSQL"], levels
    assert ("INFO", "batchy jobs: listening on PostgreSQL aga") in levels


async def test_opening_a_store_changes_nothing_in_it(
    store: PostgresBackend, postgres_dsn: str, postgres_schema: str
) -> None:
    # Each new connection warmed the cycle's plans with a cycle, which also handed
    # back expired leases: a read-only `batchy info` or dashboard changed the store,
    # and never showed a key stalled by a dead worker.
    await store.push(envelopes(1), time.time())
    (claim,) = await store.cycle([], ["default"], 1, "dead-worker", 0.2, time.time())
    await asyncio.sleep(0.4)  # its lease ran out: the worker died
    viewer = PostgresBackend(postgres_dsn, schema=postgres_schema)
    try:
        assert (await viewer.status(claim.id, time.time())).state == "running"
    finally:
        await viewer.close()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        row = conn.execute(
            f'SELECT state, token FROM "{postgres_schema}".jobs WHERE id = %s', (claim.id,)
        ).fetchone()
    assert row == (1, claim.token)  # still claimed, its lease expired: a worker's turn recovers it


async def test_a_schema_that_is_not_the_stores_own_is_refused_with_the_reason(
    postgres_dsn: str, postgres_schema: str
) -> None:
    # An app's `jobs` table in the schema failed with the server's DuplicateTable;
    # pg_* names with its ReservedName; public was taken as the store's.
    from batchy.jobs import ConfigError

    for name in ("public", "pg_jobs", "PG_Jobs"):
        with pytest.raises(ConfigError, match="needs a schema of its own"):
            PostgresBackend(postgres_dsn, schema=name)
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{postgres_schema}"')
        admin.execute(f'CREATE TABLE "{postgres_schema}".jobs (id int, title text)')
    store = PostgresBackend(postgres_dsn, schema=postgres_schema)
    with pytest.raises(ConfigError) as info:
        await store.migrate()
    await store.close()
    assert str(info.value) == (
        f'cannot create the job tables in schema {postgres_schema!r}: relation "jobs" already '
        "exists; the schema holds tables or functions that are not the store's. Give the "
        "store a schema of its own (schema=...); nothing was created"
    )
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:  # the app's table, alone
        tables = admin.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (postgres_schema,)
        ).fetchall()
    assert tables == [("jobs",)]


async def test_news_kept_while_nobody_waited_ends_the_next_wait_at_once() -> None:
    # A wake-up that came while the worker read when its next job falls due was
    # kept, then ignored by the wait that followed: the job waited a whole
    # poll_interval (9 of 400 enqueues in a run on this machine).
    from batchy_contrib.jobs._postgres_listen import Listener

    async def never() -> object:
        raise AssertionError("not connected in this test")

    listener = Listener(never, "batchy_listen_test")
    listener._deliver("default", due=False)  # nobody waits: kept
    began = asyncio.get_running_loop().time()
    assert await listener.wait(["default"], timeout=5) is True
    assert asyncio.get_running_loop().time() - began < 1
    assert await listener.wait(["default"], timeout=0.01) is False  # taken once


class _Cut:
    """A TCP proxy to the server that can go down (connections cut, new ones refused)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self.server: asyncio.Server | None = None
        self.port = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        pair = (writer, up_writer)
        self.pairs.add(pair)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        self.pairs.discard(pair)

    async def up(self) -> None:
        self.server = await asyncio.start_server(
            self._handle, "127.0.0.1", self.port, reuse_address=True
        )
        self.port = self.server.sockets[0].getsockname()[1]

    def down(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer, up_writer in self.pairs:
            writer.transport.abort()
            up_writer.transport.abort()
        self.pairs.clear()


async def test_a_worker_resumes_soon_after_the_server_is_back(
    postgres_dsn: str, postgres_schema: str
) -> None:
    # psycopg_pool's own reconnect waited 1, 2, 4, 8... s between tries: after an
    # 8 s outage the worker found no connection for seconds more (up to a minute
    # after longer ones), whatever its own retries.
    params = psycopg.conninfo.conninfo_to_dict(postgres_dsn)
    cut = _Cut((str(params.get("host", "127.0.0.1")), int(params.get("port", 5432))))
    await cut.up()
    via = psycopg.conninfo.make_conninfo(postgres_dsn, host="127.0.0.1", port=cut.port)
    started: dict[int, float] = {}
    worker_queue = Queue(PostgresBackend(via, schema=postgres_schema))
    client = Queue(PostgresBackend(postgres_dsn, schema=postgres_schema))
    for queue in (worker_queue, client):

        @queue.job(name="ping")
        async def ping(n: int) -> None:
            started[n] = time.monotonic()

    await client.backend.migrate()
    worker = Worker(worker_queue, concurrency=4, lease=5.0, poll_interval=0.2)
    run = asyncio.create_task(worker.run())
    try:
        await asyncio.sleep(1)
        cut.down()
        await asyncio.sleep(8)
        await cut.up()
        back = time.monotonic()
        await client.jobs["ping"].enqueue(1)
        for _ in range(200):
            if 1 in started:
                break
            await asyncio.sleep(0.05)
        assert 1 in started and started[1] - back < 4  # its own retries: 10 x poll_interval
    finally:
        worker.stop()
        await asyncio.wait_for(run, 15)
        await worker_queue.close()
        await client.close()
        cut.down()


async def test_psycopg_pool_lines_about_the_store_s_pools_are_kept_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # psycopg_pool logs a warning for each connect that fails: during an outage
    # a worker's tries made one or two a second, an hour of it thousands.
    async def configure(conn: psycopg.AsyncConnection[object]) -> None:
        return None

    pool = async_pool("postgresql://x@127.0.0.1:1/x", Reach("the store"), 2, configure)
    logger = logging.getLogger("psycopg.pool")

    def lines() -> None:
        logger.warning("error connecting in %r: %s", pool.name, "refused")
        logger.warning("error connecting in %r: %s", "pool-7", "refused")  # not the store's

    with caplog.at_level(logging.INFO):
        lines()
    assert [(r.levelname, r.args[0]) for r in caplog.records] == [("WARNING", "pool-7")]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="psycopg.pool"):
        lines()
    assert [(r.levelname, r.args[0]) for r in caplog.records] == [
        ("DEBUG", pool.name),
        ("WARNING", "pool-7"),
    ]
    assert pool.name == "batchy-jobs the store"
