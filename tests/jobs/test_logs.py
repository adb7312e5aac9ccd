"""Logs that tell the truth: attempt numbers, the real next run, and one line per store outage."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from batchy.jobs import Claimed, MemoryBackend, Outcome, Queue, Retry, Worker

from .conftest import FaultyStore, declared, fast_worker

pytestmark = pytest.mark.timeout(60)


def job_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("job ")]


async def test_retry_logs_the_attempt_and_the_delay(caplog: pytest.LogCaptureFixture) -> None:
    queue = Queue(MemoryBackend())

    @queue.job(name="flaky", retries=3, backoff=lambda count, error: 42.0)
    async def flaky() -> None:
        raise ValueError("boom")

    handle = await flaky.enqueue()
    with caplog.at_level(logging.INFO, "batchy.jobs"):
        await fast_worker(queue, burst=True).run()
    (line,) = job_lines(caplog)
    assert line.startswith(f"job {handle.id} flaky attempt 1 failed after 0.0")
    assert line.endswith("s: ValueError: boom; attempt 2 in 42.0s")


async def test_retry_requested_logs_its_delay(caplog: pytest.LogCaptureFixture) -> None:
    queue = Queue(MemoryBackend())

    @queue.job(name="later")
    async def later() -> None:
        raise Retry(delay=7.5, reason="API down")

    await later.enqueue()
    with caplog.at_level(logging.INFO, "batchy.jobs"):
        await fast_worker(queue, burst=True).run()
    (line,) = job_lines(caplog)
    assert "attempt 1 failed" in line and line.endswith("; attempt 2 in 7.5s")


async def test_dead_log_and_dead_list_count_alike(caplog: pytest.LogCaptureFixture) -> None:
    queue = Queue(MemoryBackend())

    @queue.job(name="doomed", retries=2, backoff=lambda count, error: 0.0)
    async def doomed() -> None:
        raise ValueError("boom")

    handle = await doomed.enqueue()
    with caplog.at_level(logging.INFO, "batchy.jobs"):
        await fast_worker(queue, burst=True).run()
    lines = job_lines(caplog)
    assert [line.split(" failed")[0] for line in lines] == [
        f"job {handle.id} doomed attempt {n}" for n in (1, 2, 3)
    ]
    assert lines[0].endswith("; attempt 2 in 0.0s") and lines[1].endswith("; attempt 3 in 0.0s")
    assert lines[2].endswith("; dead: failed 3 time(s); retries=2 exhausted")
    (dead,) = await queue.dead_jobs()
    assert dead.reason == "ValueError: boom (failed 3 time(s); retries=2 exhausted)"


async def test_done_after_retries_names_its_attempt(caplog: pytest.LogCaptureFixture) -> None:
    queue = Queue(MemoryBackend())
    runs = []

    @queue.job(name="second", backoff=lambda count, error: 0.0)
    async def second() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise ValueError("once")

    await second.enqueue()
    with caplog.at_level(logging.INFO, "batchy.jobs"):
        await fast_worker(queue, burst=True).run()
    lines = job_lines(caplog)
    assert "attempt 1 failed" in lines[0]
    assert " done in " in lines[1] and lines[1].endswith("(attempt 2)")


class FlakyStore(MemoryBackend):
    """A memory store whose ``cycle`` fails ``failures`` times from the ``after``-th call."""

    def __init__(self, failures: int, after: int = 1) -> None:
        super().__init__()
        self.failures = failures
        self.after = after
        self.calls: list[float] = []

    async def cycle(
        self,
        outcomes: Sequence[Outcome],
        queues: Sequence[str],
        limit: int,
        worker: str,
        lease: float,
        now: float,
    ) -> list[Claimed]:
        self.calls.append(time.monotonic())
        if self.after <= len(self.calls) < self.after + self.failures:
            raise ConnectionError("connection refused")
        return await super().cycle(outcomes, queues, limit, worker, lease, now)


async def test_store_outage_backs_off_and_logs_twice(caplog: pytest.LogCaptureFixture) -> None:
    store = FlakyStore(failures=7)
    queue = Queue(store)

    @queue.job(name="noop")
    async def noop() -> None:
        return None

    handle = await noop.enqueue()
    with caplog.at_level(logging.DEBUG, "batchy.jobs"):
        await fast_worker(queue, burst=True, poll_interval=0.01).run()
    assert (await handle.status()).state == "done"
    store_lines = [
        r for r in caplog.records if "store" in r.getMessage() and r.levelno >= logging.INFO
    ]
    assert len(store_lines) == 2, [r.getMessage() for r in store_lines]
    down, up = store_lines
    assert down.levelno == logging.ERROR and down.exc_info is None
    assert "store unreachable since " in down.getMessage()
    assert down.getMessage().endswith(
        "(cycle failed): ConnectionError: connection refused; trying again with backoff "
        "(up to 0.1s apart)"
    )
    assert up.levelno == logging.WARNING
    assert "store back after " in up.getMessage() and "(7 failed tries)" in up.getMessage()
    assert not any(r.exc_info for r in caplog.records)
    # Exponential backoff, capped at 10 poll intervals: 7 failures take well over 7 polls.
    gaps = [b - a for a, b in zip(store.calls[1:9], store.calls[2:9], strict=False)]
    assert sum(gaps) > 0.2, gaps
    assert max(gaps) < 0.5, gaps


class AnswerLost(MemoryBackend):
    """A memory store whose first turn with outcomes applies them, then its answer is lost;
    the ``down`` turns after it fail too (nothing applied), while heartbeats go on."""

    def __init__(self, down: int = 0) -> None:
        super().__init__()
        self.lost = False
        self.down = down

    async def cycle(self, outcomes: Sequence[Outcome], *rest: Any) -> list[Claimed]:
        if self.lost and self.down:
            self.down -= 1
            raise ConnectionError("connection refused")
        claims = await super().cycle(outcomes, *rest)
        if outcomes and not self.lost:
            self.lost = True
            raise ConnectionError("connection reset by peer")  # after the commit
        return claims


@pytest.mark.parametrize("down", [0, 3], ids=["answer lost", "then heartbeats meanwhile"])
async def test_outcomes_a_lost_answer_applied_are_not_reported_as_lost_jobs(
    caplog: pytest.LogCaptureFixture, down: int
) -> None:
    """The turn went through, its answer did not: the worker hands the outcomes in again
    and the store refuses them (the jobs are done), as it refuses the heartbeats that
    renew them meanwhile. Each refusal was a warning that the store gave the job to
    another worker, with advice to raise the lease and never block the loop."""
    store = AnswerLost(down)
    queue = Queue(store)

    @queue.job(name="noop")
    async def noop() -> None:
        return None

    handles = [await noop.enqueue() for _ in range(3)]
    with caplog.at_level(logging.INFO, "batchy.jobs"):
        await fast_worker(queue, burst=True, poll_interval=0.01, heartbeat=0.02).run()
    assert store.down == 0
    assert [(await h.status()).state for h in handles] == ["done"] * 3
    assert not [r for r in caplog.records if "lost job" in r.getMessage()]
    again = [r for r in caplog.records if "handed in again" in r.getMessage()]
    assert len(again) == 1 and again[0].levelno == logging.INFO
    ids = ", ".join(sorted(h.id for h in handles))
    assert (
        again[0]
        .getMessage()
        .endswith(
            "the store refused 3 outcomes handed in again within their leases after a turn "
            f"whose answer was lost (jobs {ids}): that turn applied them; nothing to do"
        )
    )


async def test_an_outcome_refused_after_its_lease_ran_out_is_still_a_lost_job(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Past its lease, the store may have handed the job on: that stays a warning."""
    store = AnswerLost(down=30)
    queue = Queue(store)

    @queue.job(name="noop")
    async def noop() -> None:
        return None

    await noop.enqueue()
    with caplog.at_level(logging.INFO, "batchy.jobs"):
        await fast_worker(queue, burst=True, poll_interval=0.01, lease=0.2).run()
    lost = [r for r in caplog.records if "lost job" in r.getMessage()]
    assert len(lost) == 1 and lost[0].levelno == logging.WARNING
    assert "its done outcome was refused" in lost[0].getMessage()
    assert not [r for r in caplog.records if "handed in again" in r.getMessage()]


