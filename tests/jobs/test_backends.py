"""The shared backend suite: every store (memory, SQLite, Redis) behaves the same."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import replace
from typing import Any

import pytest

import batchy
from batchy.jobs import (
    Backend,
    DeadJobError,
    DelayError,
    Envelope,
    JobEvent,
    JobHook,
    JobNotFound,
    JobStateError,
    MemoryBackend,
    NoRetry,
    Outcome,
    Queue,
    ResultNotKept,
    Retry,
    SerializationError,
    SQLiteBackend,
    StoredJob,
    TextError,
)
from batchy.jobs._fetch import fetch_order
from batchy.jobs._model import new_id as new_job_id
from batchy.jobs._screen import text_problem
from batchy.testing import record

from .conftest import fast_worker

pytestmark = pytest.mark.timeout(60)


async def drain(queue: Queue, **options) -> int:
    worker = fast_worker(queue, burst=True, **options)
    await worker.run()
    return worker.processed


async def test_enqueue_run_and_keep_result(queue: Queue) -> None:
    @queue.job
    async def add(a: int, b: int) -> int:
        return a + b

    handle = await add.enqueue(2, b=3)
    assert (await handle.status()).state == "queued"
    assert await drain(queue) == 1
    assert (await handle.status()).state == "done"
    assert await handle.result(timeout=1) == 5


async def test_generator_handlers_are_jobs(queue: Queue) -> None:
    @batchy.batched
    def double(keys):
        return [k * 2 for k in keys]

    @queue.job
    def twice(x: int):
        y = yield double(x)
        return y

    handle = await twice.enqueue(21)
    await drain(queue)
    assert await handle.result() == 42


async def test_bulk_enqueue_is_all_or_nothing(queue: Queue) -> None:
    @queue.job
    async def noop(x: object) -> None:
        return None

    with pytest.raises(SerializationError, match="noop"):
        await queue.enqueue_many([noop.call(1), noop.call(object())])
    assert await drain(queue) == 0
    handles = await queue.enqueue_many(noop.call(i) for i in range(50))
    assert len({h.id for h in handles}) == 50
    assert await drain(queue) == 50


async def test_jobs_batch_their_loads_across_jobs(queue: Queue) -> None:
    @batchy.batched
    async def users_by_id(ids):
        await asyncio.sleep(0.001)
        return [{"id": i} for i in ids]

    @queue.job
    async def load_user(uid: int) -> int:
        user = await users_by_id(uid)
        return user["id"]

    await queue.enqueue_many(load_user.call(i) for i in range(1000))
    with record() as rec:
        assert await drain(queue, concurrency=100) == 1000
    calls = rec.calls(users_by_id)
    assert sorted(k for c in calls for k in c) == list(range(1000))
    assert len(calls) <= 13, rec.report()


async def test_each_job_has_its_own_cache_scope(queue: Queue) -> None:
    seen = []

    @batchy.batched
    def settings(keys):
        seen.append(list(keys))
        return [f"v{len(seen)}" for _ in keys]

    @queue.job
    async def read(key: str) -> str:
        first = await settings(key)
        again = await settings(key)  # same scope: cached
        assert first == again
        return first

    a = await read.enqueue("k")
    await drain(queue, concurrency=1)
    b = await read.enqueue("k")
    await drain(queue, concurrency=1)
    assert seen == [["k"], ["k"]]  # the second job did not see the first one's cache
    assert [await a.result(), await b.result()] == ["v1", "v2"]


async def test_retries_then_dead_with_reason_and_traceback(queue: Queue) -> None:
    runs = []

    @queue.job(retries=2, backoff=lambda n, e: 0.0)
    async def flaky(x: int) -> None:
        runs.append(x)
        raise ValueError(f"bad {x}")

    handle = await flaky.enqueue(7)
    for _ in range(3):
        await drain(queue)
    assert runs == [7, 7, 7]
    status = await handle.status()
    assert status.state == "dead"
    assert "ValueError: bad 7" in status.reason and "retries=2" in status.reason
    (dead,) = await queue.dead_jobs()
    assert dead.id == handle.id and "raise ValueError" in dead.traceback
    with pytest.raises(DeadJobError, match=handle.id):
        await handle.result()
    assert (await queue.info()).dead == 1


async def test_retry_uses_backoff_and_per_enqueue_override(queue: Queue) -> None:
    delays = []

    def backoff(count: int, error: BaseException) -> float:
        delays.append(count)
        return 100.0

    @queue.job(backoff=backoff)
    async def fail() -> None:
        raise RuntimeError("nope")

    retrying = await fail.enqueue()
    never = await fail.options(retries=0).enqueue()
    await drain(queue)
    assert delays == [0]
    assert (await retrying.status()).state == "retrying"
    assert (await never.status()).state == "dead"
    (q,) = (await queue.info()).queues
    assert (q.retrying, q.size) == (1, 0)


async def test_raise_retry_with_delay(queue: Queue) -> None:
    @queue.job
    async def later() -> None:
        raise Retry(delay=0.2, reason="not yet")

    handle = await later.enqueue()
    await drain(queue)
    assert (await handle.status()).state == "retrying"
    await asyncio.sleep(0.25)
    assert (await handle.status()).state in ("queued", "retrying")
    assert await drain(queue) == 1


async def test_delayed_jobs_wait_for_their_time(queue: Queue) -> None:
    ran = []

    @queue.job
    async def remind(x: int) -> None:
        ran.append(x)

    handle = await remind.options(delay=0.3).enqueue(1)
    await remind.options(at=time.time() - 1).enqueue(2)
    assert (await handle.status()).state == "scheduled"
    await drain(queue)
    assert ran == [2]
    info = (await queue.info()).queues[0]
    assert info.scheduled == 1
    await asyncio.sleep(0.35)
    await drain(queue)
    assert ran == [2, 1]


async def test_expired_lease_is_redelivered_once(queue: Queue) -> None:
    ran = []

    @queue.job
    async def job(x: int) -> None:
        ran.append(x)

    handle = await job.enqueue(1)
    # A worker claims it and dies (never acks, never renews).
    (claimed,) = await queue.backend.cycle([], ["default"], 10, "ghost", 0.2, time.time())
    assert claimed.id == handle.id
    assert (await handle.status()).state == "running"
    assert await queue.backend.cycle([], ["default"], 10, "other", 5, time.time()) == []
    await asyncio.sleep(0.3)  # the store's clock decides: time must really pass
    # After the lease, exactly one of two competing claims gets it.
    first = await queue.backend.cycle([], ["default"], 10, "w1", 5, time.time())
    second = await queue.backend.cycle([], ["default"], 10, "w2", 5, time.time())
    assert [c.id for c in first + second] == [handle.id]
    assert first[0].token != claimed.token  # a new claim, a new lease token


async def test_heartbeat_keeps_a_long_job_leased(queue: Queue) -> None:
    runs = []

    @queue.job
    async def slow() -> None:
        runs.append(1)
        await asyncio.sleep(0.8)

    await slow.enqueue()
    long_runner = fast_worker(queue, lease=0.3, heartbeat=0.1, burst=True)
    thief = fast_worker(queue, lease=0.3, heartbeat=0.1, burst=False)
    thief_task = asyncio.create_task(thief.run())
    await asyncio.sleep(0)  # let the thief start too
    await long_runner.run()
    thief.stop()
    await thief_task
    assert len(runs) == 1


async def test_release_hands_the_job_back_first(queue: Queue) -> None:
    @queue.job
    async def job(x: int) -> None:
        return None

    a = await job.enqueue(1)
    b = await job.enqueue(2)
    now = time.time()
    (claimed,) = await queue.backend.cycle([], ["default"], 1, "w", 30, now)
    assert claimed.id == a.id
    release = [Outcome(a.id, "release", token=claimed.token)]
    again = await queue.backend.cycle(release, ["default"], 2, "w", 30, now)
    assert [c.id for c in again] == [a.id, b.id]


async def test_shutdown_hands_unfinished_jobs_back(queue: Queue) -> None:
    started = asyncio.Event()

    @queue.job
    async def stuck() -> None:
        started.set()
        await asyncio.sleep(30)

    handle = await stuck.enqueue()
    worker = fast_worker(queue, shutdown_timeout=0.1)
    running = asyncio.create_task(worker.run())
    await started.wait()
    assert (await handle.status()).state == "running"
    worker.stop()
    await asyncio.wait_for(running, 5)
    assert (await handle.status()).state == "queued"


async def test_bad_payloads_go_dead_and_the_worker_survives(queue: Queue) -> None:
    @queue.job
    async def good() -> str:
        return "ok"

    await queue.backend.push(
        [
            Envelope("garbage", "default", "{not json"),
            Envelope("not-a-job", "default", "[1, 2, 3]"),
            Envelope("unknown", "default", '{"job": "nope.missing", "args": [], "kwargs": {}}'),
        ],
        time.time(),
    )
    handle = await good.enqueue()
    await drain(queue)
    assert await handle.result() == "ok"
    reasons = {d.id: d.reason for d in await queue.dead_jobs()}
    assert "cannot be decoded" in reasons["garbage"]
    assert "is not a job" in reasons["not-a-job"]
    assert "'nope.missing'" in reasons["unknown"] and "does not declare" in reasons["unknown"]
    assert "or import its module from the one the worker loads" in reasons["unknown"]


async def test_dead_set_is_capped_by_size_and_age(queue: Queue) -> None:
    backend = queue.backend
    backend.dead_max = 3
    backend.dead_max_age = 0.5
    await backend.push([Envelope(f"j{i}", "default", "{}") for i in range(6)], time.time())
    claimed = await backend.cycle([], ["default"], 6, "w", 30, time.time())
    assert len(claimed) == 6
    bury = [
        Outcome(c.id, "dead", queue="default", payload="{}", reason="r", token=c.token)
        for c in sorted(claimed, key=lambda c: c.id)
    ]
    await backend.cycle(bury[:2], [], 0, "w", 30, time.time())
    await asyncio.sleep(0.3)  # ages are on the store's clock: time must really pass
    await backend.cycle(bury[2:3], [], 0, "w", 30, time.time())
    await asyncio.sleep(0.3)
    await backend.cycle(bury[3:], [], 0, "w", 30, time.time())  # j0, j1 are now too old
    dead = await backend.dead_jobs()
    assert [d.id for d in dead][:3] == [d.id for d in dead]  # newest first, at most 3
    assert {d.id for d in dead} <= {"j3", "j4", "j5"} and len(dead) == 3


async def test_dead_jobs_can_be_retried_and_deleted(queue: Queue) -> None:
    calls = []

    @queue.job(retries=0)
    async def once(x: int) -> None:
        calls.append(x)
        if len(calls) <= 2:
            raise ValueError("first runs fail")

    a = await once.enqueue(1)
    b = await once.enqueue(2)
    await drain(queue)
    assert {d.id for d in await queue.dead_jobs()} == {a.id, b.id}
    assert await queue.retry_dead([a.id]) == 1
    await drain(queue)
    assert (await a.status()).state == "done"
    assert await queue.delete_dead() == 1
    assert await queue.dead_jobs() == []
    with pytest.raises(JobNotFound, match=r"job missing is not in .*nothing was retried"):
        await queue.retry_dead(["missing"])


async def test_unique_push_happens_once_per_key(queue: Queue) -> None:
    backend = queue.backend
    env = Envelope(new_job_id(), "default", "{}", unique="tick:1", unique_ttl=0.2)
    now = time.time()
    assert await backend.push([env], now) == [True]
    other = Envelope(new_job_id(), "default", "{}", unique="tick:1", unique_ttl=0.2)
    assert await backend.push([other], now) == [False]
    await asyncio.sleep(0.3)
    assert await backend.push([other], time.time()) == [True]


async def test_strict_queue_order(queue: Queue) -> None:
    order = []

    @queue.job(queue="low")
    async def low(x: int) -> None:
        order.append(("low", x))

    @queue.job(queue="high")
    async def high(x: int) -> None:
        order.append(("high", x))

    for i in range(3):
        await low.enqueue(i)
        await high.enqueue(i)
    await drain(queue, queues=["high", "low"], concurrency=1)
    assert [q for q, _ in order] == ["high"] * 3 + ["low"] * 3


async def test_weighted_queues_take_turns(queue: Queue) -> None:
    worker = fast_worker(queue, queues=["critical,3", "default,1"])
    firsts = [fetch_order(worker.queue_specs)[0] for _ in range(2000)]
    share = firsts.count("critical") / len(firsts)
    assert 0.6 < share < 0.9  # weight 3 of 4 goes first about 3/4 of the time


async def test_periodic_job_runs_once_per_tick_across_workers(queue: Queue) -> None:
    ticks = []

    @queue.periodic(0.2)
    async def every_200ms() -> None:
        ticks.append(time.time())

    # What the store accepted, per tick: every worker offers every tick it sees.
    offered: list[str] = []
    accepted: list[str] = []
    push = queue.backend.push

    async def recording_push(envelopes: Any, now: float, **kw: Any) -> list[bool]:
        oks = await push(envelopes, now, **kw)
        for envelope, ok in zip(envelopes, oks, strict=True):
            offered.append(envelope.unique)
            if ok:
                accepted.append(envelope.unique)
        return oks

    queue.backend.push = recording_push  # type: ignore[method-assign]
    announced = Announced()
    queue.hooks.append(announced)
    workers = [fast_worker(queue, poll_interval=0.01) for _ in range(3)]
    tasks = [asyncio.create_task(w.run()) for w in workers]
    await asyncio.sleep(1.1)
    for w in workers:
        w.stop()
    await asyncio.gather(*tasks)
    # Never twice in one tick: each tick's key is accepted once, however many
    # workers offered it (run times are no proof: a loaded machine runs a tick late).
    assert len(set(offered)) < len(offered), offered  # several workers did offer ticks
    assert len(accepted) == len(set(accepted)), accepted
    assert 3 <= len(ticks) <= len(accepted) <= 6
    # Hooks (metrics, a producer span) hear of each accepted tick once, from the
    # worker whose push was kept; they heard of none before.
    assert [e.job for e in announced.events] == [every_200ms.name] * len(accepted)


class Announced(JobHook):
    def __init__(self) -> None:
        self.events: list[JobEvent] = []

    def job_enqueued(self, event: JobEvent) -> None:
        event.headers["seen-by"] = "hook"
        self.events.append(event)


async def test_starting_a_sharded_run_tells_the_hooks_of_each_shard(queue: Queue) -> None:
    """ShardedJob.start enqueued its shards without a job_enqueued event (no span, no count)."""

    @queue.sharded(shards=3, name="rows")
    async def rows(shard: int, shards: int, cursor: int | None) -> None:
        return None

    announced = Announced()
    queue.hooks.append(announced)
    assert await rows.start("r1") == 3
    assert sorted(e.id for e in announced.events) == [f"rows:r1:{i}" for i in range(3)]
    # The headers a hook wrote (a trace context) travel with each shard's job.
    started: list[dict[str, str]] = []

    class Started(JobHook):
        def job_started(self, event: JobEvent) -> None:
            started.append(dict(event.headers))

    await fast_worker(queue, burst=True, hooks=[Started()]).run()
    assert started == [{"seen-by": "hook"}] * 3


async def test_timeout_fails_the_attempt(queue: Queue) -> None:
    @queue.job(timeout=0.05, retries=0)
    async def sleepy() -> None:
        await asyncio.sleep(5)

    handle = await sleepy.enqueue()
    await drain(queue)
    status = await handle.status()
    assert status.state == "dead" and "timeout of 0.05s" in status.reason


async def test_a_handlers_own_timeout_error_is_not_the_jobs_timeout(queue: Queue) -> None:
    """A TimeoutError of the handler's (a socket's) within the job's deadline is its own failure."""

    @queue.job(timeout=30, retries=0)
    async def fetch() -> None:
        raise TimeoutError("the upstream API did not answer")

    handle = await fetch.enqueue()
    await drain(queue)
    status = await handle.status()
    assert status.state == "dead" and "the upstream API did not answer" in status.reason
    assert "timeout of 30" not in status.reason


