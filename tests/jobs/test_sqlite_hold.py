"""The SQLite store shared by processes: they open a new file together, and one may hold it."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from batchy.jobs import Envelope, SQLiteBackend, WorkerInfo, _clock

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The store's clock, set by the test: ``clock[0] = ...``."""
    now = [1000.0]
    monkeypatch.setattr(_clock, "store_now", lambda: now[0])
    return now


def leases(path: Path) -> dict[str, float]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT id, lease FROM jobs WHERE state = 1").fetchall())


async def test_a_transaction_holding_the_file_past_a_lease_does_not_hand_its_job_on(
    tmp_path: Path, clock: list[float]
) -> None:
    # A worker stopped (SIGSTOP) inside a write transaction keeps every other
    # process from renewing its leases. When it goes on, the next cycle used to
    # find those leases run out and hand their jobs to a second worker while the
    # first still ran them (the crash test's rare per-key order violations).
    path = tmp_path / "jobs.db"
    a, stopped, c = SQLiteBackend(path), SQLiteBackend(path), SQLiteBackend(path)
    await a.push([Envelope("early", "default", "{}"), Envelope("held", "default", "{}")], 1000.0)
    (early,) = await a.cycle([], ["default"], 1, "A", 0.5, 1000.0)  # until 1000.5
    clock[0] = 1000.4
    (held,) = await a.cycle([], ["default"], 1, "A", 1.0, 1000.4)  # until 1001.4
    assert (early.id, held.id) == ("early", "held")

    clock[0] = 1000.6  # early's lease ran out before the hold: A had its chance
    with stopped._tx():
        clock[0] = 1003.0  # held the file for 2.4 s, past held's lease

    clock[0] = 1003.1
    claimed = await c.cycle([], ["default"], 10, "C", 30.0, 1003.1)
    assert [job.id for job in claimed] == ["early"]
    # held got the 2.4 s back (1001.4 -> 1003.8), once: later transactions add nothing.
    assert leases(path)["held"] == pytest.approx(1003.8)
    clock[0] = 1003.2
    assert await c.cycle([], ["default"], 10, "C", 30.0, 1003.2) == []
    assert leases(path)["held"] == pytest.approx(1003.8)
    info = WorkerInfo("A", "host", 1, ("default",), 1, ("held",), 1000.0)
    lost = await a.heartbeat(info, [(held.id, held.token)], 1.0, 1003.2)
    assert lost == []
    for store in (a, stopped, c):
        await store.close()


async def test_a_rolled_back_transaction_notes_no_hold_and_a_later_one_still_applies_it(
    tmp_path: Path, clock: list[float]
) -> None:
    path = tmp_path / "jobs.db"
    a, b = SQLiteBackend(path), SQLiteBackend(path)
    await a.push([Envelope("held", "default", "{}")], 1000.0)
    await a.cycle([], ["default"], 1, "A", 1.0, 1000.0)  # until 1001.0
    with b._tx():
        clock[0] = 1002.0  # a 2 s hold
    clock[0] = 1002.1
    with pytest.raises(RuntimeError), b._tx():  # gives the time back, then rolls back
        raise RuntimeError("the step failed")
    assert leases(path)["held"] == pytest.approx(1001.0)
    await b.cycle([], ["default"], 10, "B", 30.0, 1002.1)
    assert leases(path)["held"] == pytest.approx(1003.0)
    for store in (a, b):
        await store.close()


# Opens a new file per round; the processes' rounds begin together, every 50 ms.
_OPENER = """
import asyncio, sys, time
from batchy.jobs import SQLiteBackend
folder, start = sys.argv[1], float(sys.argv[2])
for n in range(20):
    time.sleep(max(0.0, start + n * 0.05 - time.time()))
    asyncio.run(SQLiteBackend(f"{folder}/jobs{n}.db").close())
"""


def test_processes_opening_a_new_file_together_all_open_it(tmp_path: Path) -> None:
    # A worker and an enqueue started together both switch the new file to WAL; SQLite
    # answered the loser "database is locked" at once, without waiting (a third of the
    # rounds of three processes failed before the open retried).
    start = str(time.time() + 2.0)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPENER, str(tmp_path), start], stderr=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    errors = [proc.communicate(timeout=25)[1] for proc in procs]
    assert errors == ["", "", ""]