async def test_an_outage_that_ends_and_starts_again_logs_each_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FlakyStore(failures=2)
    queue = declared(Queue(store))
    with caplog.at_level(logging.INFO, "batchy.jobs"):
        await fast_worker(queue, burst=True, poll_interval=0.01).run()
        store.calls.clear()
        await fast_worker(queue, burst=True, poll_interval=0.01).run()
    messages = [r.getMessage() for r in caplog.records if "store " in r.getMessage()]
    assert len(messages) == 4
    assert ["unreachable" in m for m in messages] == [True, False, True, False]


async def test_a_store_down_at_start_is_waited_for(caplog: pytest.LogCaptureFixture) -> None:
    class DownAtStart(FlakyStore):
        beats = 0

        async def heartbeat(self, *args: Any, **kwargs: Any) -> list[str]:
            self.beats += 1
            if self.beats == 1:
                raise ConnectionError("connection refused")
            return await super().heartbeat(*args, **kwargs)

    store = DownAtStart(failures=3)
    queue = Queue(store)

    @queue.job(name="noop")
    async def noop() -> None:
        return None

    handle = await noop.enqueue()

    def store_lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if "store " in r.getMessage()]

    with caplog.at_level(logging.INFO, "batchy.jobs"):
        worker = fast_worker(queue, poll_interval=0.01, lease=0.3)
        running = asyncio.ensure_future(worker.run())
        deadline = time.monotonic() + 5
        while len(store_lines()) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        worker.stop()
        await running
    assert (await handle.status()).state == "done"
    lines = store_lines()
    assert len(lines) == 2, lines
    assert "store unreachable since" in lines[0] and "(heartbeat failed)" in lines[0]
    assert "store back after" in lines[1]