async def test_info_counts_and_live_workers(queue: Queue) -> None:
    started = asyncio.Event()

    @queue.job
    async def hold() -> None:
        started.set()
        await asyncio.sleep(0.5)

    @queue.job(queue="other")
    async def later() -> None:
        return None

    await hold.enqueue()
    await later.options(delay=60).enqueue()
    await later.enqueue()
    worker = fast_worker(queue, queues=["default"])
    task = asyncio.create_task(worker.run())
    await started.wait()
    info = await queue.info()
    by_name = {q.name: q for q in info.queues}
    assert by_name["default"].running == 1
    assert (by_name["other"].size, by_name["other"].scheduled) == (1, 1)
    assert by_name["other"].latency >= 0
    assert [w.id for w in info.workers] == [worker.id]
    assert info.workers[0].concurrency == 10
    worker.stop()
    await task
    assert (await queue.info()).workers == ()


async def test_hooks_see_every_job(queue: Queue) -> None:
    events: list[JobEvent] = []

    class Collect(JobHook):
        def job_started(self, event: JobEvent) -> None:
            events.append(event)

        def job_finished(self, event: JobEvent) -> None:
            events.append(event)

    queue.hooks.append(Collect())

    @queue.job(retries=0)
    async def maybe(ok: bool) -> None:
        if not ok:
            raise ValueError("no")

    await maybe.enqueue(True)
    await maybe.enqueue(False)
    await drain(queue, concurrency=1)
    assert [e.outcome for e in events] == ["started", "done", "started", "dead"]
    assert isinstance(events[-1].error, ValueError) and events[-1].attempt == 1


