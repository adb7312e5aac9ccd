"""Activity counters: what workers count per minute, what each store keeps, and reading it back."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

import batchy
from batchy.jobs import COUNTS_KEPT, Activity, Backend, JobEvent, JobHook, MemoryBackend, Queue
from batchy.jobs._activity import Tally, minute_of

from .conftest import fast_worker

pytestmark = pytest.mark.timeout(60)


async def test_stores_sum_what_workers_add(backend: Backend) -> None:
    now = time.time()
    minute = minute_of(now)
    assert await backend.read_counts(minute - 5, now) == {}
    await backend.add_counts({(minute, "processed:default"): 3, (minute - 1, "calls:u"): 2}, now)
    await backend.add_counts({(minute, "processed:default"): 4, (minute, "keys:u"): 9}, now)
    assert await backend.read_counts(minute - 5, now) == {
        (minute, "processed:default"): 7,
        (minute - 1, "calls:u"): 2,
        (minute, "keys:u"): 9,
    }
    assert await backend.read_counts(minute, now) == {
        (minute, "processed:default"): 7,
        (minute, "keys:u"): 9,
    }


async def test_stores_drop_minutes_no_dashboard_shows(backend: Backend) -> None:
    now = time.time()
    minute = minute_of(now)
    old = minute - COUNTS_KEPT - 5
    await backend.add_counts({(old, "processed:q"): 1, (minute - 3, "processed:q"): 2}, now)
    await backend.add_counts({(minute, "processed:q"): 1}, now)
    found = await backend.read_counts(old - 10, now)
    assert (old, "processed:q") not in found
    assert found[(minute - 3, "processed:q")] == 2


# Without a hook of its own the worker's tally is told directly, no event built
# (see _runner); with one, every hook gets the events, the tally too: same counts.
@pytest.mark.parametrize("with_hook", [False, True], ids=["tally_alone", "with_a_hook"])
async def test_a_worker_counts_jobs_rounds_and_the_calls_its_loaders_saw(
    queue: Queue, with_hook: bool
) -> None:
    calls: list[list[int]] = []
    heard: list[tuple[str, str]] = []

    class Listener(JobHook):
        def job_started(self, event: JobEvent) -> None:
            heard.append((event.job, event.outcome))

        def job_finished(self, event: JobEvent) -> None:
            heard.append((event.job, event.outcome))

    if with_hook:
        queue.hooks.append(Listener())

    @batchy.batched(name="users")
    async def users(ids: list[int]) -> list[dict[str, int]]:
        calls.append(sorted(ids))
        return [{"id": i, "team": i % 2} for i in ids]

    @batchy.batched(name="teams")
    async def teams(ids: list[int]) -> list[str]:
        calls.append(sorted(ids))
        return [f"team {i}" for i in ids]

    @queue.job(name="welcome")
    async def welcome(uid: int) -> str:
        user = await users(uid)
        return await teams(user["team"])

    @queue.job(name="broken", retries=0)
    async def broken() -> None:
        raise ValueError("no")

    await queue.enqueue_many([*(welcome.call(u) for u in range(20)), broken.call()])
    worker = fast_worker(queue, burst=True, concurrency=50)
    await worker.run()

    # What the store received from the worker's last write, at its exit.
    found = await queue.backend.read_counts(minute_of(time.time()) - 2, time.time())
    totals: dict[str, int] = {}
    for (_, name), n in found.items():
        totals[name] = totals.get(name, 0) + n
    assert totals == {
        "processed:default": 21,
        "failed:default": 1,
        "jobs:welcome": 20,
        "rounds:welcome": 40,  # two rounds each: the user, then the team
        "jobs:broken": 1,
        "rounds:broken": 0,
        # One call per loader per round, as the loaders saw them, not one per job.
        "calls:users": 1,
        "keys:users": 20,
        "calls:teams": 1,
        "keys:teams": 2,
    }
    assert calls == [list(range(20)), [0, 1]]
    if with_hook:
        assert sorted(heard) == sorted(
            [("broken", "started"), ("broken", "dead")]
            + [("welcome", "started"), ("welcome", "done")] * 20
        )

    activity = await Activity.read(queue.backend, minutes=3)
    assert activity.total("processed") == 21
    assert activity.labels("calls") == ["teams", "users"]
    assert activity.ratio("rounds", "jobs", "welcome") == 2.0
    assert sum(activity.series("keys", "users")) == 20
    assert len(activity.series("keys", "users")) == 3
    assert (
        activity.as_dict()["series"]["calls:users"][-1]
        + sum(activity.as_dict()["series"]["calls:users"][:-1])
        == 1
    )


async def test_calls_without_a_job_of_the_worker_are_not_counted() -> None:
    @batchy.batched
    async def pages(ids: list[int]) -> list[int]:
        return ids

    tally = Tally()
    with batchy.hooked(tally):
        async with batchy.scope():  # a web request, say, in the worker's process
            assert await pages(1) == 1
    assert tally.take() == {}


class FlakyCounts(MemoryBackend):
    """A memory store whose first counter write fails."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    async def add_counts(self, counts, now):  # type: ignore[no-untyped-def]
        if self.failures:
            self.failures -= 1
            raise ConnectionError("store unreachable")
        await super().add_counts(counts, now)