# -- Redis: an id in a queue list with no payload ---------------------------------------


@pytest.fixture
async def rqueue(redis_server: tuple[str, int]) -> AsyncIterator[Queue]:
    from batchy_contrib.jobs.redis import RedisBackend

    host, port = redis_server
    backend = RedisBackend(f"redis://{host}:{port}/11", prefix=f"ltest:{uuid.uuid4().hex[:8]}:")
    yield declared(Queue(backend))
    keys = [k async for k in backend.redis.scan_iter(match=backend.prefix + "*")]
    if keys:
        await backend.redis.delete(*keys)
    await backend.close()


async def test_redis_entry_without_payload_is_logged(
    rqueue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    backend = rqueue.backend
    r, p = backend.redis, backend.prefix  # type: ignore[attr-defined]
    await r.rpush(p + "q:default", "orphan")
    with caplog.at_level(logging.INFO, "batchy.jobs"):
        await Worker(rqueue, burst=True, poll_interval=0.01).run()
    (line,) = [r.getMessage() for r in caplog.records if "orphan" in r.getMessage()]
    assert line.startswith("queue 'default' held job id 'orphan' with no payload")
    assert "dropped it (1 such entries so far)" in line
    assert "maxmemory-policy noeviction" in line
    assert backend.dropped == 1  # type: ignore[attr-defined]
    assert await r.llen(p + "q:default") == 0


class DeafStore(MemoryBackend):
    """A memory store whose 2nd to 4th heartbeats fail (the first, at start, goes through)."""

    def __init__(self) -> None:
        super().__init__()
        self.beats = 0

    async def heartbeat(self, worker, held, lease, now):  # type: ignore[no-untyped-def]
        self.beats += 1
        if 1 < self.beats <= 4:
            raise ConnectionError("heartbeat refused")
        return await super().heartbeat(worker, held, lease, now)


async def test_failing_heartbeats_log_one_line_not_a_traceback_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import asyncio

    store = DeafStore()
    worker = fast_worker(declared(Queue(store)), lease=0.3, poll_interval=0.01)
    with caplog.at_level(logging.INFO, "batchy.jobs"):
        task = asyncio.create_task(worker.run())
        # Until a heartbeat went through after the failed ones (0.6 s or so; a fixed
        # wait that long stopped the worker first on a busy machine).
        deadline = time.monotonic() + 10
        while not any("store back" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline, (store.beats, caplog.text)
            await asyncio.sleep(0.01)
        worker.stop()
        await task
    assert store.beats >= 5
    lines = [r.getMessage() for r in caplog.records if "store" in r.getMessage()]
    assert len(lines) == 2, lines
    down, up = lines
    assert "store unreachable since" in down
    assert down.endswith(
        "(heartbeat failed): ConnectionError: heartbeat refused; trying again with backoff "
        "(up to 0.1s apart)"
    )
    assert "store back after" in up and up.endswith("(3 failed tries)")
    assert not any(r.exc_info for r in caplog.records)


class GoneAtStop(FaultyStore):
    """A memory store that refuses every step once ``gone`` (after ``slowly`` seconds: a
    pool that gives up), or never answers once ``silent``; ``steps``: those since."""

    def __init__(self) -> None:
        super().__init__()
        self.gone = False
        self.silent = False
        self.slowly = 0.0
        self.steps: list[str] = []

    async def fault(self, step: str) -> None:
        if self.gone or self.silent:
            self.steps.append(step)
        if self.gone:
            await asyncio.sleep(self.slowly)
            raise ConnectionError("connection refused")
        if self.silent:  # a connection dropped without a word
            await asyncio.Event().wait()


async def test_a_stop_during_an_outage_does_not_wait_out_the_back_off() -> None:
    store = FlakyStore(failures=10_000)  # down from the first turn on
    # A poll interval of 5 s: the wait after a failed try is one (3.75 to 5 s).
    worker = Worker(declared(Queue(store)), poll_interval=5.0, lease=30.0)
    logging.getLogger("batchy.jobs").setLevel(logging.CRITICAL)  # the outage's own lines
    try:
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(1.0)  # in the wait after the first try
        worker.stop()
        began = time.monotonic()
        await asyncio.wait_for(task, 10)
    finally:
        logging.getLogger("batchy.jobs").setLevel(logging.NOTSET)
    assert time.monotonic() - began < 0.5  # not the rest of the wait: 2.75 s or more


@pytest.mark.parametrize("how", ["refuses", "refuses slowly", "stops answering"])
async def test_a_store_lost_as_the_worker_stops_neither_fails_nor_holds_up_the_stop(
    how: str, caplog: pytest.LogCaptureFixture
) -> None:
    # run() used to raise the store's error at its last turn, or wait for an
    # answer for as long as none came.
    store = GoneAtStop()
    queue = Queue(store)
    runs: list[int] = []

    @queue.job(name="slow")
    async def slow(i: int) -> None:
        runs.append(i)
        await asyncio.sleep(0.2)

    handle = await slow.enqueue(1)
    worker = fast_worker(queue, lease=0.6, shutdown_timeout=0.5)
    task = asyncio.create_task(worker.run())
    while not runs:
        await asyncio.sleep(0.01)
    store.gone, store.silent = how.startswith("refuses"), how == "stops answering"
    store.slowly = 0.4 if how == "refuses slowly" else 0.0
    worker.stop()
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, "batchy.jobs"):
        await asyncio.wait_for(task, 10)
    # Shutdown grace, the last turn (one lease), the background tasks' end: once a
    # call went unanswered, the counters and the goodbye do not wait a lease more.
    assert time.monotonic() - began < 0.5 + 0.6 + 1.0 + 0.4
    (last,) = [
        m for m in caplog.messages if m.startswith(f"worker {worker.id} stopped without handing")
    ]
    assert last.startswith(f"worker {worker.id} stopped without handing in 1 outcome(s) (jobs ")
    assert f"(jobs {handle.id}): " in last
    assert last.endswith("those jobs run again once their leases run out (within 0.6s)")
    if how.startswith("refuses"):
        assert "): ConnectionError: connection refused; those jobs" in last
        # One line, as the outage's own: no traceback of the driver's insides
        # (forty lines of redis-py's connect, per worker, at each stop).
        assert not any(r.exc_info for r in caplog.records)
        # Its hand-in found the store gone: the counters and the goodbye, which
        # would each wait as long to find the same, are not sent.
        assert store.steps.count("add_counts") == store.steps.count("forget_worker") == 0
        assert f"worker {worker.id}: the store could not be reached; going without" in caplog.text
    else:
        assert "did not answer within 0.6s (the worker's lease); those jobs" in last
        assert f"worker {worker.id}: the store did not answer; going without its" in caplog.text
    store.gone = store.silent = False
    await asyncio.sleep(0.7)  # its lease runs out: not lost, it runs again
    await fast_worker(queue, burst=True).run()
    assert runs == [1, 1] and (await handle.status()).state == "done"


async def test_a_job_lost_to_an_outage_says_so_rather_than_blame_the_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # After an outage longer than the lease (a server restart that took a while),
    # each lost job's line told the operator to unblock the event loop and raise
    # the lease over "the longest pause of this worker": the loop never stalled.
    store = GoneAtStop()
    queue = Queue(store)
    started = asyncio.Event()

    @queue.job(name="short")
    async def short() -> None:
        started.set()
        await asyncio.sleep(0.1)

    await short.enqueue()
    worker = fast_worker(queue, lease=0.5)
    task = asyncio.create_task(worker.run())
    with caplog.at_level(logging.WARNING, "batchy.jobs"):
        await asyncio.wait_for(started.wait(), 5)
        store.gone = True
        await asyncio.sleep(1.0)  # its lease runs out while the heartbeats fail
        # Another worker's turn, which the store does answer, takes the job on.
        await MemoryBackend.cycle(store, [], ["default"], 1, "other", 5.0, time.time())
        store.gone = False
        await asyncio.sleep(0.5)
        worker.stop()
        await asyncio.wait_for(task, 10)
    (line,) = [m for m in caplog.messages if " lost job " in m]
    assert "its done outcome was refused" in line, line
    assert "lease ran out while the store could not be reached (its heartbeats failed)" in line
    assert line.endswith(
        "A lease longer than the store's outages keeps its jobs through them; else they "
        "run again, as here."
    )


class SilentAtTick(GoneAtStop):
    """A memory store that stops answering with the tick push made once ``silent_next``."""

    def __init__(self) -> None:
        super().__init__()
        self.silent_next = False
        self.pushing = asyncio.Event()

    async def push(self, *args: Any, **kwargs: Any) -> list[bool]:
        if self.silent_next:
            self.silent = True
            self.pushing.set()
        await self.fault("push")
        return await super().push(*args, **kwargs)


async def test_a_stop_during_an_unanswered_tick_push_waits_one_lease_not_two() -> None:
    # The worker's loop pushes the due ticks, then takes its turn, and looks at
    # its stop only after both: a stop that came during an unanswered push waited
    # a lease for the push, then another for a turn that claims nothing, beyond
    # the documented bound (shutdown_timeout, one lease, a second).
    store = SilentAtTick()
    queue = Queue(store)

    @queue.periodic(0.2, name="tick")
    async def tick() -> None:
        return None

    worker = fast_worker(queue, lease=1.0, shutdown_timeout=0.2)
    logging.getLogger("batchy.jobs").setLevel(logging.CRITICAL)  # the outage's own lines
    try:
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0.3)
        store.silent_next = True
        await asyncio.wait_for(store.pushing.wait(), 5)
        worker.stop()
        began = time.monotonic()
        await asyncio.wait_for(task, 10)
    finally:
        logging.getLogger("batchy.jobs").setLevel(logging.NOTSET)
    assert time.monotonic() - began < 1.0 + 0.2 + 0.5


