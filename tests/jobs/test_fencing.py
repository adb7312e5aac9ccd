"""Fencing, on every store: only the holder of a job's current lease token may speak for it."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from batchy.jobs import (
    Backend,
    Envelope,
    JobEvent,
    JobHook,
    MemoryBackend,
    Outcome,
    Queue,
    Worker,
    WorkerInfo,
    _clock,
)

from .conftest import fast_worker

pytestmark = pytest.mark.timeout(60)


async def steal(backend: Backend, job_id: str = "j0") -> tuple[str, str]:
    """``job_id`` claimed by worker A (lease 0.2 s), then, after the lease, by worker B."""
    (a,) = await backend.cycle([], ["default"], 1, "A", 0.2, time.time())
    await asyncio.sleep(0.3)
    (b,) = await backend.cycle([], ["default"], 1, "B", 5, time.time())
    assert a.id == b.id == job_id and a.token and b.token and a.token != b.token
    return a.token, b.token


async def beat(backend: Backend, worker: str, held: list[tuple[str, str]]) -> list[str]:
    """A heartbeat of ``worker`` for ``held`` with a 5 s lease: the ids not renewed."""
    info = WorkerInfo(worker, "host", 1, ("default",), 1)
    return await backend.heartbeat(info, held, 5, time.time())


async def test_a_stale_token_is_refused_and_the_holders_is_not(backend: Backend) -> None:
    await backend.push([Envelope("j0", "default", "{}")], time.time())
    old, new = await steal(backend)
    # A comes back: its heartbeat, progress save, release and outcome are all refused.
    assert await beat(backend, "A", [("j0", old)]) == ["j0"]
    assert not await backend.save_progress("j0", old, '{"stale":1}', 5, time.time())
    for kind in ("release", "retry", "dead", "done"):
        stale = Outcome("j0", kind, queue="default", payload="{}", result='"A"', keep=60, token=old)  # type: ignore[arg-type]
        done = await backend.cycle([stale], ["default"], 1, "A", 5, time.time())
        assert (list(done), done.refused) == ([], ["j0"]), kind
        assert (await backend.status("j0", time.time())).state == "running"
    assert await backend.dead_jobs() == []
    # B, the holder, is heard: its renewal, its save, its result.
    assert await beat(backend, "B", [("j0", new)]) == []
    assert await backend.save_progress("j0", new, '{"mine":1}', 5, time.time())
    done = Outcome("j0", "done", queue="default", result='"B"', keep=60, token=new)
    assert (await backend.cycle([done], [], 0, "B", 5, time.time())).refused == []
    status = await backend.status("j0", time.time())
    assert (status.state, status.result) == ("done", '"B"')
    # Once done, nobody holds it: even the last holder's second word is refused.
    again = await backend.cycle([done], [], 0, "B", 5, time.time())
    assert again.refused == ["j0"]


async def test_a_stale_outcome_never_moves_an_ordering_key_on(backend: Backend) -> None:
    await backend.push([Envelope(f"j{i}", "default", "{}", key="k") for i in range(2)], time.time())
    old, new = await steal(backend)
    stale = Outcome("j0", "done", queue="default", token=old)
    # j1 stays behind j0, which B still runs.
    assert await backend.cycle([stale], ["default"], 10, "A", 5, time.time()) == []
    (busiest,), _ = await backend.keys(time.time())
    assert (busiest.head, busiest.state, busiest.jobs) == ("j0", "running", 2)
    done = Outcome("j0", "done", queue="default", token=new)
    assert [c.id for c in await backend.cycle([done], ["default"], 10, "B", 5, time.time())] == [
        "j1"
    ]


def silence(worker: Worker) -> asyncio.Event:
    """Stop ``worker``'s heartbeats (a stalled network, a paused process) until the event is set."""
    resume = asyncio.Event()
    beat = worker._beat

    async def maybe_beat() -> None:
        if resume.is_set():
            await beat()

    worker._beat = maybe_beat  # type: ignore[method-assign]
    return resume


def lost_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if " lost job " in r.getMessage()]


