"""The management API on every store: list, filter, page, inspect, act, cancel, live workers."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import pytest

from batchy.jobs import (
    ConfigError,
    Envelope,
    JobEvent,
    JobHook,
    JobInfo,
    JobNotFound,
    JobStateError,
    Queue,
)
from batchy.jobs._admin import TYPE_SCAN

from .conftest import fast_worker

pytestmark = pytest.mark.timeout(60)


async def drain(queue: Queue, **options) -> int:
    worker = fast_worker(queue, burst=True, **options)
    await worker.run()
    return worker.processed


async def every_page(q: Queue, state: str, limit: int, **filters) -> list[list[JobInfo]]:
    """Follow ``next`` from the first page to the last; the pages' jobs."""
    pages: list[list[JobInfo]] = []
    after = None
    for _ in range(1000):
        page = await q.admin.jobs(state, after=after, limit=limit, **filters)
        assert page.state == state and len(page.jobs) <= limit
        pages.append(list(page.jobs))
        after = page.next
        if after is None:
            return pages
    raise AssertionError("the listing never ended")


def ids(pages: list[list[JobInfo]]) -> list[str]:
    return [j.id for page in pages for j in page]


async def running_worker(queue: Queue, started: asyncio.Event, **options):
    worker = fast_worker(queue, **options)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    return worker, task


async def test_list_filter_and_page_through_every_state(queue: Queue) -> None:
    @queue.job(name="mail")
    async def mail(to: int) -> None:
        return None

    @queue.job(name="bill", queue="billing")
    async def bill(order: int) -> None:
        return None

    mails = await queue.enqueue_many(mail.call(i) for i in range(7))
    bills = await queue.enqueue_many(bill.call(i) for i in range(4))
    later = [await mail.options(delay=100 + i).enqueue(100 + i) for i in range(5)]

    # Queued: queue by queue (by name), each in claim order; pages of 3 cover all once.
    pages = await every_page(queue, "queued", 3)
    assert ids(pages) == [h.id for h in bills + mails]
    assert all(len(p) == 3 for p in pages[:-1])
    first = pages[0][0]
    assert (first.state, first.queue, first.job, first.args) == ("queued", "billing", "bill", [0])
    assert first.attempts == 0 and first.enqueued_at is not None and first.next_run is None

    assert ids(await every_page(queue, "queued", 2, queue="default")) == [h.id for h in mails]
    assert ids(await every_page(queue, "queued", 50, job="bill")) == [h.id for h in bills]
    assert ids(await every_page(queue, "queued", 4, job="mail", queue="default")) == [
        h.id for h in mails
    ]
    # Scheduled: by due time; each job says when it runs.
    pages = await every_page(queue, "scheduled", 2)
    assert ids(pages) == [h.id for h in later]
    runs = [j.next_run for p in pages for j in p]
    assert runs == sorted(runs) and runs[0] > time.time() + 90
    assert (await queue.admin.jobs("retrying")).jobs == ()
    assert (await queue.admin.jobs("running")).jobs == ()
    assert (await queue.admin.jobs("queued", queue="nope")).jobs == ()


async def test_listings_are_checked(queue: Queue) -> None:
    with pytest.raises(ConfigError, match="job state 'waiting' cannot be listed; the states"):
        await queue.admin.jobs("waiting")
    with pytest.raises(ConfigError, match="page size limit=0 must be an int from 1 to 1000"):
        await queue.admin.jobs("queued", limit=0)
    with pytest.raises(ConfigError, match=r"page cursor 'bogus' was not made by .* for a listing"):
        await queue.admin.jobs("queued", after="bogus")


async def test_a_retrying_job_shows_attempts_last_error_traceback_and_next_run(
    queue: Queue,
) -> None:
    @queue.job(name="flaky", backoff=lambda n, e: 60.0)
    async def flaky(x: int) -> None:
        raise ValueError(f"boom {x}")

    handle = await flaky.enqueue(3)
    await drain(queue)
    (listed,) = (await queue.admin.jobs("retrying")).jobs
    job = await queue.admin.job(handle.id)
    assert listed == replace(job, next_run=listed.next_run)  # read a moment apart
    assert (job.state, job.job, job.args, job.attempts) == ("retrying", "flaky", [3], 1)
    assert job.error == "ValueError: boom 3"
    assert job.traceback and 'raise ValueError(f"boom {x}")' in job.traceback
    assert job.next_run is not None and 55 < job.next_run - time.time() <= 60
    # Run it now: it runs (and fails) again at once, a second failed attempt.
    assert await queue.admin.run_now(handle.id) == 1
    assert (await queue.admin.job(handle.id)).state == "queued"
    await drain(queue)
    assert (await queue.admin.job(handle.id)).attempts == 2