async def test_a_failed_write_is_kept_for_the_next(caplog: pytest.LogCaptureFixture) -> None:
    store = FlakyCounts()
    tally = Tally()
    minute = minute_of(time.time())
    tally._add(minute, "processed:q", 2)
    await tally.flush(store)  # fails: logged, kept
    assert "activity counters not written" in caplog.text
    tally._add(minute, "processed:q", 1)
    await tally.flush(store)
    assert await store.read_counts(minute, time.time()) == {(minute, "processed:q"): 3}
    await tally.flush(store)  # nothing new: no write at all
    assert await store.read_counts(minute, time.time()) == {(minute, "processed:q"): 3}


def test_counts_of_jobs_fall_in_the_minute_each_ended_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tally counts the current minute by name alone and files it under its minute
    when the next one begins, or at a take; a failed write's counts join them."""
    from batchy.jobs import _clock

    clock = [600.0]  # minute 10
    monkeypatch.setattr(_clock, "now", lambda: clock[0])
    tally = Tally()
    stats = batchy.ScopeStats()
    stats.rounds = 2

    def ended(outcome: str, queue: str = "q") -> None:
        tally.job_finished(JobEvent("i", "send", queue, 1, outcome, stats=stats))

    ended("done")
    ended("retry")
    ended("lost")  # ends no attempt: not counted
    tally._add(9, "processed:q", 4)  # a failed write's, given back
    clock[0] = 660.5  # minute 11
    ended("dead", "mail")
    assert tally.take() == {
        (9, "processed:q"): 4,
        (10, "processed:q"): 2,
        (10, "failed:q"): 1,
        (10, "jobs:send"): 2,
        (10, "rounds:send"): 4,
        (11, "processed:mail"): 1,
        (11, "failed:mail"): 1,
        (11, "jobs:send"): 1,
        (11, "rounds:send"): 2,
    }
    assert tally.take() == {}
    ended("done")  # still minute 11, after a take
    assert tally.take() == {(11, "processed:q"): 1, (11, "jobs:send"): 1, (11, "rounds:send"): 2}


def test_counters_that_several_queues_or_job_types_share_add_up() -> None:
    """A minute's runs are kept by queue and job type, and named as the minute is
    filed: a queue's counters sum its job types, a job type's its queues."""
    tally = Tally()
    stats = batchy.ScopeStats()
    stats.rounds = 1
    for queue, job, outcome in [
        ("q", "send", "done"), ("q", "bill", "dead"), ("r", "send", "retry"),
        ("r", "send", "cancelled"), ("q", "bill", "released"),
    ]:  # fmt: skip
        tally.finished(queue, job, outcome, stats)
    tally.finished("q", "bill", "done", None)  # no stats: a run, not a job type's count
    assert "counters=8" in repr(tally)
    minute = minute_of(time.time())
    assert tally.take() == {
        (minute, "processed:q"): 3,
        (minute, "failed:q"): 1,
        (minute, "processed:r"): 2,
        (minute, "failed:r"): 1,
        (minute, "jobs:send"): 3,
        (minute, "rounds:send"): 3,
        (minute, "jobs:bill"): 1,
        (minute, "rounds:bill"): 1,
    }
    assert tally.take() == {}


def test_activity_reads_series_oldest_first() -> None:
    activity = Activity(100, 3, {(100, "calls:a"): 1, (102, "calls:a"): 5, (101, "calls:b"): 2})
    assert activity.series("calls", "a") == [1, 0, 5]
    assert activity.sum_series("calls") == [1, 2, 5]
    assert activity.total("calls", "b") == 2
    assert activity.labels("calls") == ["a", "b"]
    assert activity.ratio("keys", "calls", "a") == 0.0
    assert math.isnan(activity.ratio("calls", "keys", "a"))  # nothing below: no ratio


class SlowCounts(MemoryBackend):
    """A memory store whose counter writes take a round trip, and a clean-up after one."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = 0
        self.overlapped = False
        self.writing = asyncio.Event()

    async def add_counts(self, counts, now):  # type: ignore[no-untyped-def]
        self.inside += 1
        self.overlapped = self.overlapped or self.inside > 1
        self.writing.set()
        try:
            await asyncio.sleep(0.2)  # the write in flight
            await super().add_counts(counts, now)
        finally:
            await asyncio.sleep(0.05)  # its clean-up (a rollback, a connection returned)
            self.inside -= 1


async def test_a_worker_stopping_mid_write_lets_it_end_before_its_last_write() -> None:
    store = SlowCounts()
    queue = Queue(store)

    @queue.job()
    async def work() -> None:
        pass

    await work.enqueue()
    worker = fast_worker(queue, lease=1.0, heartbeat=0.05)
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(store.writing.wait(), 5)  # the heartbeat writes the counters
    worker.stop()
    await running
    # Neither cut off (its counts lost, its connection's transaction left open)
    # nor overlapped by the worker's last write, and ended when run() returns.
    assert not store.overlapped and store.inside == 0
    minute = minute_of(time.time())
    counted = await store.read_counts(minute - 1, time.time())
    assert sum(n for (_, name), n in counted.items() if name == "processed:default") == 1
