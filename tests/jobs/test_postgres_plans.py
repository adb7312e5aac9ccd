"""The PostgreSQL store's statements do work in proportion to their own jobs, whatever ANALYZE saw.

The planner picks a plan from the table's statistics, and a queue's statistics
are a snapshot of a table that churns: taken while nothing ran, they say no job
is running. A statement that names ``state = 1`` may then read its jobs through
the partial index of every running job (``jobs_lease``) and compare each with
each outcome: work that grows with all the jobs the other workers run. These
tests run the store's steps under ``auto_explain`` and count the rows every plan
node produced and dropped, with statistics taken before and after other workers
claimed most of the table.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest

from batchy.jobs import Claimed, Envelope, Outcome, WorkerInfo
from batchy_contrib.jobs.postgres import PostgresBackend

pytestmark = pytest.mark.timeout(120)

N = 20_000  # jobs in the table
OTHERS = 10_000  # of them, run by other workers meanwhile
OWN = 100  # claimed by the worker under test
LEASE = 8.0  # the crashed workers' (long enough for their claims to be made)

# (PostgreSQL 18 shows rows per loop with decimals.)
_NODE = re.compile(r"\(actual (?:time=\S+ )?rows=([\d.]+) loops=(\d+)\)")
_REMOVED = re.compile(r"Rows Removed by (?:Join )?Filter: (\d+)")


def work(plans: list[str]) -> int:
    """Rows every node of ``plans`` produced or dropped, over all of its loops."""
    total = nodes = 0
    for plan in plans:
        loops = 1
        for line in plan.splitlines():
            if node := _NODE.search(line):
                loops = int(node[2])
                total += round(float(node[1]) * loops)
                nodes += 1
            elif removed := _REMOVED.search(line):
                total += int(removed[1]) * loops  # shown per loop
    assert nodes > 0, f"no plan nodes read from {plans!r}: has the format changed?"
    # A plan whose cost passes jit_above_cost is compiled on every run (25 ms).
    assert not [p for p in plans if "JIT:" in p], "a statement was JIT-compiled"
    return total


def analyze(dsn: str, schema: str) -> None:
    """Statistics of the jobs table now, and none taken by autovacuum after them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'ALTER TABLE "{schema}".jobs SET (autovacuum_enabled = false)')
        conn.execute(f'ANALYZE "{schema}".jobs')


class Explained(PostgresBackend):
    """The store, its connections logging the plan (with counts) of every statement."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.plans: list[str] = []

    async def _configure(self, conn: psycopg.AsyncConnection[Any]) -> None:
        conn.add_notice_handler(lambda d: self.plans.append(d.message_primary or ""))
        for setting in (
            "LOAD 'auto_explain'",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_nested_statements = on",
            "SET auto_explain.log_analyze = on",
            "SET auto_explain.log_timing = off",
            "SET auto_explain.log_level = notice",
            "SET client_min_messages = notice",
        ):
            await conn.execute(setting)
        await super()._configure(conn)


@pytest.fixture
async def explained(
    postgres_dsn: str, postgres_schema: str
) -> AsyncIterator[Callable[..., Explained]]:
    """Makes explained stores on the test's schema (``**options`` of the store); closes them."""
    made: list[Explained] = []

    def make(**options: Any) -> Explained:
        made.append(Explained(postgres_dsn, schema=postgres_schema, **options))
        return made[-1]

    yield make
    for store in made:
        await store.close()


def outcomes(claims: list[Claimed]) -> list[Outcome]:
    return [Outcome(c.id, "done", result="null", keep=3600.0, token=c.token) for c in claims]