@pytest.mark.parametrize("retries", [0, 3])
async def test_a_worker_back_from_a_stall_has_no_say(
    queue: Queue, caplog: pytest.LogCaptureFixture, retries: int
) -> None:
    """A's run of seq 1 stalls past its lease; B runs it again; then A reports a failure.

    Before fencing: with retries=0 the job ended dead, B's result was lost and seq 2
    started while B still ran seq 1; with retries left a third run started.
    """
    caplog.set_level(logging.WARNING, "batchy.jobs")
    events: list[tuple[str, int, int]] = []  # (start|end, seq, run of that seq)
    a_may_fail, b_running, b_may_finish = asyncio.Event(), asyncio.Event(), asyncio.Event()

    @queue.job(ordered_by="key", retries=retries, backoff=lambda n, e: 0.0)
    async def step(key: int, seq: int) -> str:
        run = sum(1 for kind, s, _ in events if kind == "start" and s == seq) + 1
        events.append(("start", seq, run))
        try:
            if seq == 1 and run == 1:  # worker A, stalled past its lease
                await a_may_fail.wait()
                raise RuntimeError("A's stale failure")
            if seq == 1 and run == 2:  # worker B, the new holder
                b_running.set()
                await b_may_finish.wait()
                return "B's result"
            return "ok"
        finally:
            events.append(("end", seq, run))

    first = await step.enqueue(7, 1)
    second = await step.enqueue(7, 2)
    a = fast_worker(queue, lease=0.3, heartbeat=0.1, concurrency=1)
    resume_a = silence(a)
    a_task = asyncio.create_task(a.run())
    while not events:
        await asyncio.sleep(0.01)
    b = fast_worker(queue, lease=2.0)
    b_task = asyncio.create_task(b.run())
    await asyncio.wait_for(b_running.wait(), 5)  # A's lease ran out: B took seq 1
    a_may_fail.set()  # A reports its failure; the store refuses it
    await asyncio.sleep(0.4)
    resume_a.set()  # and A's heartbeats come back: no second warning
    await asyncio.sleep(0.2)
    assert (await first.status()).state == "running"  # still B's
    assert ("start", 1, 3) not in events  # no third run
    assert not any(s == 2 for _, s, _ in events)  # seq 2 waits for B
    assert await queue.dead_jobs() == []
    b_may_finish.set()
    assert await first.result(timeout=5) == "B's result"
    assert await second.result(timeout=5) == "ok"
    for worker, task in ((a, a_task), (b, b_task)):
        worker.stop()
        await task
    assert events.index(("end", 1, 2)) < events.index(("start", 2, 1))
    assert [e for e in events if e[1] == 1 and e[0] == "start"] == [
        ("start", 1, 1),
        ("start", 1, 2),
    ]
    (line,) = lost_lines(caplog)
    kind = "dead" if retries == 0 else "retry"
    assert line.startswith(f"worker {a.id} lost job {first.id} (")
    assert f"queue 'default'): its {kind} outcome was refused, " in line
    assert "s after its 0.3s lease ran out without a renewal" in line
    assert "Raise lease=" in line and "timeout=" in line and "never block the event loop" in line
    assert line.endswith(".")


async def test_a_lost_lease_is_logged_once_and_the_job_let_go(
    queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "batchy.jobs")
    runs: list[str] = []
    a_may_finish = asyncio.Event()

    b_may_finish = asyncio.Event()  # B's run goes on until the checks are done
    cancelled: list[str] = []

    @queue.job
    async def job() -> str:
        runs.append("run")
        if len(runs) == 1:
            try:
                await a_may_finish.wait()
            except asyncio.CancelledError:
                cancelled.append("A")  # stopped: it must not go on beside B's run
                raise
            return "A"
        await b_may_finish.wait()
        return "B"

    handle = await job.enqueue()
    a = fast_worker(queue, lease=0.3, heartbeat=0.05, concurrency=1)
    resume_a = silence(a)
    beats = [0]  # A's heartbeats since they came back
    silenced = a._beat

    async def counted() -> None:
        await silenced()
        beats[0] += resume_a.is_set()

    a._beat = counted  # type: ignore[method-assign]
    a_task = asyncio.create_task(a.run())
    while not runs:
        await asyncio.sleep(0.01)
    b = fast_worker(queue, lease=2.0)
    b_task = asyncio.create_task(b.run())
    while len(runs) < 2:
        await asyncio.sleep(0.01)
    resume_a.set()  # A's heartbeats reach the store again: refused
    deadline = time.monotonic() + 10
    while beats[0] < 4 or not cancelled:  # several heartbeats, however slow the machine
        assert time.monotonic() < deadline, (beats, cancelled)
        await asyncio.sleep(0.01)
    lines = lost_lines(caplog)
    assert len(lines) == 1, lines
    line = lines[0]
    assert f"lost job {handle.id} (" in line and "its heartbeat was refused, " in line
    info = await queue.info()
    assert {w.id: w.running for w in info.workers}[a.id] == ()  # A no longer counts it
    assert cancelled == ["A"]
    a_may_finish.set()  # A's run ends: its outcome is dropped, not even sent
    await asyncio.sleep(0.2)
    assert (await handle.status()).state == "running"
    b_may_finish.set()
    assert await handle.result(timeout=5) == "B"
    for worker, task in ((a, a_task), (b, b_task)):
        worker.stop()
        await task
    assert len(lost_lines(caplog)) == 1
    assert a.processed == 0 and b.processed == 1