async def test_timeout_and_shutdown_cancel_the_handler(queue: Queue) -> None:
    cancelled = []

    @queue.job(timeout=0.05, retries=0)
    async def sleepy(tag: str) -> None:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(tag)
            raise

    await sleepy.enqueue("timeout")
    await drain(queue)
    assert cancelled == ["timeout"]
    await sleepy.options(retries=1).enqueue("shutdown")
    sleepy.timeout = None
    worker = fast_worker(queue, shutdown_timeout=0.05)
    task = asyncio.create_task(worker.run())
    while not cancelled[1:] and worker.stats()["running"] == 0:
        await asyncio.sleep(0.01)
    worker.stop()
    await task
    assert cancelled == ["timeout", "shutdown"]


async def test_an_id_still_in_the_store_is_not_enqueued_twice(queue: Queue) -> None:
    ran = []

    @queue.job
    async def once(x: int) -> None:
        ran.append(x)

    await once.options(id="order-7").enqueue(1)
    await once.options(id="order-7").enqueue(2)  # still queued: skipped
    await drain(queue)
    assert ran == [1]
    await once.options(id="order-7").enqueue(3)  # done and gone: runs again
    await drain(queue)
    assert ran == [1, 3]


async def test_enqueue_from_code_without_an_event_loop(queue: Queue) -> None:
    @queue.job
    async def add(a: int, b: int) -> int:
        return a + b

    # A sync caller (a web view) runs in another thread, outside any event loop.
    handle = await asyncio.to_thread(add.enqueue_sync, 1, 2)
    handles = await asyncio.to_thread(queue.enqueue_many_sync, [add.call(3, 4)])
    later = await asyncio.to_thread(add.options(delay=60).enqueue_sync, 5, 6)
    assert (await later.status()).state == "scheduled"
    await drain(queue)
    assert [await handle.result(), await handles[0].result()] == [3, 7]


