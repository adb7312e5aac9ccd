"""Redis-only checks: data written straight into Redis, and the key layout staying tidy."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchy.jobs import Envelope, Info, Outcome, Queue, Worker

from .conftest import REDIS_DB
from .frozen_stores import OPEN, Frozen

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def rqueue(redis_server: tuple[str, int]) -> AsyncIterator[Queue]:
    from batchy_contrib.jobs.redis import RedisBackend

    host, port = redis_server
    backend = RedisBackend(
        f"redis://{host}:{port}/{REDIS_DB}", prefix=f"rtest:{uuid.uuid4().hex[:8]}:"
    )
    yield Queue(backend)
    keys = [k async for k in backend.redis.scan_iter(match=backend.prefix + "*")]
    if keys:
        await backend.redis.delete(*keys)
    await backend.close()


async def test_raw_redis_writes_never_crash_a_worker(rqueue: Queue) -> None:
    backend = rqueue.backend
    r, p = backend.redis, backend.prefix  # type: ignore[attr-defined]

    @rqueue.job
    async def ok() -> str:
        return "fine"

    handle = await ok.enqueue()
    # An id with no payload (someone deleted it by hand), a garbage payload, and
    # a payload naming a job nobody declares.
    await r.rpush(p + "q:default", "orphan")
    await r.hset(p + "jobs", "garbage", "\x00\x01 not json")
    await r.hset(p + "meta", "garbage", f"default\t{time.time()}")
    await r.rpush(p + "q:default", "garbage")
    await r.hset(p + "jobs", "ghost", '{"job": "ghost", "args": [], "kwargs": {}}')
    await r.hset(p + "meta", "ghost", f"default\t{time.time()}")
    await r.rpush(p + "q:default", "ghost")
    await Worker(rqueue, burst=True, poll_interval=0.01).run()
    assert await handle.result() == "fine"
    reasons = {d.id: d.reason for d in await rqueue.dead_jobs()}
    assert set(reasons) == {"garbage", "ghost"}
    assert "cannot be decoded" in reasons["garbage"] and "'ghost'" in reasons["ghost"]


async def test_finished_jobs_leave_only_their_kept_result(rqueue: Queue) -> None:
    backend = rqueue.backend
    r, p = backend.redis, backend.prefix  # type: ignore[attr-defined]

    @rqueue.job(keep_result=0)
    async def noop(i: int) -> None:
        return None

    await rqueue.enqueue_many(noop.call(i) for i in range(100))
    await Worker(rqueue, burst=True, poll_interval=0.01, concurrency=50).run()
    assert await r.hlen(p + "jobs") == 0
    assert await r.hlen(p + "meta") == 0
    assert await r.zcard(p + "leases") == 0
    assert await r.hlen(p + "owner") == 0
    for kept in ("result:*", "done:*"):
        assert [k async for k in r.scan_iter(match=p + kept)] == []


async def test_a_result_kept_by_an_earlier_release_is_still_read(rqueue: Queue) -> None:
    # Before done jobs kept what they were, a result was the string result:<id>.
    backend = rqueue.backend
    r, p = backend.redis, backend.prefix  # type: ignore[attr-defined]
    await r.set(p + "result:old", "42", px=60_000)
    await r.zadd(p + "results", {"old": time.time() + 60})
    assert (await backend.status("old", time.time())).result == "42"
    shown = await rqueue.admin.job("old")
    assert (shown.state, shown.result, shown.job, shown.queue) == ("done", 42, None, "")
    page = await rqueue.admin.jobs("done")
    assert [j.id for j in page.jobs] == ["old"]
    assert (await rqueue.admin.jobs("done", queue="default")).jobs == ()


async def recount(backend: Any) -> dict[tuple[str, str], int]:
    """Scheduled and retrying jobs per queue, counted from the sets themselves."""
    r, p = backend.redis, backend.prefix
    counts: dict[tuple[str, str], int] = {}
    for zset, state in (("sched", "scheduled"), ("retry", "retrying")):
        for job_id in await r.zrange(p + zset, 0, -1):
            meta = await r.hget(p + "meta", job_id)
            if meta is not None:
                key = (meta.split("\t")[0], state)
                counts[key] = counts.get(key, 0) + 1
    return counts


def counted(info: Info) -> dict[tuple[str, str], int]:
    out = {}
    for q in info.queues:
        for state, n in (("scheduled", q.scheduled), ("retrying", q.retrying)):
            if n:
                out[(q.name, state)] = n
    return out


async def key_lengths(backend: Any) -> dict[str, int]:
    """Jobs per ordering key, counted from the keys' lines themselves."""
    r, p = backend.redis, backend.prefix
    keys = set((await r.hgetall(p + "okey")).values())
    return {k: await r.llen(p + "k:" + k) for k in keys}


