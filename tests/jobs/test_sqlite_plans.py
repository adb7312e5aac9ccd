"""The SQLite store's worker steps do work in proportion to their own jobs, not to all running ones.

SQLite plans from ``sqlite_stat1`` when the file was analyzed (an application
may run ``ANALYZE`` or ``PRAGMA optimize`` on it) and from fixed guesses when not.
A term ``state = 1`` can then be answered from the index of ``(state, lease)``,
which reads every job every worker runs. These tests count the virtual machine
instructions SQLite runs for a turn and a heartbeat (a progress handler called
every 100) with 500 and with 5,000 jobs running in other workers.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest

from batchy.jobs import Envelope, Outcome, SQLiteBackend, WorkerInfo

OWN = 100


async def _work(path: Path, others: int, analyzed: str) -> dict[str, int]:
    """Hundreds of VM instructions of one worker's turn and heartbeat."""
    store = SQLiteBackend(str(path))
    try:
        if analyzed == "while empty":
            store._db.execute("ANALYZE")
        jobs = [Envelope(f"j{i:05d}", "q", "{}") for i in range(others + 2 * OWN)]
        await store.push(jobs, time.time())
        for _ in range(0, others, 500):
            await store.cycle([], ["q"], 500, "others", 60.0, time.time())
        if analyzed == "while others run":
            store._db.execute("ANALYZE")
        mine = await store.cycle([], ["q"], OWN, "w", 60.0, time.time())
        ticks = [0]

        def tick() -> int:
            ticks[0] += 1
            return 0  # go on

        store._db.set_progress_handler(tick, 100)
        done = [Outcome(c.id, "done", token=c.token) for c in mine]
        again = await store.cycle(done, ["q"], OWN, "w", 60.0, time.time())
        assert len(mine) == len(again) == OWN and not again.refused
        turn, ticks[0] = ticks[0], 0
        info = WorkerInfo("w", "host", 1, ("q",), OWN)
        assert (
            await store.heartbeat(info, [(c.id, c.token) for c in again], 60.0, time.time()) == []
        )
        store._db.set_progress_handler(None, 0)
        return {"turn": turn, "heartbeat": ticks[0]}
    finally:
        await store.close()


@pytest.mark.parametrize("analyzed", ["never", "while empty", "while others run"])
def test_a_turn_and_a_heartbeat_cost_the_same_whatever_the_others_run(
    tmp_path: Path, analyzed: str
) -> None:
    few = asyncio.run(_work(tmp_path / "few.db", 500, analyzed))
    many = asyncio.run(_work(tmp_path / "many.db", 5_000, analyzed))
    # Before: a turn 239 -> 960 and a heartbeat 137 -> 586 without statistics,
    # the turn 189 -> 460 with them (the done jobs, the heartbeat's leases and the
    # cancels were read through every running job).
    for step in ("turn", "heartbeat"):
        assert many[step] <= few[step] * 1.2 + 5, (step, few, many)


async def _push_work(path: Path, backlog: int) -> int:
    """Hundreds of VM instructions of a push of keyed jobs, statistics taken while empty."""
    store = SQLiteBackend(str(path))
    try:
        store._db.execute("ANALYZE")
        jobs = [Envelope(f"j{i:05d}", "q", "{}", key=f"k{i}") for i in range(backlog)]
        await store.push(jobs, time.time())
        ticks = [0]

        def tick() -> int:
            ticks[0] += 1
            return 0

        store._db.set_progress_handler(tick, 100)
        fresh = [Envelope(f"new{i:03d}", "q", "{}", key=f"new{i}") for i in range(OWN)]
        behind = [Envelope(f"next{i:03d}", "q", "{}", key=f"k{i}") for i in range(OWN)]
        assert await store.push(fresh + behind, time.time()) == [True] * (2 * OWN)
        store._db.set_progress_handler(None, 0)
        return ticks[0]
    finally:
        await store.close()


def test_a_keyed_push_costs_the_same_whatever_the_backlog(tmp_path: Path) -> None:
    """Each key is looked up (has it a head?) in the key index, not among all jobs."""
    few = asyncio.run(_push_work(tmp_path / "few.db", 500))
    many = asyncio.run(_push_work(tmp_path / "many.db", 5_000))
    assert many <= few * 1.2 + 5, (few, many)


