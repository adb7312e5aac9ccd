"""``result()``'s waiters share their store reads (batchy.jobs._waiters), on every store.

Each ``result()`` read its job every ``poll`` seconds on its own: 200 waiters
read the store 200 times a poll. These tests count the reads a store receives
(its ``status`` and ``statuses`` calls) and check that each waiter still gets
its own job's outcome, at its own rate, and that every way a wait ends (result,
death, timeout, cancel, a failed read, the loop's end) leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchy.jobs import (
    Backend,
    ConfigError,
    DeadJobError,
    JobStatus,
    MemoryBackend,
    Queue,
    ResultNotKept,
    _waiters,
)

from .conftest import fast_worker

pytestmark = pytest.mark.timeout(120)

POLL = 0.05


def count_reads(backend: Backend) -> list[list[str]]:
    """The ids of each read ``backend`` receives from now on (``status``: one id)."""
    reads: list[list[str]] = []
    status, statuses = backend.status, backend.statuses

    async def one(job_id: str, now: float) -> JobStatus:
        reads.append([job_id])
        return await status(job_id, now)

    async def many(job_ids: Sequence[str], now: float) -> list[JobStatus]:
        reads.append(list(job_ids))
        return await statuses(job_ids, now)

    backend.status, backend.statuses = one, many  # type: ignore[method-assign]
    return reads


def reading_tasks() -> list[asyncio.Task[Any]]:
    """The shared pollers still running in this loop."""
    return [
        t
        for t in asyncio.all_tasks()
        if t.get_name().startswith("batchy result() reads") and not t.done()
    ]


async def no_poller_left() -> None:
    await asyncio.sleep(0)  # (a cancelled task ends at its next step)
    assert reading_tasks() == [] and _waiters._pollers == {}


# -- the store reads -------------------------------------------------------------------


@pytest.mark.parametrize("jobs", [1, 200], ids=["one-job", "200-jobs"])
async def test_200_waiters_read_the_store_about_once_a_poll(queue: Queue, jobs: int) -> None:
    # 200 waiters made 200 reads a poll (about 2,000 in this half second); now
    # one read a poll carries every id they wait for.
    @queue.job(name="echo", keep_result=60)
    async def echo(n: int) -> int:
        return n

    handles = await queue.enqueue_many(echo.call(n) for n in range(jobs))
    reads = count_reads(queue.backend)
    started = time.monotonic()
    waiters = [asyncio.create_task(handles[i % jobs].result(poll=POLL)) for i in range(200)]
    try:
        await asyncio.sleep(0.5)
        waited = time.monotonic() - started
        assert 1 <= len(reads) <= waited / POLL + 2, f"{len(reads)} reads in {waited:.2f}s"
        # The first read carried every job (the waiters came in one step), each once.
        assert sorted(reads[0]) == sorted(h.id for h in handles)
        await fast_worker(queue, burst=True).run()
        assert await asyncio.gather(*waiters) == [i % jobs for i in range(200)]
    finally:
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
    await no_poller_left()


# -- each waiter gets its own job's outcome ----------------------------------------------

#: What becomes of a job in the property: its value returned, a death, no result
#: kept, or no such job at all.
OUTCOMES = ("value", "dies", "unkept", "never enqueued")
_example = iter(range(10**9))


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    jobs=st.lists(st.sampled_from(OUTCOMES), min_size=1, max_size=12),
    waiters=st.lists(
        st.tuples(st.integers(0, 11), st.sampled_from([0.01, 0.03, 0.1]), st.booleans()),
        min_size=1,
        max_size=40,
    ),
)
async def test_every_waiter_gets_exactly_its_jobs_outcome(
    queue: Queue, jobs: list[str], waiters: list[tuple[int, float, bool]]
) -> None:
    # Waiters on random jobs with random polls, some before the worker runs and
    # some after: each gets its own job's value or error, never another's.
    example = next(_example)
    if "echo" not in queue.jobs:

        @queue.job(name="echo", keep_result=60, retries=0)
        async def echo(value: str, dies: bool) -> str:
            if dies:
                raise ValueError(f"no <{value}>")
            return value

        @queue.job(name="unkept", keep_result=0)
        async def unkept(value: str) -> str:
            return value

    echo, unkept = queue.jobs["echo"], queue.jobs["unkept"]
    handles = []
    for n, outcome in enumerate(jobs):
        value = f"{example}-{n}"
        if outcome == "never enqueued":
            handles.append(queue.handle(f"never-{value}"))
        elif outcome == "unkept":
            handles.append(await unkept.enqueue(value))
        else:
            handles.append(await echo.enqueue(value, outcome == "dies"))
    early = [(j % len(jobs), p) for j, p, late in waiters if not late]
    late = [(j % len(jobs), p) for j, p, late in waiters if late]
    tasks = [asyncio.create_task(handles[j].result(timeout=30, poll=p)) for j, p in early]
    await asyncio.sleep(0.02)
    await fast_worker(queue, burst=True).run()
    tasks += [asyncio.create_task(handles[j].result(timeout=30, poll=p)) for j, p in late]
    got = await asyncio.gather(*tasks, return_exceptions=True)
    for (j, _), answer in zip([*early, *late], got, strict=True):
        value, job_id = f"{example}-{j}", handles[j].id
        if jobs[j] == "value":
            assert answer == value
        elif jobs[j] == "dies":
            assert isinstance(answer, DeadJobError)
            assert str(answer).startswith(f"job {job_id} is dead: ValueError: no <{value}>")
        else:
            assert isinstance(answer, ResultNotKept) and str(answer).startswith(f"job {job_id} ")
    await no_poller_left()


# -- when a store is read, on a store the test answers for -------------------------------


class Scripted(MemoryBackend):
    """A store whose jobs' states the test sets (``queued`` until then); each read
    is recorded as ``(time.monotonic(), ids)``, and raises ``fail`` while set."""

    def __init__(self) -> None:
        super().__init__()
        self.states: dict[str, JobStatus] = {}
        self.reads: list[tuple[float, list[str]]] = []
        self.fail: BaseException | None = None
        self.short = False  # answer one status too few

    async def statuses(self, job_ids: Sequence[str], now: float) -> list[JobStatus]:
        self.reads.append((time.monotonic(), list(job_ids)))
        await asyncio.sleep(0)  # a round trip
        if self.fail is not None:
            raise self.fail
        found = [self.states.get(i, JobStatus(i, "queued")) for i in job_ids]
        return found[1:] if self.short else found

    def finish(self, job_id: str, value: str = '"ok"') -> float:
        self.states[job_id] = JobStatus(job_id, "done", result=value)
        return time.monotonic()

    def reads_of(self, job_id: str) -> list[float]:
        return [at for at, ids in self.reads if job_id in ids]


@pytest.fixture
def scripted() -> Scripted:
    return Scripted()


async def _returned(handle: Any, **options: Any) -> tuple[Any, float]:
    value = await handle.result(**options)
    return value, time.monotonic()


async def test_each_waiter_is_read_at_its_own_poll(scripted: Scripted) -> None:
    # A slow waiter (poll 0.25) beside a quick one (0.02) is read at least every
    # 0.25s, the quick one every 0.02s, in one read a poll of the quickest; once
    # the quick one has gone, the store is read at the slow one's pace.
    queue = Queue(scripted)
    quick = asyncio.create_task(_returned(queue.handle("quick"), poll=0.02))
    slow = asyncio.create_task(_returned(queue.handle("slow"), poll=0.25))
    await asyncio.sleep(0.3)
    finished = scripted.finish("quick")
    value, at = await quick
    assert value == "ok" and at - finished < 0.02 + 0.1  # (not the slow one's 0.25)
    reads = len(scripted.reads)
    assert reads <= (at - scripted.reads[0][0]) / 0.02 + 2
    gaps = [b - a for a, b in zip(scripted.reads_of("slow"), scripted.reads_of("slow")[1:])]
    assert gaps and max(gaps) < 0.25 + 0.1
    await asyncio.sleep(0.6)
    assert 1 <= len(scripted.reads) - reads <= 0.6 / 0.25 + 1  # the slow pace now
    finished = scripted.finish("slow")
    value, at = await slow
    assert value == "ok" and at - finished < 0.25 + 0.1
    await no_poller_left()


async def test_a_wait_alone_reads_as_result_did(scripted: Scripted) -> None:
    # A timeout <= 0 reads once; a poll longer than the timeout reads once more
    # at the deadline, then times out, with result()'s message.
    handle = Queue(scripted).handle("j")
    with pytest.raises(TimeoutError, match="job j is still queued after -1s; wait longer"):
        await handle.result(timeout=-1)
    assert [ids for _, ids in scripted.reads] == [["j"]]
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"still queued after 0\.1s.*\(`batchy info`\)"):
        await handle.result(timeout=0.1, poll=30)
    assert 0.1 <= time.monotonic() - started < 1
    assert len(scripted.reads) == 3 and scripted.reads[2][0] - started >= 0.1
    await no_poller_left()


async def test_a_cancelled_or_timed_out_waiter_leaves_its_poller(scripted: Scripted) -> None:
    queue = Queue(scripted)
    waits = {i: asyncio.create_task(queue.handle(f"j{i}").result(poll=0.01)) for i in range(10)}
    timed_out = asyncio.create_task(queue.handle("t").result(timeout=0.05, poll=0.01))
    await asyncio.sleep(0.05)
    for i in range(5):
        waits[i].cancel()
    with pytest.raises(TimeoutError, match=r"job t is still queued after 0\.05s"):
        await timed_out
    await asyncio.sleep(0.05)
    # The reads since carry only the waiters left, each once.
    assert sorted(scripted.reads[-1][1]) == [f"j{i}" for i in range(5, 10)]
    for i in range(5, 10):
        waits[i].cancel()
    await asyncio.gather(*waits.values(), return_exceptions=True)
    assert all(w.cancelled() for w in waits.values())
    await no_poller_left()
    reads = len(scripted.reads)
    await asyncio.sleep(0.05)
    assert len(scripted.reads) == reads  # nothing reads for nobody


async def test_a_failed_read_reaches_every_waiter_it_was_for(scripted: Scripted) -> None:
    # The read of their jobs failed: each of them raises the store's error, as a
    # read of its own did, none hangs, and nothing reaches the loop's log.
    queue = Queue(scripted)
    first = [asyncio.create_task(queue.handle(f"j{i}").result(poll=0.01)) for i in range(50)]
    await asyncio.sleep(0.03)
    scripted.fail = ConnectionError("store unreachable")
    got = await asyncio.gather(*first, return_exceptions=True)
    assert all(isinstance(e, ConnectionError) and str(e) == "store unreachable" for e in got)
    await no_poller_left()
    # The store is back: waiters that come now get their results.
    scripted.fail = None
    scripted.finish("later", '"back"')
    assert await queue.handle("later").result(poll=0.01) == "back"
    await no_poller_left()


async def test_a_store_that_answers_too_few_statuses_is_named(scripted: Scripted) -> None:
    scripted.short = True
    with pytest.raises(ConfigError) as caught:
        await Queue(scripted).handle("j").result(timeout=1)
    assert str(caught.value) == (
        f"{scripted!r}.statuses() returned 0 statuses for 1 job ids; it must return one "
        "per id, in the order given"
    )


def test_waiters_left_at_the_loops_end_leave_nothing_behind(
    scripted: Scripted, caplog: pytest.LogCaptureFixture
) -> None:
    # asyncio.run() ends with waiters still waiting: it cancels them and their
    # poller, and no task is left pending, in each of two loops at once.
    seen: list[int] = []

    async def main() -> None:
        queue = Queue(scripted)
        waiting = [asyncio.create_task(queue.handle(f"j{i}").result(poll=0.01)) for i in range(5)]
        await asyncio.sleep(0.05)
        assert not any(w.done() for w in waiting)
        seen.append(len(reading_tasks()))

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        threads = [threading.Thread(target=asyncio.run, args=(main(),)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert seen == [1, 1]  # one poller per loop
    assert _waiters._pollers == {}
    assert not [r for r in caplog.records if "pending" in r.getMessage()]