async def klen(backend: Any) -> dict[str, int]:
    """What the scripts keep: each key scored by minus its jobs."""
    found = await backend.redis.zrange(backend.prefix + "klen", 0, -1, withscores=True)
    return {k: int(-score) for k, score in found}


# Each step: (what, queue, seconds, ordering key); the store's own clock decides
# what is due.
STEPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "push",
                "push_later",
                "claim_retry",
                "claim_done",
                "claim_dead",
                "run_now",
                "delete",
                "wait",
            ]
        ),
        st.sampled_from(["a", "b"]),
        st.sampled_from([0.0, 0.05, 30.0]),
        st.sampled_from([None, "k:x", "k:y"]),
    ),
    max_size=25,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=STEPS)
async def test_info_counts_what_the_sets_hold_after_any_steps(
    redis_server: tuple[str, int], steps: list[tuple[str, str, float, str | None]]
) -> None:
    """``info`` reads per-queue counters kept beside the sets, ``keys`` the jobs per key kept
    in ``klen``; they never drift from what they count."""
    from batchy_contrib.jobs.redis import RedisBackend

    host, port = redis_server
    backend = RedisBackend(
        f"redis://{host}:{port}/{REDIS_DB}", prefix=f"rtest:{uuid.uuid4().hex[:8]}:"
    )
    ids = iter(range(10_000))
    waiting: list[str] = []  # ids that may be scheduled or retrying
    try:
        await backend.info(time.time())  # a new store: counters from the start
        await backend.keys(time.time())
        for what, q, seconds, key in steps:
            now = time.time()
            if what in ("push", "push_later"):
                job_id = f"j{next(ids)}"
                due = now + seconds if what == "push_later" else None
                await backend.push([Envelope(job_id, q, '{"job":"x"}', due=due, key=key)], now)
                waiting.append(job_id)
            elif what in ("claim_retry", "claim_done", "claim_dead"):
                claims = await backend.cycle([], [q], 3, "w", 30.0, now)
                kind = what.removeprefix("claim_")
                outcomes = [
                    Outcome(c.id, kind, q, c.payload, due=now + seconds, token=c.token)  # type: ignore[arg-type]
                    for c in claims
                ]
                await backend.cycle(outcomes, [q], 0, "w", 30.0, now)
            elif what == "wait":
                await asyncio.sleep(min(seconds, 0.06))  # retries and delays fall due
            elif waiting:
                job_id = waiting[int(seconds) % len(waiting)]
                await backend.act(what, [job_id], now)  # refused unless it waits: fine
            assert counted(await backend.info(time.time())) == await recount(backend)
            assert await klen(backend) == await key_lengths(backend)
        # A store written before the counters existed counts its sets once.
        await backend.redis.delete(backend.prefix + "n:ok", backend.prefix + "n:sched")
        assert counted(await backend.info(time.time())) == await recount(backend)
        await backend.redis.delete(backend.prefix + "klen:ok", backend.prefix + "klen")
        await backend.keys(time.time())
        assert await klen(backend) == await key_lengths(backend)
    finally:
        keys = [k async for k in backend.redis.scan_iter(match=backend.prefix + "*")]
        if keys:
            await backend.redis.delete(*keys)
        await backend.close()


