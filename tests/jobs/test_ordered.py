"""Ordered jobs on every store: one job per key at a time, in enqueue order, retries in place."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from batchy.jobs import Envelope, JobDefinitionError, Outcome, Queue

from .conftest import fast_worker

pytestmark = pytest.mark.timeout(60)


async def drain(queue: Queue, **options) -> int:
    worker = fast_worker(queue, burst=True, **options)
    await worker.run()
    return worker.processed


async def run_until(queue: Queue, done, timeout: float = 10.0, **options) -> None:
    """Run a worker until ``done()`` (retries and delays included), then stop it."""
    worker = fast_worker(queue, **options)
    task = asyncio.create_task(worker.run())
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    worker.stop()
    await task
    assert done(), "the jobs did not finish in time"


async def test_one_job_per_key_at_a_time_in_enqueue_order(queue: Queue) -> None:
    running: dict[int, int] = {}
    finished: dict[int, list[int]] = {}
    overlap = []
    most_at_once = 0

    @queue.job(ordered_by="post")
    async def comment(post: int, n: int) -> None:
        nonlocal most_at_once
        running[post] = running.get(post, 0) + 1
        if running[post] > 1:
            overlap.append((post, n))
        most_at_once = max(most_at_once, sum(running.values()))
        await asyncio.sleep(random.uniform(0, 0.003))
        running[post] -= 1
        finished.setdefault(post, []).append(n)

    await queue.enqueue_many(comment.call(post, n) for n in range(8) for post in range(15))
    assert await drain(queue, concurrency=40) == 120
    assert overlap == []
    assert finished == {post: list(range(8)) for post in range(15)}
    assert most_at_once > 1  # different keys ran in parallel
    assert await queue.backend.keys(time.time()) == ([], [])  # nothing left per key
    redis = getattr(queue.backend, "redis", None)
    if redis is not None:  # no per-key lists or entries left behind in Redis either
        prefix = queue.backend.prefix  # type: ignore[attr-defined]
        assert [k async for k in redis.scan_iter(match=prefix + "k:*")] == []
        assert await redis.hlen(prefix + "okey") == 0


async def test_a_retry_keeps_its_place_at_the_head_of_its_key(queue: Queue) -> None:
    runs: list[tuple[str, int]] = []

    @queue.job(ordered_by=lambda post, label: post, backoff=lambda n, e: 0.2)
    async def edit(post: int, label: str) -> None:
        runs.append((label, post))
        if label == "first" and runs.count(("first", post)) == 1:
            raise ValueError("flaky")

    await edit.enqueue(1, "first")
    await edit.enqueue(1, "second")
    await edit.enqueue(2, "other")
    started = time.monotonic()
    await run_until(queue, lambda: len(runs) == 4)
    assert time.monotonic() - started >= 0.2
    # Key 1 waited for the retry; key 2 did not wait for key 1.
    assert [r for r in runs if r[1] == 1] == [("first", 1), ("first", 1), ("second", 1)]
    assert runs.index(("other", 2)) < runs.index(("second", 1))


async def test_a_dead_job_unblocks_its_key_and_names_it(queue: Queue) -> None:
    ran = []

    @queue.job(ordered_by="post", retries=0, order_group="posts")
    async def publish(post: int, n: int) -> None:
        ran.append(n)
        if n == 0:
            raise ValueError("broken")

    await publish.enqueue(7, 0)
    second = await publish.enqueue(7, 1)
    await drain(queue)
    assert ran == [0, 1]
    (dead,) = await queue.dead_jobs()
    assert dead.key == "posts:7"
    assert (await second.status()).state == "done"
    # Retried by hand, it joins the end of its key again.
    third = await publish.options(delay=0.2).enqueue(7, 2)
    assert await queue.retry_dead() == 1
    await asyncio.sleep(0.25)
    await drain(queue)
    assert ran == [0, 1, 2, 0]
    assert (await third.status()).state == "done"


async def test_delayed_jobs_keep_their_place_in_their_key(queue: Queue) -> None:
    ran = []

    @queue.job(ordered_by="key", order_group="step")
    async def step(key: str, n: int) -> None:
        ran.append((key, n))

    await step.options(delay=0.3).enqueue("a", 1)
    await step.enqueue("a", 2)
    await step.enqueue("b", 1)
    await drain(queue)
    assert ran == [("b", 1)]  # a2 waits behind the delayed a1
    busiest, _stalled = await queue.backend.keys(time.time())
    assert [(k.key, k.jobs, k.state) for k in busiest] == [("step:a", 2, "scheduled")]
    await asyncio.sleep(0.35)
    await drain(queue)
    assert ran == [("b", 1), ("a", 1), ("a", 2)]


async def test_a_key_whose_worker_died_resumes_after_the_lease(queue: Queue) -> None:
    backend = queue.backend
    now = time.time()
    await backend.push(
        [Envelope(f"j{i}", "default", "{}", key="k") for i in range(3)]
        + [Envelope("free", "default", "{}", key="other")],
        now,
    )
    first = await backend.cycle([], ["default"], 10, "ghost", 0.2, now)
    assert sorted(c.id for c in first) == ["free", "j0"]  # one head per key
    assert await backend.cycle([], ["default"], 10, "w", 5, time.time()) == []
    await asyncio.sleep(0.3)  # leases run out on the store's clock
    _busiest, stalled = await backend.keys(time.time())
    assert [(k.key, k.head, k.state) for k in stalled] == [
        ("k", "j0", "expired"),
        ("other", "free", "expired"),
    ]
    # After the lease j0 comes back; j1 still waits for it.
    again = await backend.cycle([], ["default"], 10, "w", 5, time.time())
    assert sorted(c.id for c in again) == ["free", "j0"]
    # The dead worker's word no longer counts; the new holder's does.
    stale = [Outcome(c.id, "done", token=c.token) for c in first]
    assert (await backend.cycle(stale, ["default"], 10, "w", 5, time.time())).refused == [
        c.id for c in first
    ]
    done = [Outcome(c.id, "done", token=c.token) for c in again]
    assert [c.id for c in await backend.cycle(done, ["default"], 10, "w", 5, time.time())] == ["j1"]


async def test_retry_and_release_keep_the_head_and_block_the_key(queue: Queue) -> None:
    backend = queue.backend
    now = time.time()
    await backend.push([Envelope(f"j{i}", "default", "{}", key="k") for i in range(2)], now)
    (head,) = await backend.cycle([], ["default"], 10, "w", 5, now)
    retry = Outcome(
        "j0", "retry", queue="default", payload='{"try":2}', due=now + 0.3, token=head.token
    )
    assert await backend.cycle([retry], ["default"], 10, "w", 5, now) == []
    _busiest, stalled = await backend.keys(now)
    assert [(k.key, k.jobs, k.state) for k in stalled] == [("k", 2, "retrying")]
    assert stalled[0].since == pytest.approx(now + 0.3, abs=0.05)  # on the caller's clock
    await asyncio.sleep(0.35)
    (again,) = await backend.cycle([], ["default"], 10, "w", 5, time.time())
    assert (again.id, again.payload) == ("j0", '{"try":2}')
    release = [Outcome("j0", "release", token=again.token)]
    (back,) = await backend.cycle(release, ["default"], 10, "w", 5, time.time())
    assert back.id == "j0"
    dead = Outcome("j0", "dead", queue="default", payload="{}", reason="gave up", token=back.token)
    assert [c.id for c in await backend.cycle([dead], ["default"], 10, "w", 5, time.time())] == [
        "j1"
    ]
    assert (await backend.dead_jobs())[0].key == "k"


async def test_saving_progress_needs_the_lease(queue: Queue) -> None:
    backend = queue.backend
    now = time.time()
    await backend.push([Envelope("s", "default", '{"cursor":0}')], now)
    (held,) = await backend.cycle([], ["default"], 10, "w", 0.2, now)
    assert await backend.save_progress("s", held.token, '{"cursor":5}', 0.5, now)
    assert not await backend.save_progress("s", "not-the-token", '{"cursor":9}', 5, now)
    await asyncio.sleep(0.3)
    # The save renewed the lease: the job is not given back at the old expiry.
    assert await backend.cycle([], ["default"], 10, "x", 5, time.time()) == []
    await asyncio.sleep(0.3)
    (back,) = await backend.cycle([], ["default"], 10, "x", 5, time.time())
    assert back.payload == '{"cursor":5}'
    assert not await backend.save_progress("s", held.token, '{"cursor":6}', 5, time.time())


async def test_busiest_keys(queue: Queue) -> None:
    @queue.job(ordered_by="k")
    async def job(k: int) -> None:
        return None

    await queue.enqueue_many(job.call(k) for k in (1, 2, 2, 3, 3, 3))
    busiest, stalled = await queue.backend.keys(time.time(), limit=2)
    assert [(k.key.split(":")[-1], k.jobs, k.state) for k in busiest] == [
        ("3", 3, "queued"),
        ("2", 2, "queued"),
    ]
    assert stalled == []


def test_ordering_errors(queue: Queue) -> None:
    async def handler(post_id: int) -> None:
        return None

    with pytest.raises(JobDefinitionError, match=r"ordered_by='post'.*takes \['post_id'\]"):
        queue.job(ordered_by="post")(handler)
    with pytest.raises(JobDefinitionError, match="ordered_by=5 must be a parameter name"):
        queue.job(ordered_by=5, name="five")(handler)  # type: ignore[arg-type]
    by_dict = queue.job(ordered_by=lambda post_id: {"id": post_id}, name="d")(handler)
    with pytest.raises(JobDefinitionError, match=r"ordering key \{'id': 1\} is a dict"):
        by_dict.enqueue_sync(1)
    broken = queue.job(ordered_by=lambda *, post: post, name="b")(handler)
    with pytest.raises(JobDefinitionError, match=r"job 'b'.*args=\(1,\).*TypeError"):
        broken.enqueue_sync(1)
    none = queue.job(ordered_by=lambda post_id: None, name="n")(handler)
    with pytest.raises(JobDefinitionError, match=r"job 'n' is ordered.*gave None"):
        none.enqueue_sync(1)