# -- poison values hurt only their own job (issue 12) ------------------------------------


async def test_one_jobs_bad_values_fail_that_job_never_the_round_trip(queue: Queue) -> None:

    backend: Backend = queue.backend
    ids = [new_job_id() for _ in range(4)]
    now = time.time()
    await backend.push([Envelope(i, "default", '{"job":"x"}') for i in ids], now)
    claimed = await backend.cycle([], ["default"], 10, "w1", 30.0, now)
    assert {c.id for c in claimed} == set(ids)
    nan_retry, str_retry, inf_keep, fine = ids
    token = {c.id: c.token for c in claimed}  # only the lease holder's word counts
    outcomes = [
        Outcome(nan_retry, "retry", queue="default", payload='{"job":"x"}', due=float("nan")),
        Outcome(str_retry, "retry", queue="default", payload='{"job":"x"}', due="soon"),  # type: ignore[arg-type]
        Outcome(inf_keep, "done", queue="default", result='"r"', keep=float("inf")),
        Outcome(fine, "done", queue="default", result='"ok"', keep=60.0),
    ]
    outcomes = [replace(o, token=token[o.id]) for o in outcomes]
    await backend.cycle(outcomes, ["default"], 10, "w1", 30.0, time.time())  # no error
    assert (await backend.status(fine, time.time())).result == '"ok"'
    assert (await backend.status(inf_keep, time.time())).state in ("done", "unknown")
    for job_id, shown in ((nan_retry, "due=nan"), (str_retry, "due='soon'")):
        status = await backend.status(job_id, time.time())
        assert status.state == "dead", (job_id, status)
        assert f"its retry outcome had {shown}, not a finite Unix time" in status.reason


async def test_push_refuses_a_bad_due_and_stores_nothing(queue: Queue) -> None:
    from batchy.jobs import DelayError

    good, bad = new_job_id(), new_job_id()
    envelopes = [
        Envelope(good, "default", '{"job":"x"}'),
        Envelope(bad, "default", '{"job":"x"}', due=float("nan")),
    ]
    with pytest.raises(DelayError, match=f"job {bad}: due=nan is not finite"):
        await queue.backend.push(envelopes, time.time())
    assert (await queue.backend.status(good, time.time())).state == "unknown"