@pytest.fixture
def full_redis(tmp_path: Any) -> Any:
    """A redis-server of this test's own, to fill to its maxmemory (a setting of the whole
    server, so not the shared one's)."""
    import shutil
    import socket
    import subprocess

    import redis as redis_sync

    binary = shutil.which("redis-server")
    assert binary is not None, "redis-server is installed with Redis (make test installs it)"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    admin = redis_sync.Redis(port=port)
    for _ in range(100):
        try:
            admin.ping()
            break
        except redis_sync.ConnectionError:
            time.sleep(0.05)
    yield port, admin
    server.terminate()
    server.wait(10)


async def test_heartbeats_go_on_when_redis_is_at_maxmemory(full_redis: Any) -> None:
    # At maxmemory (noeviction) Redis refused the heartbeat (its first write, ZADD,
    # may grow memory) but not the cycle: leases ran out on live workers and their
    # jobs were claimed again and again, each run's outcome refused.
    from batchy.jobs import WorkerInfo
    from batchy_contrib.jobs.redis import RedisBackend

    port, admin = full_redis
    store = RedisBackend(f"redis://127.0.0.1:{port}/0", prefix="full:")
    await store.push([Envelope("j1", "default", '{"job": "x", "args": [], "kwargs": {}}')], 0.0)
    (claim,) = await store.cycle([], ["default"], 1, "w1", 30.0, time.time())
    used = int(admin.info("memory")["used_memory"])
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", used + 200_000)
    with pytest.raises(Exception, match="maxmemory"):
        for i in range(10_000):
            admin.set(f"filler:{i}", "x" * 1000)
    info = WorkerInfo("w1", "host", 1, ("default",), 1)
    assert await store.heartbeat(info, [(claim.id, claim.token)], 30.0, time.time()) == []
    await store.close()


async def test_a_redis_before_7_gets_the_heartbeat_without_script_flags(rqueue: Queue) -> None:
    # Redis 6 cannot compile a "#!lua flags=..." line: the plain heartbeat, from then on.
    import redis as redis_sync

    from batchy.jobs import WorkerInfo

    store: Any = rqueue.backend
    tried: list[str] = []

    async def redis_6(**_: Any) -> Any:
        tried.append("flags")
        raise redis_sync.ResponseError(
            "Error compiling script (new function): user_script:1: unexpected symbol near '#'"
        )

    store._scripts["heartbeat"] = redis_6
    info = WorkerInfo("w1", "host", 1, ("default",), 1)
    assert await store.heartbeat(info, [], 30.0, time.time()) == []
    assert await store.heartbeat(info, [], 30.0, time.time()) == []
    assert tried == ["flags"]  # asked once


async def test_a_queued_listing_goes_on_after_a_job_is_handed_back_to_the_head(
    rqueue: Queue,
) -> None:
    # A job handed back (a stopping worker's release, a lease run out) goes to the
    # head of its queue: the cursor's job moved one place on, the listing looked
    # for it only before its old place, and page 2 started again at the top.
    from batchy.jobs import Admin

    store: Any = rqueue.backend

    @rqueue.job(name="j")
    async def j(i: int) -> None:
        return None

    await j.enqueue(-1)
    (running,) = await store.cycle([], ["default"], 1, "w1", 30.0, time.time())
    await rqueue.enqueue_many(j.call(i) for i in range(120))
    admin = Admin(rqueue)
    first = await admin.jobs("queued", limit=50)
    release = Outcome(running.id, "release", token=running.token)
    await store.cycle([release], ["default"], 0, "w1", 30.0, time.time())
    second = await admin.jobs("queued", after=first.next, limit=50)
    assert {x.id for x in first.jobs} & {x.id for x in second.jobs} == set()
    assert len(second.jobs) == 50