async def test_dead_and_done_jobs_with_traceback_and_result(queue: Queue) -> None:
    @queue.job(name="fail", retries=0)
    async def fail(x: int) -> None:
        raise KeyError(x)

    @queue.job(name="ok")
    async def ok(x: int) -> dict[str, int]:
        return {"x": x}

    dead = [await fail.enqueue(i) for i in range(3)]
    done = [await ok.enqueue(i) for i in range(3)]
    await drain(queue, concurrency=1)
    pages = await every_page(queue, "dead", 2)
    assert set(ids(pages)) == {h.id for h in dead}
    died = [j.died_at for p in pages for j in p]
    assert died == sorted(died, reverse=True)  # newest first
    shown = await queue.admin.job(dead[0].id)
    assert (shown.state, shown.job, shown.args, shown.attempts) == ("dead", "fail", [0], 1)
    assert shown.error.startswith("KeyError: 0 (failed 1 time(s); retries=0 exhausted)")
    assert "raise KeyError(x)" in shown.traceback
    assert set(ids(await every_page(queue, "dead", 5, job="fail"))) == {h.id for h in dead}
    assert ids(await every_page(queue, "dead", 5, job="ok")) == []
    results = {j.id: j.result for p in await every_page(queue, "done", 2) for j in p}
    assert results == {h.id: {"x": i} for i, h in enumerate(done)}
    finished = await queue.admin.job(done[1].id)
    assert finished.state == "done" and finished.expires > time.time() + 3000
    # A done job is kept with what it was: its type, arguments, queue and attempts.
    assert (finished.job, finished.args, finished.queue) == ("ok", [1], "default")
    assert finished.attempts == 0 and finished.enqueued_at is not None


async def test_done_jobs_are_found_by_queue_type_and_key(queue: Queue) -> None:
    @queue.job(name="mail")
    async def mail(to: int) -> int:
        return to

    @queue.job(name="bill", queue="billing", ordered_by="account")
    async def bill(account: str, n: int) -> int:
        return n

    mails = [await mail.enqueue(i) for i in range(5)]
    acme = [await bill.enqueue("acme", i) for i in range(3)]
    globex = [await bill.enqueue("globex", i) for i in range(2)]
    await drain(queue, concurrency=1)
    everything = {h.id for h in mails + acme + globex}
    assert set(ids(await every_page(queue, "done", 3))) == everything
    assert set(ids(await every_page(queue, "done", 2, queue="billing"))) == {
        h.id for h in acme + globex
    }
    assert set(ids(await every_page(queue, "done", 2, job="mail"))) == {h.id for h in mails}
    keyed = await every_page(queue, "done", 2, key="bill:acme")
    assert set(ids(keyed)) == {h.id for h in acme}
    assert {(j.queue, j.key, j.job, j.result) for p in keyed for j in p} == {
        ("billing", "bill:acme", "bill", n) for n in range(3)
    }
    assert ids(await every_page(queue, "done", 2, queue="nope")) == []


async def test_a_filtered_page_of_done_jobs_reads_a_bounded_part_of_the_store(
    queue: Queue,
) -> None:
    @queue.job(name="mail")
    async def mail(to: int) -> int:
        return to

    @queue.job(name="bill", queue="billing")
    async def bill(n: int) -> int:
        return n

    rare = await bill.enqueue(0)
    await drain(queue)
    await queue.enqueue_many(mail.call(i) for i in range(600))
    await drain(queue)
    # The 600 mails expire after the bill: a page of billing reads a budget of
    # them and says where to go on, until it reaches the bill.
    first = await queue.admin.jobs("done", queue="billing", limit=5)
    if not queue.admin.store.startswith("memory"):  # the memory store sorts all it holds
        assert first.jobs == () and first.next is not None
    assert ids(await every_page(queue, "done", 5, queue="billing")) == [rare.id]