async def test_a_retry_with_a_bad_delay_is_dead_and_the_others_finish(queue: Queue) -> None:
    class Again(Retry):
        pass

    @queue.job(retries=5)
    async def poisoned() -> None:
        error = Again(delay=1)
        error.delay = float("nan")
        raise error

    @queue.job
    async def fine(i: int) -> int:
        return i

    bad = await poisoned.enqueue()
    good = [await fine.enqueue(i) for i in range(5)]
    await drain(queue)
    assert [await h.result() for h in good] == list(range(5))
    status = await bad.status()
    assert status.state == "dead" and "Retry gave delay=nan, which is not finite" in status.reason


async def test_wait_for_work_ends_on_a_push_on_work_left_and_at_a_due_time(queue: Queue) -> None:
    backend = queue.backend
    loop = asyncio.get_running_loop()

    async def push(due: float | None = None) -> None:
        await backend.push([Envelope(new_job_id(), "default", "{}", due=due)], time.time())

    async def wait(timeout: float) -> float:
        start = loop.time()
        await backend.wait_for_work("w1", ["default"], timeout)
        return loop.time() - start

    # A wait may end early (the first one opens SQLite's pipes; Redis reports a
    # BLPOP that timed out on the server at the next call): then it lasts.
    await wait(0.05)
    await wait(0.3)
    assert await wait(0.3) >= 0.25  # nothing to do: it lasts its timeout
    waiting = asyncio.ensure_future(wait(5.0))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await push()
    assert await asyncio.wait_for(waiting, 2.0) < 1.0  # a push ends it
    await push()
    await push()
    assert len(await backend.cycle([], ["default"], 1, "w1", 30.0, time.time())) == 1
    # Two ready jobs are left, and the wake-ups of the pushes may be spent:
    # a cycle that had no room for all of them must leave a wake-up.
    assert await wait(5.0) < 1.0
    assert len(await backend.cycle([], ["default"], 10, "w1", 30.0, time.time())) == 2
    due = time.time() + 0.4
    await push(due)
    waits = 0
    while time.time() < due - 0.02 and waits < 10:
        await wait(5.0)
        waits += 1
    # Each wake-up still on its way may end one wait early: of the three above (two
    # pushes, the wake-up the short cycle left) one ended the last wait, and this
    # push sends one more; a store sends them one by one, so under load they can
    # land apart. The wait after them lasts until the due time: 4 at most, not 10.
    assert waits <= 4 and due - 0.02 <= time.time() < due + 0.5
    assert len(await backend.cycle([], ["default"], 10, "w1", 30.0, time.time())) == 1
    await backend.forget_worker("w1")


async def test_a_nul_character_in_a_failure_does_not_stop_the_worker(queue: Queue) -> None:
    # PostgreSQL text holds no NUL, and an exception's message may: every store
    # keeps it written as an escape. Such an outcome once made every cycle of its
    # worker fail (on PostgreSQL).
    @queue.job(retries=0)
    async def broken(n: int) -> None:
        raise ValueError(f"bad byte \x00 in record {n}")

    @queue.job
    async def fine(n: int) -> int:
        return n

    dead = await broken.enqueue(1)
    done = await fine.enqueue(2)
    await asyncio.wait_for(drain(queue), 20)
    assert (await done.status()).state == "done"
    status = await dead.status()
    assert status.state == "dead"
    assert "bad byte \\x00 in record 1" in status.reason


# -- text no store can keep ---------------------------------------------------------------

# A file name decoded with errors="surrogateescape" holds a lone surrogate; PostgreSQL
# text holds no NUL. Before, the first froze every worker that ran the job (the whole
# turn failed, for ever), the second failed a PostgreSQL push with the driver's words.
UNKEEPABLE = ["caf\udce9.txt", "report\x00.pdf"]


async def test_an_exception_message_no_store_can_encode_reaches_the_dead_set(
    queue: Queue,
) -> None:
    @queue.job
    async def index(name: str) -> None:
        raise NoRetry(f"cannot index {UNKEEPABLE[0]} or {UNKEEPABLE[1]}")

    @queue.job
    async def fine(n: int) -> int:
        return n

    bad = await index.enqueue("x")
    goods = [await fine.enqueue(n) for n in range(3)]
    assert await drain(queue) == 4
    assert [await g.result(timeout=1) for g in goods] == [0, 1, 2]
    (dead,) = await queue.dead_jobs()
    assert dead.id == bad.id
    assert "cannot index caf\\udce9.txt or report\\x00.pdf" in dead.reason
    assert "\\udce9" in dead.traceback


@pytest.mark.parametrize("text", UNKEEPABLE)
@pytest.mark.parametrize("field", ["key", "id"])  # (queue names are checked as declared)
async def test_an_id_queue_or_key_no_store_can_keep_fails_its_enqueue(
    queue: Queue, field: str, text: str
) -> None:
    @queue.job
    async def index(name: str) -> None:
        return None

    with pytest.raises(TextError) as info:
        await index.options(**{field: text}).enqueue("x")
    message = str(info.value)
    assert message.startswith(f"cannot enqueue job {index.name!r} (id ")
    problem = "NUL character (\\x00)" if "\x00" in text else "lone surrogate ('\\udce9'"
    assert repr(text)[1:-1] in message and problem in message, message
    assert "nothing was enqueued" in message
    assert sum(q.size for q in (await queue.info()).queues) == 0