def test_statuses_read_each_job_by_its_id(tmp_path: Path) -> None:
    """The shared read of result()'s waiters looks each id up in each table's key."""
    store = SQLiteBackend(str(tmp_path / "jobs.db"))
    try:
        query = "EXPLAIN QUERY PLAN " + store.status_select("?", "VALUES (?),(?)")
        plan = [row[3] for row in store._db.execute(query, (0.0, "a", "b"))]
    finally:
        asyncio.run(store.close())
    # (SQLite before 3.36 writes "SEARCH TABLE jobs AS j ...", later "SEARCH j ...".)
    for table in ("jobs", "dead", "results"):
        assert any(f"USING INDEX sqlite_autoindex_{table}_1 (id=?)" in step for step in plan)
    assert not [s for s in plan if re.match(r"SCAN (TABLE \w+ AS )?[jdr]\b", s)], plan


RUNS = 2_000  # running jobs: at most the workers' concurrency
BACKLOG = 20_000  # queued jobs that came after, their ids before the running ones'


async def _running_page_work(path: Path, backlog: int, analyzed: str) -> tuple[list[int], object]:
    """Hundreds of VM instructions of pages 1 to 3 of RUNS running jobs, and of a page
    of their queue, with ``backlog`` queued jobs pushed after them; the page of
    running jobs of the backlog's queue."""
    store = SQLiteBackend(str(path))
    try:
        if analyzed == "while empty":
            store._db.execute("ANALYZE")
        await store.push([Envelope(f"run{i:05d}", "q", "{}") for i in range(RUNS)], time.time())
        for _ in range(0, RUNS, 500):
            await store.cycle([], ["q"], 500, "others", 600.0, time.time())
        if analyzed == "while they run":  # most jobs run
            store._db.execute("ANALYZE")
        for i in range(0, backlog, 1000):
            backs = [Envelope(f"back{j:05d}", "b", "{}") for j in range(i, i + 1000)]
            await store.push(backs, time.time())
        if analyzed == "with the backlog":
            store._db.execute("ANALYZE")
        ticks = [0]

        def tick() -> int:
            ticks[0] += 1
            return 0

        costs, after = [], None
        for page in range(4):
            ticks[0] = 0
            store._db.set_progress_handler(tick, 100)
            queue = "q" if page == 3 else None
            jobs, after = await store.list_jobs(
                "running", time.time(), queue=queue, after=None if queue else after, limit=50
            )
            store._db.set_progress_handler(None, 0)
            first = 0 if queue else page * 50
            assert [j.id for j in jobs] == [f"run{i:05d}" for i in range(first, first + 50)]
            assert after is not None
            costs.append(ticks[0])
        return costs, await store.list_jobs("running", time.time(), queue="b")
    finally:
        await store.close()


@pytest.mark.parametrize("analyzed", ["never", "while empty", "while they run", "with the backlog"])
def test_a_page_of_running_jobs_does_not_read_the_queued_backlog(
    tmp_path: Path, analyzed: str
) -> None:
    """A page of running jobs reads the running ones (all of them, sorted by id: no
    index is in that order, as every claim would write it), never the queued jobs.
    With statistics that said most jobs run, SQLite read the primary key in id order
    and dropped every queued job before a running one: a backlog of 20,000 took page
    1 from 90 hundred VM instructions to 890 hundred (and so did statistics taken
    with the backlog). Reading the 2,000 running jobs and sorting them takes 211."""
    alone, _ = asyncio.run(_running_page_work(tmp_path / "alone.db", 0, analyzed))
    behind, none = asyncio.run(_running_page_work(tmp_path / "behind.db", BACKLOG, analyzed))
    for page, (a, b) in enumerate(zip(alone, behind, strict=True)):
        assert b <= a * 1.2 + 5, (page, alone, behind)
    assert none == ([], None)  # the queue is filtered as the jobs are read: no short page


def test_the_jobs_table_has_the_indexes_the_worker_needs_and_no_more(tmp_path: Path) -> None:
    """Every index of the jobs table is written by every claim or finish of every job
    (a claim sets the state and lease, a finish deletes the row): each one taxes the
    worker's claim/finish path, whose throughput is the store's point. Measure a new
    one on the no-op benchmark first, and list it here only if the jobs a second
    allow it (an index of running jobs by id, for an operator's page, cost 13% of
    them on PostgreSQL: the page reads ``jobs_lease`` and sorts instead)."""
    store = SQLiteBackend(str(tmp_path / "jobs.db"))
    try:
        listed = "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'jobs'"
        assert dict(store._db.execute(listed).fetchall()) == {
            "sqlite_autoindex_jobs_1": None,  # the primary key (id)
            "jobs_ready": "CREATE INDEX jobs_ready ON jobs (queue, state, due)",
            "jobs_lease": "CREATE INDEX jobs_lease ON jobs (state, lease)",
            "jobs_okey": "CREATE INDEX jobs_okey ON jobs (okey) WHERE okey IS NOT NULL",
        }
    finally:
        asyncio.run(store.close())