async def test_actions_delete_and_run_now_all_or_nothing(queue: Queue) -> None:
    ran: list[int] = []

    @queue.job(name="work", retries=0)
    async def work(x: int) -> None:
        ran.append(x)

    queued = await work.enqueue(1)
    scheduled = await work.options(delay=300).enqueue(2)
    soon = await work.options(delay=300).enqueue(3)
    assert await queue.admin.delete([queued.id, scheduled.id]) == 2
    with pytest.raises(JobNotFound, match=f"job {queued.id} is not in .*nothing was deleted"):
        await queue.admin.delete(queued.id)
    # One unknown id among good ones: none of them is touched.
    with pytest.raises(JobNotFound, match=r"job nosuchid is not in .* nothing was run now"):
        await queue.admin.run_now([soon.id, "nosuchid"])
    assert (await queue.admin.job(soon.id)).state == "scheduled"
    with pytest.raises(
        JobStateError, match=f"job {soon.id} is scheduled: it is not running; delete it instead"
    ):
        await queue.admin.cancel(soon.id)
    await queue.admin.run_now(soon.id)
    await drain(queue)
    assert ran == [3]
    with pytest.raises(JobStateError, match=f"job {soon.id} is done: it has finished"):
        await queue.admin.delete(soon.id)  # its result is kept, but it is not waiting
    with pytest.raises(JobNotFound, match=r"job gone is not in .*it was never enqueued there"):
        await queue.admin.job("gone")


async def test_deleting_a_keys_head_lets_the_next_job_run(queue: Queue) -> None:
    ran: list[str] = []

    @queue.job(name="step", ordered_by="account")
    async def step(account: int, label: str) -> None:
        ran.append(label)

    head = await step.options(delay=300).enqueue(1, "head")
    second = await step.enqueue(1, "second")
    third = await step.enqueue(1, "third")
    blocked = await every_page(queue, "blocked", 1)
    if type(queue.backend).__name__ == "RedisBackend":  # in no particular order (by id)
        assert sorted(ids(blocked)) == sorted([second.id, third.id])
    else:
        assert ids(blocked) == [second.id, third.id]
    by_key = await every_page(queue, "blocked", 1, key=(await queue.admin.job(head.id)).key)
    assert ids(by_key) == [second.id, third.id]
    with pytest.raises(
        JobStateError,
        match=r"is blocked: it runs when the jobs before it on its ordering key are done",
    ):
        await queue.admin.run_now(second.id)
    assert await queue.admin.delete(head.id) == 1
    await drain(queue)
    assert ran == ["second", "third"]


async def test_cancel_a_running_job_ends_it_cancelled_not_retried(queue: Queue) -> None:
    started = asyncio.Event()
    seen: list[str] = []
    events: list[JobEvent] = []

    class Collect(JobHook):
        def job_finished(self, event: JobEvent) -> None:
            events.append(event)

    queue.hooks.append(Collect())

    @queue.job(name="long", retries=5)
    async def long(x: int) -> None:
        started.set()
        try:
            for _ in range(1000):
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    handle = await long.enqueue(1)
    worker, task = await running_worker(queue, started, lease=30.0)
    (running,) = (await queue.admin.jobs("running")).jobs
    assert running.id == handle.id and running.worker == worker.id
    assert running.lease_until is not None and running.lease_until > time.time() + 20
    assert await queue.admin.cancel(handle.id) == 1
    deadline = time.monotonic() + 10
    while (await handle.status()).state != "dead" and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    worker.stop()
    await task
    assert seen == ["cancelled"]
    shown = await queue.admin.job(handle.id)
    assert shown.state == "cancelled" and shown.attempts == 1
    assert shown.error.startswith("cancelled by an operator after ")
    assert "CancelledError" in shown.traceback
    assert [e.outcome for e in events] == ["cancelled"]
    assert (await queue.admin.jobs("retrying")).jobs == ()  # not retried
    # A mistaken cancel is undone from the dead set.
    assert await queue.admin.retry_dead(handle.id) == 1
    assert (await queue.admin.job(handle.id)).state == "queued"


async def test_cancelling_a_job_that_is_not_running_changes_nothing(queue: Queue) -> None:
    @queue.job(name="idle")
    async def idle() -> None:
        return None

    handle = await idle.enqueue()
    with pytest.raises(
        JobStateError, match=f"job {handle.id} is queued: it is not running; delete it instead"
    ):
        await queue.admin.cancel(handle.id)
    with pytest.raises(JobNotFound, match="job nope is not in"):
        await queue.admin.cancel("nope")
    assert await drain(queue) == 1  # it was not cancelled