async def test_chaos_any_text_in_messages_results_and_keys(queue: Queue) -> None:
    # Random text over an alphabet of what breaks encoders (NUL, lone surrogates of
    # both halves, astral characters, quotes, backslashes, escapes as literal text):
    # a job either enqueues and ends done or dead with its text intact (escaped in
    # the dead set only where no store can hold it), or its enqueue alone fails.
    rng = random.Random(15)
    alphabet = ["\x00", "\udce9", "\ud800", "\udfff", "é", "😀", "\\", '"', "'", "\n",
                "\x7f", "a", "u0000", "\\u0000", "{", "}"]  # fmt: skip

    @queue.job
    async def echo(text: str, fail: bool) -> str:
        if fail:
            raise NoRetry(text)
        return text

    texts = ["".join(rng.choices(alphabet, k=rng.randint(0, 8))) for _ in range(40)]
    handles = {}
    for i, text in enumerate(texts):
        key = text if i % 3 == 0 else None
        try:
            handles[i] = await echo.options(key=key).enqueue(text, i % 2 == 1)
        except TextError:
            assert key is not None and text_problem(f"x:{key}") is not None, repr(key)
        else:
            assert key is None or text_problem(key) is None, repr(key)
    assert await drain(queue) == len(handles)
    reasons = {d.id: d.reason for d in await queue.dead_jobs()}
    for i, handle in handles.items():
        if i % 2 == 0:
            assert await handle.result(timeout=1) == texts[i]
        else:
            shown = texts[i].encode("utf-8", "backslashreplace").decode()
            if text_problem(texts[i]) is not None:
                shown = shown.replace("\x00", "\\x00")
            assert reasons[handle.id].startswith(f"NoRetry: {shown}"), (texts[i], reasons)


async def test_retrying_every_dead_job_never_replaces_a_live_job_of_the_same_id(
    queue: Queue,
) -> None:
    # `batchy dead retry --all` after the app enqueued a dead job's id anew: the
    # SQLite store replaced the new job with the dead one (a keyed one then blocked
    # its key for ever), the others dropped the dead job and counted it as moved.
    ran = []

    @queue.job(retries=0, ordered_by="account")
    async def sync_account(account: int, version: int) -> None:
        ran.append((account, version))
        if version == 1:
            raise ValueError("version 1 is broken")

    await sync_account.options(id="sync-7").enqueue(7, 1)
    await drain(queue)
    assert [d.id for d in await queue.dead_jobs()] == ["sync-7"]
    await sync_account.options(id="sync-7").enqueue(7, 2)  # the fixed version, same id
    assert await queue.retry_dead() == 0  # it stays dead: its id is taken
    assert [d.id for d in await queue.dead_jobs()] == ["sync-7"]
    await drain(queue)
    assert ran == [(7, 1), (7, 2)]  # the live job ran, as enqueued
    assert await queue.retry_dead() == 1  # its id is free again
    await drain(queue)
    assert ran == [(7, 1), (7, 2), (7, 1)]


async def test_a_dead_entry_whose_id_is_live_again_is_deleted_by_id_and_its_retry_explained(
    queue: Queue,
) -> None:
    # The id resolved to the live job first on SQLite, PostgreSQL and Redis, so
    # `batchy dead delete sync-7` was refused ("job sync-7 is queued") and the dead
    # entry could not be removed by id at all; the in-memory store reported a retry
    # by id as done while it changed nothing.
    @queue.job(retries=0)
    async def sync_account(account: int, version: int) -> None:
        if version == 1:
            raise ValueError("version 1 is broken")

    await sync_account.options(id="sync-7").enqueue(7, 1)
    await drain(queue)
    await sync_account.options(id="sync-7").enqueue(7, 2)  # the same id, live again
    with pytest.raises(JobStateError) as refused:
        await queue.retry_dead(["sync-7"])
    assert "job sync-7 is dead and queued: its id was enqueued again" in str(refused.value)
    assert "`batchy dead delete sync-7`" in str(refused.value)
    assert [d.id for d in await queue.dead_jobs()] == ["sync-7"]  # nothing changed
    # The operator's listing shows it too (Redis's left it out, so `batchy dead list`
    # said "no dead jobs" and `batchy dead show sync-7` "is queued, not dead").
    listed = (await queue.admin.jobs("dead")).jobs
    assert [(j.id, j.state, j.args) for j in listed] == [("sync-7", "dead", [7, 1])]
    assert [j.id for j in (await queue.admin.jobs("dead", queue="default")).jobs] == ["sync-7"]
    assert await queue.delete_dead(["sync-7"]) == 1
    assert await queue.dead_jobs() == []
    assert (await queue.admin.job("sync-7")).state == "queued"  # the live job stays
    with pytest.raises(JobStateError, match="job sync-7 is queued"):
        await queue.delete_dead(["sync-7"])  # no dead entry left: the live job is not one
    await drain(queue)
    assert (await queue.admin.job("sync-7")).state == "done"


@pytest.mark.parametrize("field", ["key", "id"])
async def test_an_id_or_key_too_long_to_index_fails_its_enqueue_on_every_store(
    queue: Queue, field: str
) -> None:
    # SQLite and Redis took 3,200 characters; PostgreSQL failed with "index row size
    # 3216 exceeds btree version 4 maximum 2704".
    @queue.job(name="ix")  # (a key is stored as "ix:<key>")
    async def index(name: str) -> str:
        return name

    fits = "é" * 490  # 980 bytes
    handle = await index.options(**{field: fits}).enqueue("x")
    assert await drain(queue) == 1 and await handle.result(timeout=1) == "x"
    with pytest.raises(TextError) as info:
        await index.options(**{field: "k" * 1001}).enqueue("x")
    assert "is 1,0" in str(info.value) and "bytes long" in str(info.value), str(info.value)
    assert "Keep it under 1,000 bytes (a hash of a long key, say)" in str(info.value)