async def test_a_counter_write_that_never_answers_does_not_stop_the_heartbeats() -> None:
    # The heartbeat loop awaited the counters' write with no limit: one that never
    # answered stopped every later heartbeat, and the worker's own expired lease
    # had the same job run again beside itself.
    class DeafCounters(FaultyStore):
        deaf = True

        async def fault(self, step: str) -> None:
            if step == "add_counts" and self.deaf:
                self.deaf = False  # one write whose answer never comes
                await asyncio.Event().wait()

    queue = Queue(DeafCounters())
    starts: list[float] = []

    @queue.job(name="quick")
    async def quick() -> None:
        return None

    @queue.job(name="long")
    async def long() -> None:
        starts.append(time.monotonic())
        await asyncio.sleep(3.0)

    await quick.enqueue()
    worker = Worker(queue, lease=1.0, poll_interval=0.05)
    logging.getLogger("batchy.jobs").setLevel(logging.CRITICAL)
    try:
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0.6)  # its first heartbeat writes the counters: no answer
        await long.enqueue()
        await asyncio.sleep(2.8)  # past two leases: its heartbeats must go on
        worker.stop()
        await asyncio.wait_for(task, 10)
    finally:
        logging.getLogger("batchy.jobs").setLevel(logging.NOTSET)
    assert len(starts) == 1, starts