async def test_live_workers_show_their_running_jobs_at_once(queue: Queue) -> None:
    gate = asyncio.Event()
    started: list[int] = []
    four = asyncio.Event()

    @queue.job(name="hold")
    async def hold(x: int) -> None:
        started.append(x)
        if len(started) == 4:
            four.set()
        await gate.wait()

    handles = await queue.enqueue_many(hold.call(i) for i in range(4))
    # A heartbeat every 10 s: what info shows cannot come from the heartbeat.
    worker, task = await running_worker(queue, four, lease=30.0, concurrency=20)
    (shown,) = await queue.admin.workers()
    assert shown.id == worker.id and shown.concurrency == 20
    assert sorted(shown.running) == sorted(h.id for h in handles)
    gate.set()
    deadline = time.monotonic() + 5
    while (await queue.admin.workers())[0].running and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert (await queue.admin.workers())[0].running == ()
    worker.stop()
    await task


async def test_retry_dead_one_filtered_and_all(queue: Queue) -> None:
    @queue.job(name="a", retries=0)
    async def a(x: int) -> None:
        raise ValueError("a")

    @queue.job(name="b", retries=0, queue="other")
    async def b(x: int) -> None:
        raise ValueError("b")

    dead_a = [await a.enqueue(i) for i in range(3)]
    dead_b = [await b.enqueue(i) for i in range(2)]
    await drain(queue)
    assert await queue.admin.retry_dead(dead_a[0].id) == 1
    assert await queue.admin.retry_dead(job="b") == 2
    assert {j.id for j in (await queue.admin.jobs("queued", queue="other")).jobs} == {
        h.id for h in dead_b
    }
    with pytest.raises(JobStateError, match=f"job {dead_a[0].id} is queued"):
        await queue.admin.retry_dead([dead_a[0].id])
    with pytest.raises(ConfigError, match="pass ids or filters"):
        await queue.admin.retry_dead(dead_a[1].id, job="a")
    assert await queue.admin.delete_dead(queue="nope") == 0
    assert await queue.admin.retry_dead() == 2  # all that is left
    assert (await queue.info()).dead == 0


async def test_shards_and_periodic_jobs(queue: Queue) -> None:
    @queue.sharded(shards=3, name="walk")
    async def walk(shard: int, shards: int, cursor: int | None) -> int | None:
        return None if cursor is not None and cursor >= 2 else (cursor or 0) + 1

    @queue.periodic("0 3 * * *", name="nightly")
    async def nightly() -> None:
        return None

    assert [s.state for s in await queue.admin.shards("walk", "r1")] == ["unknown"] * 3
    await walk.start("r1")
    assert [(s.shard, s.state) for s in await queue.admin.shards(walk, "r1")] == [
        (0, "queued"),
        (1, "queued"),
        (2, "queued"),
    ]
    await drain(queue)
    shards = await queue.admin.shards("walk", "r1")
    assert [(s.state, s.batches) for s in shards] == [("done", 2)] * 3
    assert await walk.start("r2") == 3
    assert await walk.start("r2") == 0  # still going: not started again
    r2, r1 = await queue.admin.runs("walk")
    assert (r2.job, r2.run, r2.done, r2.failed, len(r2.shards)) == ("walk", "r2", 0, 0, 3)
    assert (r1.run, r1.done, r1.shards) == ("r1", 3, tuple(shards))
    assert time.time() - 60 < r1.started <= r2.started <= time.time()
    assert [r.run for r in await queue.admin.runs(walk, limit=1)] == ["r2"]
    with pytest.raises(ConfigError, match="runs limit=0 must be an int from 1 to 1000"):
        await queue.admin.runs(walk, limit=0)
    for look in (queue.admin.shards, queue.admin.runs):
        with pytest.raises(ConfigError, match="'nope' is not a sharded job of this queue"):
            await look("nope")
    (tick,) = queue.admin.periodics()
    assert (tick.name, tick.queue, tick.schedule) == ("nightly", "default", "Cron('0 3 * * *')")
    assert time.time() < tick.next_run <= time.time() + 86400
    assert queue.admin.store == queue.backend.describe()
    assert "password" not in queue.admin.store