async def test_shutdown_releases_only_jobs_still_held(queue: Queue) -> None:
    started: list[Any] = []

    @queue.job
    async def stuck() -> None:
        started.append(1)
        await asyncio.sleep(30)

    handle = await stuck.enqueue()
    a = fast_worker(queue, lease=0.3, heartbeat=0.1, shutdown_timeout=0.05, concurrency=1)
    silence(a)
    a_task = asyncio.create_task(a.run())
    while not started:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.35)
    (b_claim,) = await queue.backend.cycle([], ["default"], 1, "B", 5, time.time())
    a.stop()
    await a_task  # its release of the job (now B's) is refused: B keeps it
    assert (await handle.status()).state == "running"
    assert await queue.backend.cycle([], ["default"], 1, "C", 5, time.time()) == []
    done = Outcome(handle.id, "done", queue="default", token=b_claim.token)
    assert (await queue.backend.cycle([done], [], 0, "B", 5, time.time())).refused == []


async def test_a_run_whose_lease_ran_out_before_it_began_never_begins(
    queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    """A is paused after it starts a claimed job's task but before the task's first step.

    Before the check at the run's first step, A's handler began after the pause,
    when the store had already given the job to B: two runs of one job (and, on an
    ordering key, a run beside the next job's), which the crash test caught on
    PostgreSQL under load.
    """
    caplog.set_level(logging.WARNING, "batchy.jobs")
    runs: list[str] = []

    @queue.job(ordered_by="key")
    async def step(key: int, seq: int) -> None:
        runs.append(f"{key}/{seq}")

    first = await step.enqueue(7, 1)
    a = fast_worker(queue, lease=0.2, heartbeat=0.05, concurrency=1)
    begin = a._begin

    def begin_then_pause(job: Any, claim: Any) -> None:
        begin(job, claim)
        time.sleep(0.3)  # SIGSTOP here: the task exists, its first step has not run
        # Stopped once paused, however long the claim took: a stop that came first
        # (a fixed sleep, on a busy machine) left no claim to lose.
        a.stop()

    a._begin = begin_then_pause  # type: ignore[method-assign]
    await asyncio.wait_for(a.run(), 30)
    assert runs == []  # A never ran it: its lease had run out before the run began
    (line,) = lost_lines(caplog)
    assert f"lost job {first.id} (" in line and "its lease ran out before its run began" in line
    b = fast_worker(queue)
    b_task = asyncio.create_task(b.run())
    await first.result(timeout=5)
    b.stop()
    await b_task
    assert runs == ["7/1"]


@pytest.mark.parametrize("shape", ["async", "generator"])
async def test_a_pause_just_before_the_handler_begins_never_begins_it(
    queue: Queue, caplog: pytest.LogCaptureFixture, shape: str
) -> None:
    """The pause falls after the run's first step (its job_started hooks), before the handler.

    The engine begins a handler a loop step or more after the runner's first step;
    the lease is checked again in the handler's first line.
    """
    caplog.set_level(logging.WARNING, "batchy.jobs")
    runs: list[str] = []

    if shape == "async":

        @queue.job(name="pausing")
        async def job() -> None:
            runs.append("run")
    else:

        @queue.job(name="pausing")
        def job() -> Any:
            runs.append("run")
            return (yield [])

    paused: list[str] = []

    class Pause(JobHook):
        def job_started(self, event: JobEvent) -> None:
            if not paused:
                paused.append(event.id)
                time.sleep(0.3)  # SIGSTOP here: the handler has not begun

    handle = await job.enqueue()
    a = fast_worker(queue, lease=0.2, heartbeat=0.05, concurrency=1, hooks=[Pause()])
    a_task = asyncio.create_task(a.run())
    await handle.result(timeout=5)  # the claim after the lost one runs it
    a.stop()
    await a_task
    assert paused == [handle.id] and runs == ["run"]  # once, not also in the lost claim
    (line,) = lost_lines(caplog)
    assert f"lost job {handle.id} (" in line and "its lease ran out before its run began" in line


def test_a_heartbeat_refused_after_the_turn_that_finished_the_job_is_no_lost_lease(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The store ran a heartbeat after the turn that applied the job's outcome (the
    # two cross on their way), so it refused the claim; the worker read that answer
    # first and logged "lost job ... the store gave it to another worker" for a
    # job that had just ended well (67 times in 20,000 jobs on a busy machine).
    import time as clock

    from batchy.jobs import JSONSerializer, Outcome
    from batchy.jobs._leases import Leases
    from batchy.jobs._model import Claimed

    leases = Leases("w1", 30.0, JSONSerializer())
    claim = leases.add(Claimed("j1", "default", '{"job": "x"}', "t1"), clock.monotonic())
    outcome = leases.finished(claim, Outcome("j1", "done", token="t1"))
    assert outcome is not None
    leases.sending([outcome])
    with caplog.at_level("WARNING", logger="batchy.jobs"):
        leases.renewed([claim], ["j1"], clock.monotonic())  # the heartbeat's answer first
        leases.settle([outcome], [])  # then the turn's: applied
    assert caplog.records == []
    assert not leases.holds(claim)


def test_a_job_claimed_anew_by_the_same_worker_ends_its_earlier_claim(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A worker stalled past its lease, and its own next cycle gave the job back
    # and claimed it anew. It held both claims and named the job twice in its
    # heartbeats and turns, which stores answer by job id: the memory and Redis
    # stores said the job lost (for the old claim), and the worker lost the new
    # claim too, cancelling the job's only valid run; SQLite and PostgreSQL said
    # it renewed (for the new one), and the old run went on unnoticed.
    import time as clock

    from batchy.jobs import JSONSerializer, Outcome
    from batchy.jobs._leases import Leases
    from batchy.jobs._model import Claimed

    leases = Leases("w1", 30.0, JSONSerializer())
    old = leases.add(Claimed("j1", "default", '{"job": "x"}', "t1"), clock.monotonic())
    with caplog.at_level("WARNING", logger="batchy.jobs"):
        new = leases.add(Claimed("j1", "default", '{"job": "x"}', "t2"), clock.monotonic())
    assert leases.held() == [new]  # what the next heartbeat names
    (line,) = lost_lines(caplog)
    assert "lost job j1 (x, queue 'default'): this worker claimed it anew" in line
    assert leases.finished(old, Outcome("j1", "done", token="t1")) is None  # never sent
    outcome = leases.finished(new, Outcome("j1", "done", token="t2"))
    assert outcome is not None and outcome.token == "t2"
    leases.settle([outcome], [])
    assert leases.held() == [] and leases._newest == {}


async def test_a_worker_that_claims_its_job_anew_stops_the_earlier_run(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The store's clock jumps past the lease while the first run waits (a stall,
    # as the store sees it), and no heartbeat comes in between: the worker's next
    # cycle gives the job back and claims it anew. The earlier run went on beside
    # the new one, as the store says nothing of a claim no call names any more.
    caplog.set_level(logging.WARNING, "batchy.jobs")
    skew = [0.0]
    monkeypatch.setattr(_clock, "store_now", lambda: time.time() + skew[0])
    queue = Queue(MemoryBackend())
    runs: list[str] = []

    @queue.job
    async def slow() -> None:
        runs.append("start")
        skew[0] = 60.0  # the lease (30 s) ran out, in the store's eyes
        try:
            await asyncio.sleep(0.5)
        except asyncio.CancelledError:
            runs.append("stopped")
            raise
        runs.append("done")

    handle = await slow.enqueue()
    worker = fast_worker(queue, lease=30.0, heartbeat=10.0, concurrency=2)
    task = asyncio.create_task(worker.run())
    await handle.result(timeout=5)
    worker.stop()
    await task
    assert runs == ["start", "start", "stopped", "done"]
    (line,) = lost_lines(caplog)
    assert f"lost job {handle.id} (" in line and "): this worker claimed it anew" in line