async def test_an_idle_workers_dropped_wait_connection_costs_no_poll_interval(
    redis_server: tuple[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    # A CLIENT KILL of the connection an idle worker waits on (or a proxy's idle
    # timeout) made it poll: the next job waited a whole poll_interval, and a
    # warning with a traceback said waiting had failed, with Redis up throughout.
    import redis as redis_sync

    from batchy_contrib.jobs.redis import RedisBackend

    host, port = redis_server
    db = 15  # a db of this test's alone: its BLPOPs are the ones killed
    rqueue = Queue(RedisBackend(f"redis://{host}:{port}/{db}", prefix="dropped:"))
    admin = redis_sync.Redis(host=host, port=port, db=db)
    admin.flushdb()
    started: dict[int, float] = {}

    @rqueue.job(name="ping", keep_result=0)
    async def ping(n: int) -> None:
        started[n] = time.monotonic()

    worker = Worker(rqueue, concurrency=2, poll_interval=10.0)
    task = asyncio.create_task(worker.run())
    try:
        await ping.enqueue(0)
        while 0 not in started:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # idle: waiting on its BLPOP
        killed = [c for c in admin.client_list() if c["cmd"] == "blpop" and c["db"] == str(db)]
        assert killed
        for client in killed:
            admin.client_kill_filter(_id=client["id"])
        await asyncio.sleep(0.3)
        sent = time.monotonic()
        await ping.enqueue(1)
        while 1 not in started and time.monotonic() - sent < 12:
            await asyncio.sleep(0.01)
        assert started[1] - sent < 5  # not the poll interval's 10 s
        assert "waiting for new work failed" not in caplog.text
    finally:
        worker.stop()
        await task
        await rqueue.close()
        admin.flushdb()
        admin.close()


async def test_an_enqueue_redis_refuses_for_lack_of_memory_says_so_and_what_to_do(
    full_redis: Any,
) -> None:
    # It raised Redis's bare "OOM command not allowed when used memory > 'maxmemory'",
    # naming neither the store nor the jobs, nor what to change.
    import redis as redis_sync

    from batchy.jobs import ConfigError
    from batchy_contrib.jobs.redis import RedisBackend

    port, admin = full_redis
    admin.config_set("requirepass", "s3cret")
    admin = redis_sync.Redis(port=port, password="s3cret")
    store = RedisBackend(f"redis://:s3cret@127.0.0.1:{port}/0", prefix="full:")
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", int(admin.info("memory")["used_memory"]) + 200_000)
    with pytest.raises(redis_sync.ResponseError, match="maxmemory"):
        for i in range(10_000):
            admin.set(f"filler:{i}", "x" * 1000)
    jobs = [Envelope(f"j{i}", "default", "{}") for i in range(4)]
    for push in (store.push, store.push_sync):
        with pytest.raises(ConfigError) as caught:
            pushed = push(jobs, time.time())
            if not isinstance(pushed, list):
                await pushed
        message = str(caught.value)
        assert message.startswith(
            f"<RedisBackend redis://:***@127.0.0.1:{port}/0 prefix='full:'>: cannot enqueue "
            "job(s) 'j0', 'j1', 'j2'...: Redis is out of memory"
        )
        assert "s3cret" not in message and "Raise maxmemory" in message
        assert "keep maxmemory-policy noeviction" in message and "nothing was enqueued" in message
    assert admin.keys("full:*") == []
    await store.close()


async def test_many_ids_are_read_a_bounded_chunk_per_script_in_order(rqueue: Queue) -> None:
    # statuses() sent every id to one script: Redis serves nobody else while a
    # script runs, and 20,000 ids held every other client for about 44 ms
    # (100 ms as records). Now a script reads at most status_chunk (1,000) or
    # record_chunk (500) ids, about 2 ms of Redis each.
    backend: Any = rqueue.backend
    now = time.time()
    await backend.push([Envelope(f"j{i}", "q", "{}") for i in (0, 499, 500, 1000, 2499)], now)
    (claimed,) = await backend.cycle([], ["q"], 1, "w", 60.0, now)  # j0
    done = Outcome(claimed.id, "done", "q", result='"ok"', keep=60, token=claimed.token)
    await backend.cycle([done], [], 0, "w", 60.0, now)
    sent: dict[str, list[int]] = {"status": [], "job": []}
    backend._admin_script("job")  # (made on first use)
    for scripts, name in ((backend._scripts, "status"), (backend._admin_scripts, "job")):

        def recorded(*, keys: list[str], args: list[Any], _script: Any = scripts[name], _n=name):
            sent[_n].append(len(args) - 1)  # the ids, after the prefix
            return _script(keys=keys, args=args)

        scripts[name] = recorded
    ids = [f"j{i}" for i in range(2500)]
    statuses = await backend.statuses(ids, time.time())
    records = await backend.jobs(ids, time.time())
    assert sent == {"status": [1000, 1000, 500], "job": [500] * 5}
    queued = {f"j{i}" for i in (499, 500, 1000, 2499)}
    assert [s.id for s in statuses] == ids and [s.state for s in statuses] == [
        "done" if i == "j0" else "queued" if i in queued else "unknown" for i in ids
    ]
    assert statuses[0].result == '"ok"'
    assert [j and (j.id, j.state) for j in records] == [
        (i, "done") if i == "j0" else (i, "queued") if i in queued else None for i in ids
    ]


@pytest.fixture
async def stopped(redis_server: tuple[str, int]) -> AsyncIterator[Frozen]:
    """A Redis store whose clock stands still where the test sets it (frozen_stores)."""
    frozen = await OPEN["redis"](redis_server)
    yield frozen
    await frozen.close()


async def keyed_head_at(frozen: Frozen, t: float) -> list[tuple[str, str, float]]:
    """Push a keyed job at store time ``t``; what ``keys`` says of its head then."""
    await frozen.set_clock(t)
    await frozen.store.push([Envelope("head", "a", "p1", key="k")], t)
    busiest, _ = await frozen.store.keys(t)
    return [(k.head, k.state, k.since) for k in busiest]


async def test_a_job_behind_its_keys_head_is_due_exactly_when_pushed(stopped: Frozen) -> None:
    # Its due time was kept to 14 digits (0.1 ms), rounded up at this time: pushed
    # without a delay, it said scheduled, and was scheduled rather than claimed
    # when its head left at once (found by test_store_model, whose clock stands still).
    store, t = stopped.store, 1_700_000_000.00009
    await stopped.set_clock(t)
    await store.push(
        [Envelope("head", "a", "p1", key="k"), Envelope("next", "a", "p2", key="k")], t
    )
    assert (await store.status("next", t)).state == "queued"
    (claim,) = await store.cycle([], ["a"], 1, "w", 30.0, t)
    done = Outcome("head", "done", "a", token=claim.token)
    assert [c.id for c in await store.cycle([done], ["a"], 1, "w", 30.0, t)] == ["next"]


async def test_a_keys_head_made_ready_is_queued_in_keys_at_once(stopped: Frozen) -> None:
    # The time a job was made ready was kept to 14 digits, rounded up at this
    # time: `keys` read it as the head's due time, still ahead, and said scheduled.
    t = 1_700_000_000.00009
    assert [h[:2] for h in await keyed_head_at(stopped, t)] == [("head", "queued")]


async def test_times_are_shifted_to_the_callers_clock_exactly(stopped: Frozen) -> None:
    # Redis's clock was sent back to 6 decimals, which at this time reads back
    # 0.2 us early: every time reported on the caller's clock was as much late,
    # and a head made ready at this instant was due in `keys`' eyes: scheduled.
    t = 1700000015.8499994
    assert await keyed_head_at(stopped, t) == [("head", "queued", t)]