async def test_pages_of_interleaved_states_and_a_cursor_whose_job_left(queue: Queue) -> None:
    # A small read budget: scheduled and retrying jobs share an index on the SQL
    # stores, so a page of one may end short (even empty) and go on from a cursor.
    queue.backend.page_budget = 10  # type: ignore[attr-defined]

    @queue.job(name="wait", backoff=lambda n, e: float(str(e)))
    async def wait(delay: float) -> None:
        raise ValueError(str(delay))

    scheduled = [await wait.options(delay=100 + i).enqueue(0) for i in range(40)]
    retrying = [await wait.enqueue(100 + d) for d in (5.5, 20.5, 35.5)]
    await drain(queue)
    assert ids(await every_page(queue, "retrying", 2)) == [h.id for h in retrying]
    assert ids(await every_page(queue, "scheduled", 7)) == [h.id for h in scheduled]
    # The last job of page 1 leaves its state before page 2 is read.
    first = await queue.admin.jobs("scheduled", limit=5)
    await queue.admin.run_now(first.jobs[-1].id)
    second = await queue.admin.jobs("scheduled", limit=5, after=first.next)
    assert [j.id for j in second.jobs] == [h.id for h in scheduled[5:10]]


async def test_a_cursor_among_jobs_due_at_the_same_time(queue: Queue) -> None:
    queue.backend.page_budget = 10  # type: ignore[attr-defined]

    @queue.job(name="bulk")
    async def bulk(i: int) -> None:
        return None

    # One bulk enqueue: every job falls due at the same time.
    handles = await queue.enqueue_many(bulk.options(delay=100).call(i) for i in range(40))
    first = await queue.admin.jobs("scheduled", limit=15)
    gone = first.jobs[-1].id
    await queue.admin.run_now(gone)  # the cursor's job leaves the scheduled jobs
    rest = await every_page_after(queue, "scheduled", 15, first.next)
    seen = [j.id for j in first.jobs[:-1]] + ids(rest)
    assert len(seen) == len(set(seen)) == 39
    assert set(seen) == {h.id for h in handles} - {gone}


async def every_page_after(
    q: Queue, state: str, limit: int, after: str | None
) -> list[list[JobInfo]]:
    pages: list[list[JobInfo]] = []
    while after is not None:
        page = await q.admin.jobs(state, after=after, limit=limit)
        pages.append(list(page.jobs))
        after = page.next
    return pages


async def test_a_rare_job_type_is_found_page_by_page(queue: Queue) -> None:
    @queue.job(name="common")
    async def common(i: int) -> None:
        return None

    @queue.job(name="rare")
    async def rare(i: int) -> None:
        return None

    calls = [rare.call(i) if i in (10, 120, 240) else common.call(i) for i in range(250)]
    handles = await queue.enqueue_many(calls)
    pages = await every_page(queue, "queued", 2, job="rare")
    assert [[j.args[0] for j in page] for page in pages if page] == [[10, 120], [240]]
    assert ids(pages) == [handles[i].id for i in (10, 120, 240)]


async def test_dead_jobs_of_one_key_page_through_newest_first(queue: Queue) -> None:
    # The memory store tagged these pages as a key's push order and could not
    # read its own cursor back.
    @queue.job(name="sync", retries=0, ordered_by="account")
    async def sync(account: str, n: int) -> None:
        raise ValueError(n)

    died = [await sync.enqueue("acme", i) for i in range(5)]
    await sync.enqueue("globex", 9)
    await drain(queue, concurrency=1)
    pages = await every_page(queue, "dead", 2, key="sync:acme")
    assert ids(pages) == [h.id for h in reversed(died)]


async def test_a_type_filter_on_a_queue_of_no_jobs_reads_a_bounded_part(queue: Queue) -> None:
    """A store page its queue filter left empty counted as one job examined: with
    a queue that matches nothing, one call read every job of the store, page by
    page (201 pages of Redis's 100,000 scheduled jobs)."""

    @queue.job(name="rare", queue="other")
    async def rare() -> None:
        return None

    backend = queue.backend
    if hasattr(backend, "page_budget"):
        backend.page_budget = 10  # a page of 100 reads 101 jobs: 5,000 hold 50 pages
    now = time.time()
    await backend.push(
        [Envelope(f"s{i:04d}", "default", "{}", due=now + 3600) for i in range(5000)], now
    )
    pages = 0
    list_jobs = backend.list_jobs

    async def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal pages
        pages += 1
        return await list_jobs(*args, **kwargs)

    backend.list_jobs = counted  # type: ignore[method-assign]
    await queue.admin.jobs("scheduled", queue="other", job="rare", limit=5)
    assert pages <= TYPE_SCAN // 100