@pytest.mark.parametrize("keyed", [False, True], ids=["no keys", "ordering keys"])
@pytest.mark.parametrize("analyzed", ["while empty", "before others claim", "while others run"])
async def test_the_worker_steps_read_their_own_jobs_not_every_running_one(
    postgres_dsn: str,
    postgres_schema: str,
    explained: Callable[..., Explained],
    analyzed: str,
    keyed: bool,
) -> None:
    """Plans that grew with the others' running jobs (a scan of ``jobs_lease`` per
    outcome, 650,000 rows for a turn of 100) fail; so would a scan of the table."""
    store = explained()
    now = time.time
    # With keys, a third of them two jobs per key: the second waits behind the
    # first (state 2).
    pushed = [
        Envelope(f"job{i:05d}", "default", "{}", key=f"k{i % (N * 3 // 4)}" if keyed else None)
        for i in range(N)
    ]
    if analyzed == "while empty":  # a new queue, analyzed before its first jobs
        await store.migrate()
        analyze(postgres_dsn, postgres_schema)
    for i in range(0, N, 1000):
        await store.push(pushed[i : i + 1000], now())
    if analyzed == "before others claim":
        analyze(postgres_dsn, postgres_schema)
    for _ in range(OTHERS // 100):
        await store.cycle([], ["default"], 100, "others", 60.0, now())
    if analyzed == "while others run":
        analyze(postgres_dsn, postgres_schema)
    mine = await store.cycle([], ["default"], OWN, "w", 60.0, now())

    store.plans.clear()
    again = await store.cycle(outcomes(mine), ["default"], OWN, "w", 60.0, now())
    assert len(mine) == len(again) == OWN and not again.refused
    # A turn hands in OWN outcomes and claims OWN jobs: a row counts once per
    # plan node it passes (about 20 times); a pass over the others' jobs, or
    # over the table, adds 10,000 or more.
    assert work(store.plans) < 40 * OWN, store.plans

    store.plans.clear()
    info = WorkerInfo("w", "host", 1, ("default",), OWN)
    lost = await store.heartbeat(info, [(c.id, c.token) for c in again], 60.0, now())
    assert lost == []
    assert work(store.plans) < 20 * OWN, store.plans

    store.plans.clear()
    assert await store.save_progress(again[0].id, again[0].token, "{}", 60.0, now())
    assert work(store.plans) < 10, store.plans


@pytest.mark.parametrize("analyzed", ["before others claim", "while others run"])
async def test_giving_back_expired_leases_reads_the_jobs_it_gives_back(
    postgres_dsn: str, postgres_schema: str, explained: Callable[..., Explained], analyzed: str
) -> None:
    """After a crash of many workers a turn gives back 1,000 of their jobs: it reads
    those, not all 40,000 (a plan that scans the table for them, or every
    expired lease, on every turn until they are all back)."""
    store = explained()
    now = time.time
    for i in range(0, 50_000, 5_000):
        await store.push([Envelope(f"job{j:05d}", "q", "{}") for j in range(i, i + 5_000)], 0.0)
    if analyzed == "before others claim":
        analyze(postgres_dsn, postgres_schema)
    start = time.monotonic()
    for _ in range(40):  # the workers that crash: their leases run out together
        await store.cycle([], ["q"], 1_000, "crashed", LEASE, now())
    assert time.monotonic() - start < LEASE, "claims slower than their lease"
    if analyzed == "while others run":
        analyze(postgres_dsn, postgres_schema)
    await asyncio.sleep(LEASE - (time.monotonic() - start) + 0.1)
    store.plans.clear()
    await store.cycle([], ["q"], 0, "w", 60.0, now())
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        back = f'SELECT count(*) FROM "{postgres_schema}".jobs WHERE state = 0'
        assert conn.execute(back).fetchone() == (11_000,)
    assert work(store.plans) < 12_000, store.plans  # 15,000 for the plan of version 8


async def test_a_keyed_backlog_that_came_after_the_statistics_is_not_read_per_turn(
    postgres_dsn: str, postgres_schema: str, explained: Callable[..., Explained]
) -> None:
    """Statistics taken while no job had an ordering key say the key index is empty:
    a plan may then read the keys of the outcomes' jobs through that index, every
    keyed job there is, on every turn, once a keyed backlog arrives."""
    store = explained()
    now = time.time
    for i in range(0, N, 1000):
        await store.push([Envelope(f"free{j:05d}", "q", "{}") for j in range(i, i + 1000)], 0.0)
    analyze(postgres_dsn, postgres_schema)  # no keys anywhere
    for i in range(0, N, 1000):  # a backlog of keyed jobs, two per key, after it
        await store.push(
            [Envelope(f"keyed{j:05d}", "k", "{}", key=f"k{j // 2}") for j in range(i, i + 1000)],
            0.0,
        )
    mine = await store.cycle([], ["k"], OWN, "w", 60.0, now())
    assert len(mine) == OWN
    store.plans.clear()
    again = await store.cycle(outcomes(mine), ["k"], OWN, "w", 60.0, now())
    assert len(again) == OWN and not again.refused
    assert work(store.plans) < 40 * OWN, store.plans  # 20,000 more for version 9's


async def free_jobs(store: Explained, dsn: str, schema: str, analyzed: str) -> None:
    """N jobs without keys in a new store, pushed after the empty table's statistics
    when ``analyzed`` is "while empty"."""
    await store.migrate()
    if analyzed == "while empty":
        analyze(dsn, schema)
    for i in range(0, N, 1000):
        await store.push([Envelope(f"free{j:05d}", "q", "{}") for j in range(i, i + 1000)], 0.0)


@pytest.mark.parametrize("analyzed", ["while empty", "before the backlog had keys"])
async def test_a_keyed_push_reads_its_own_keys_not_the_table(
    postgres_dsn: str, postgres_schema: str, explained: Callable[..., Explained], analyzed: str
) -> None:
    """A push looks each key up (is there a head already?): one probe of the key index,
    whatever the statistics, not a scan of the jobs (for a new key, all of them)."""
    store = explained()
    await free_jobs(store, postgres_dsn, postgres_schema, analyzed)
    if analyzed == "before the backlog had keys":
        analyze(postgres_dsn, postgres_schema)
    for i in range(0, N, 1000):
        await store.push(
            [Envelope(f"keyed{j:05d}", "k", "{}", key=f"k{j}") for j in range(i, i + 1000)],
            0.0,
        )
    store.plans.clear()
    fresh = [Envelope(f"new{j:03d}", "k", "{}", key=f"new{j}") for j in range(OWN)]
    behind = [Envelope(f"next{j:03d}", "k", "{}", key=f"k{j}") for j in range(OWN)]
    assert await store.push(fresh + behind, 0.0) == [True] * (2 * OWN)
    assert work(store.plans) < 40 * OWN, store.plans


@pytest.mark.parametrize("analyzed", ["while empty", "with the backlog"])
async def test_the_keys_view_reads_the_keyed_jobs_not_the_table(
    postgres_dsn: str, postgres_schema: str, explained: Callable[..., Explained], analyzed: str
) -> None:
    """An operator's look at the ordering keys (``Admin.keys``, the dashboard's keys
    page on every refresh) ran with the plain planner: statistics of an empty table
    made it scan all the jobs twice, 40,000 rows for 1,000 keyed jobs of 20,000."""
    store = explained()
    await free_jobs(store, postgres_dsn, postgres_schema, analyzed)
    keyed = [Envelope(f"keyed{j:04d}", "k", "{}", key=f"k{j // 2:03d}") for j in range(1000)]
    await store.push(keyed, 0.0)
    if analyzed == "with the backlog":
        analyze(postgres_dsn, postgres_schema)
    store.plans.clear()
    busiest, stalled = await store.keys(time.time(), limit=3)
    assert [(k.key, k.jobs, k.head, k.state) for k in busiest] == [
        ("k000", 2, "keyed0000", "queued"),
        ("k001", 2, "keyed0002", "queued"),
        ("k002", 2, "keyed0004", "queued"),
    ]
    assert stalled == []
    # The keyed jobs' rows, a few times each (index, heap, groups, heads): not the table.
    assert work(store.plans) < 10 * len(keyed), store.plans


async def test_a_turn_that_prunes_reads_little_and_compiles_nothing(
    postgres_dsn: str, postgres_schema: str, explained: Callable[..., Explained]
) -> None:
    """The prune's statements read small tables that have no index for their filter
    (workers): with scans disabled for the store's functions, their cost passed JIT's
    threshold, and each prune compiled them (25 ms)."""
    store = explained(prune_every=0)
    await store.push([Envelope(f"job{j:03d}", "q", "{}") for j in range(OWN)], 0.0)
    mine = await store.cycle([], ["q"], OWN, "w", 60.0, time.time())
    info = WorkerInfo("w", "host", 1, ("q",), OWN)
    await store.heartbeat(info, [(c.id, c.token) for c in mine], 60.0, time.time())
    store.plans.clear()
    await store.cycle(outcomes(mine), ["q"], OWN, "w", 60.0, time.time())
    assert any("DELETE FROM" in p and ".workers" in p for p in store.plans)  # it pruned
    assert work(store.plans) < 40 * OWN, store.plans


@pytest.mark.parametrize("analyzed", ["while empty", "with the backlog"])
async def test_many_jobs_are_read_by_their_ids_not_with_the_table(
    postgres_dsn: str, postgres_schema: str, explained: Callable[..., Explained], analyzed: str
) -> None:
    """The records of a page of sharded runs (``jobs()``) and the statuses of
    ``ShardedJob.wait`` and of ``result()``'s waiters (``statuses()``) ran with the plain
    planner: 256 ids of 20,000 jobs hash-joined a scan of the whole table."""
    store = explained()
    await free_jobs(store, postgres_dsn, postgres_schema, analyzed)
    if analyzed == "with the backlog":
        analyze(postgres_dsn, postgres_schema)
    ids = [f"free{j:05d}" for j in range(0, N, N // 256)][:256]
    store.plans.clear()
    assert [j and j.id for j in await store.jobs(ids, time.time())] == ids
    assert work(store.plans) < 20 * len(ids), store.plans
    store.plans.clear()
    assert {s.state for s in await store.statuses(ids, time.time())} == {"queued"}
    assert work(store.plans) < 20 * len(ids), store.plans


PAGE = 50  # jobs on an operator's page


async def claim_all(store: Explained, queue: str, n: int) -> None:
    """Other workers claim ``n`` jobs of ``queue``, 1,000 a turn."""
    for _ in range(n // 1000):
        await store.cycle([], [queue], 1000, "others", 600.0, time.time())


# A scan of a table's rows (a bitmap index scan only finds those its heap scan reads).
_SCAN = re.compile(r"^\s*(?:->\s*)?(?:Seq|Index|Index Only|Bitmap Heap) Scan (?:using \S+ )?on ")


def read(plans: list[str]) -> int:
    """Rows the scans of tables in ``plans`` read: those they produced and those their
    filters dropped, over all of their loops."""
    total, scan, loops = 0, False, 1
    for plan in plans:
        for line in plan.splitlines():
            if node := _NODE.search(line):
                scan, loops = bool(_SCAN.search(line)), int(node[2])
                total += round(float(node[1]) * loops) if scan else 0
            elif (removed := _REMOVED.search(line)) and scan:
                total += int(removed[1]) * loops
    return total


RUNS = 2_000  # running jobs: at most the workers' concurrency


@pytest.mark.parametrize("analyzed", ["while empty", "before the claims", "while they run"])
async def test_a_page_of_running_jobs_reads_the_running_ones_not_the_backlog(
    postgres_dsn: str, postgres_schema: str, explained: Callable[..., Explained], analyzed: str
) -> None:
    """A page of running jobs reads every running job (at most the workers'
    concurrency) through ``jobs_lease`` and sorts them by id: no index is in that
    order, as every claim and finish would write it. It never reads the queued
    jobs: with statistics that saw most jobs running, ``ORDER BY id LIMIT`` read the
    primary key and dropped every queued job before a running one (a backlog of
    20,000 that came after, its ids first: 20,500 rows for page 1)."""
    store = explained()
    await store.migrate()
    if analyzed == "while empty":
        analyze(postgres_dsn, postgres_schema)
    await store.push([Envelope(f"run{j:05d}", "q", "{}") for j in range(RUNS)], 0.0)
    if analyzed == "before the claims":
        analyze(postgres_dsn, postgres_schema)
    await claim_all(store, "q", RUNS)
    if analyzed == "while they run":
        analyze(postgres_dsn, postgres_schema)
    for i in range(0, N, 1000):
        await store.push([Envelope(f"back{j:05d}", "b", "{}") for j in range(i, i + 1000)], 0.0)
    after = None
    for page in range(4):
        store.plans.clear()
        queue = "q" if page == 3 else None  # and a page of one queue, from its start
        jobs, after = await store.list_jobs(
            "running", time.time(), queue=queue, after=None if queue else after, limit=PAGE
        )
        first = 0 if queue else page * PAGE
        assert [j.id for j in jobs] == [f"run{i:05d}" for i in range(first, first + PAGE)]
        assert {j.state for j in jobs} == {"running"} and after is not None
        assert read(store.plans) <= RUNS + 10, (page, store.plans)
        # Each running job passes a few nodes (index, heap, CTE, sort): no backlog.
        assert work(store.plans) < 4 * RUNS, (page, store.plans)
    # The queue is filtered as the jobs are read: a page has them all, or is the last.
    assert await store.list_jobs("running", time.time(), queue="b") == ([], None)


async def test_pages_of_dead_and_done_jobs_that_share_a_time_read_a_page(
    postgres_dsn: str, postgres_schema: str, explained: Callable[..., Explained]
) -> None:
    """A turn's outcomes share one time: the jobs that die in it one ``died``, its done
    jobs one ``expires``. Indexed by that time alone, every page read all of them and
    sorted them by id (10,000 dead and 10,000 done jobs of one turn: every page read
    each of them), where the cursor's ``(time, id)`` is an index seek now."""
    store = explained()
    for i in range(0, N, 1000):
        await store.push([Envelope(f"job{j:05d}", "q", "{}") for j in range(i, i + 1000)], 0.0)
    mine = await store.cycle([], ["q"], N, "w", 600.0, time.time())
    assert len(mine) == N
    ends = [
        Outcome(c.id, "done", result="null", keep=3600.0, token=c.token)
        if int(c.id[3:]) % 2
        else Outcome(c.id, "dead", reason="boom", traceback="", token=c.token)
        for c in mine
    ]
    await store.cycle(ends, ["q"], 0, "w", 600.0, time.time())  # one turn: one time
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for table, column in (("dead", "died"), ("results", "expires")):
            conn.execute(f'ANALYZE "{postgres_schema}".{table}')
            times = f'SELECT count(*), count(DISTINCT {column}) FROM "{postgres_schema}".{table}'
            assert conn.execute(times).fetchone() == (N // 2, 1)
    for state, odd in (("dead", 0), ("done", 1)):
        after = None
        for page in range(3):
            store.plans.clear()
            found, after = await store.list_jobs(state, time.time(), after=after, limit=PAGE)
            first = N - 2 + odd - 2 * PAGE * page  # newest first: by id, descending
            assert [j.id for j in found] == [f"job{first - 2 * k:05d}" for k in range(PAGE)]
            assert work(store.plans) < 10 * PAGE, (state, page, store.plans)