async def test_times_kept_past_ten_years_never_fail_a_round_trip_half_way(
    backend: Backend,
) -> None:
    # Redis counts them in ms, Lua writes 1e15 s as "1e+18", SET ... PX refused it
    # after the script had removed the job: done, its result lost, status unknown.
    now = time.time()
    await backend.push([Envelope("a", "default", "{}"), Envelope("b", "default", "{}")], now)
    a, b = await backend.cycle([], ["default"], 2, "w", 30.0, now)
    done = [
        Outcome("a", "done", result='"ok-a"', keep=1e15, token=a.token),
        Outcome("b", "done", result='"ok-b"', keep=60.0, token=b.token),
    ]
    assert (await backend.cycle(done, ["default"], 0, "w", 30.0, now)).refused == []
    assert (await backend.status("a", now)).state in ("unknown", "done")  # not kept
    assert (await backend.status("b", now)).result == '"ok-b"'
    # A unique key's time to live is checked before anything is written: all or nothing.
    first = Envelope("c", "default", "{}")
    second = Envelope("d", "default", "{}", unique="u", unique_ttl=1e16)
    with pytest.raises(DelayError, match="more than ten years"):
        await backend.push([first, second], now)
    assert (await backend.status("c", now)).state == "unknown"
    # A queue name a store splits on (a TAB) stranded the job on a retry (Redis).
    with pytest.raises(TextError, match="queue name 'emails\\\\turgent' is not valid"):
        await backend.push([Envelope("e", "emails\turgent", "{}")], now)


async def test_a_retry_by_filter_skips_a_dead_entry_whose_id_is_live_again(
    queue: Queue,
) -> None:
    # As a retry of the whole dead set does. It refused them all ("cannot retry ...
    # job bad-1 is dead and queued ...; nothing was changed"), so one such entry kept
    # every other dead job of the type from a retry by type or queue.
    ran = []

    @queue.job(name="bad", retries=0)
    async def bad(n: int) -> None:
        ran.append(n)
        if len(ran) <= 2:
            raise ValueError("broken")

    await bad.options(id="bad-1").enqueue(1)
    await bad.options(id="bad-2").enqueue(2)
    await drain(queue)
    await bad.options(id="bad-1").enqueue(10)  # the same id, live again
    assert await queue.admin.retry_dead(job="bad") == 1
    assert [d.id for d in await queue.dead_jobs()] == ["bad-1"]
    await drain(queue)
    assert sorted(ran[2:]) == [2, 10]
    assert await queue.admin.delete_dead(queue="default") == 1
    assert await queue.dead_jobs() == []


async def test_result_refuses_a_wait_that_would_hang_or_hammer_the_store(queue: Queue) -> None:
    # timeout=nan compared false with its deadline and waited forever; poll=0 read
    # the store in a busy loop, and poll=inf never read it again.
    @queue.job
    async def later() -> None:
        return None

    handle = await later.enqueue()
    for timeout in (float("nan"), "10"):
        with pytest.raises(DelayError, match=rf"job {handle.id}: result\(timeout=.*give a number"):
            await asyncio.wait_for(handle.result(timeout=timeout), 2)  # type: ignore[arg-type]
    for poll, problem in ((0, "is 0"), (-1, "is negative"), (float("inf"), "is not finite")):
        with pytest.raises(DelayError, match=rf"result\(poll={poll!r}\) {problem}; give the sec"):
            await asyncio.wait_for(handle.result(timeout=0.1, poll=poll), 2)
    # A timeout <= 0 reads the job once, as asyncio's; a long poll ends at the timeout.
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="still queued after -1s"):
        await handle.result(timeout=-1)
    with pytest.raises(TimeoutError, match=r"still queued after 0\.1s"):
        await handle.result(timeout=0.1, poll=30)
    assert time.monotonic() - started < 5


async def test_a_handle_for_an_id_no_store_can_hold_is_refused_alike(queue: Queue) -> None:
    # PostgreSQL raised psycopg's DataError for a NUL, three stores a
    # UnicodeEncodeError for a lone surrogate, and memory said "unknown".
    for job_id, problem in (
        ("a\x00b", r"holds a NUL character"),
        ("x\udcff", r"holds a lone surrogate"),
        (42, r"is a int, not a str"),
    ):
        with pytest.raises(TextError, match=rf"queue\.handle\(.*\): the job id {problem}"):
            await queue.handle(job_id).status()  # type: ignore[arg-type]
    assert (await queue.handle("never-enqueued").status()).state == "unknown"


async def test_a_result_that_could_not_be_kept_is_not_taken_for_none(queue: Queue) -> None:
    # result() returned None for a result the worker could not keep (it did not
    # serialize), just as for a handler that returned None: only the worker's log
    # told them apart. Redis even stored the first as "null".
    @queue.job(name="returns", keep_result=60)
    async def returns(kind: str) -> object:
        return object() if kind == "object" else None

    unkept, none = await returns.enqueue("object"), await returns.enqueue("none")
    assert await drain(queue) == 2
    assert await none.result(timeout=5) is None
    assert (await unkept.status()).state == "done"
    with pytest.raises(ResultNotKept) as caught:
        await unkept.result(timeout=5)
    assert str(caught.value) == (
        f"job {unkept.id} finished, but its result could not be kept (it did not serialize, "
        "or was too long for the store; the worker logged which): return plain JSON values, "
        "a reference to large data"
    )


async def every_state(backend: Backend) -> None:
    """Jobs in every state, each named after it (its payload its name in JSON): ``queued``,
    ``scheduled``, ``running``, ``retrying``, ``dead``, ``done``, ``unkept`` (done, its result
    not kept) and ``dead-again`` (dead, and its id enqueued again: queued)."""
    now = time.time()
    names = ("running", "retrying", "dead", "done", "unkept", "dead-again")
    await backend.push([Envelope(i, "q", f'"{i}"') for i in names], now)
    claims = await backend.cycle([], ["q"], 10, "w", 60.0, now)
    tokens = {c.id: c.token for c in claims}
    outcomes = [
        Outcome("retrying", "retry", "q", '"retrying 2"', due=now + 600, token=tokens["retrying"]),
        Outcome("dead", "dead", "q", reason="ValueError: no", token=tokens["dead"]),
        Outcome("dead-again", "dead", "q", reason="gone", token=tokens["dead-again"]),
        Outcome("done", "done", "q", result='"yes"', keep=60, token=tokens["done"]),
        Outcome("unkept", "done", "q", result=None, keep=60, token=tokens["unkept"]),
    ]
    assert not (await backend.cycle(outcomes, [], 0, "w", 60.0, now)).refused
    again = [Envelope("queued", "q", "{}"), Envelope("dead-again", "q", '"again"')]
    await backend.push([*again, Envelope("scheduled", "q", "{}", due=now + 600)], now)


async def test_statuses_reads_each_state_as_status_does(backend: Backend) -> None:
    # Every store's statuses() answers each id as its status() does, live jobs
    # before dead or done ones of the same id, duplicates and unknown ids alike.
    await every_state(backend)
    ids = ["queued", "scheduled", "running", "retrying", "dead", "done", "unkept", "dead-again"]
    ids += ["never", "done", "queued"]
    found = await backend.statuses(ids, time.time())
    states = ["queued", "scheduled", "running", "retrying", "dead", "done", "done", "queued"]
    states += ["unknown", "done", "queued"]
    assert [(s.id, s.state) for s in found] == list(zip(ids, states, strict=True))
    assert found[4].reason == "ValueError: no" and found[5].result == '"yes"'
    assert found[6].result is None and found[7].reason == "" and found[0].result is None
    assert await backend.statuses([], time.time()) == []
    assert [await backend.status(i, time.time()) for i in ids] == found
    # However many: SQLite reads 500 ids a statement, Redis 1,000 a script.
    never = [f"never-{i}" for i in range(2400)]
    many = await backend.statuses([*never, *ids, *never], time.time())
    assert many[len(never) : -len(never)] == found
    assert {(s.state, s.id in never) for s in many[: len(never)] + many[-len(never) :]} == {
        ("unknown", True)
    }


@pytest.mark.parametrize("store", ["memory", "sqlite", "redis", "postgres"])
async def test_reading_no_jobs_makes_no_round_trip(store: str, tmp_path: Any) -> None:
    # PostgreSQL's statuses([]) took a connection and ran a statement to answer [].
    # Here every store is one that cannot answer (nothing listens at its address,
    # or its file is closed): a round trip would raise.
    backend: Backend
    if store == "memory":
        backend = MemoryBackend()
    elif store == "sqlite":
        backend = SQLiteBackend(tmp_path / "jobs.db")
        await backend.close()
    elif store == "redis":
        from batchy_contrib.jobs.redis import RedisBackend

        backend = RedisBackend("redis://127.0.0.1:1/0")
    else:
        from batchy_contrib.jobs.postgres import PostgresBackend

        backend = PostgresBackend("postgresql://postgres@127.0.0.1:1/test?connect_timeout=1")
    try:
        assert await asyncio.wait_for(backend.statuses([], time.time()), 5) == []
        assert await asyncio.wait_for(backend.jobs([], time.time()), 5) == []
    finally:
        if store != "sqlite":
            await backend.close()


async def test_jobs_reads_each_record_as_job_does_in_order_across_chunks(
    backend: Backend,
) -> None:
    # Every store's jobs() answers each id with the record job() gives it, live
    # jobs before dead or done ones of the same id, unknown ids as None; in the
    # order asked, duplicates included, however many ids (SQLite reads 500 a statement).
    now = time.time()
    await every_state(backend)
    known = ["queued", "scheduled", "running", "retrying", "dead", "done", "dead-again"]
    ids = [*known, "never", "done", *(f"never-{i}" for i in range(1200)), *known, "queued"]
    found = await backend.jobs(ids, time.time())
    states = [None if j is None else j.state for j in found]
    expected = ["queued", "scheduled", "running", "retrying", "dead", "done", "queued"]
    assert states == [*expected, None, "done", *[None] * 1200, *expected, "queued"]
    assert [j.id for j in found if j is not None] == [i for i in ids if "never" not in i]
    by_id = {j.id: j for j in found if j is not None}
    assert by_id["running"].worker == "w" and by_id["running"].payload == '"running"'
    assert by_id["retrying"].payload == '"retrying 2"'
    assert by_id["dead"].reason == "ValueError: no" and by_id["done"].result == '"yes"'
    assert by_id["dead-again"].payload == '"again"'  # the live job, not its dead entry
    assert by_id["scheduled"].due == pytest.approx(now + 600, abs=1)  # the caller's clock

    def timeless(job: StoredJob | None) -> StoredJob | None:
        return job and replace(job, due=0.0, lease=0.0, died_at=0.0, expires=0.0)

    alone = [timeless(await backend.job(i, time.time())) for i in known]
    assert alone == [timeless(j) for j in found[: len(known)]]
    assert await backend.jobs([], time.time()) == []
