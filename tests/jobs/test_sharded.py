"""Sharded jobs on every store: each row once, cursors saved per batch, leases fence owners."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

import batchy
from batchy.jobs import (
    Backend,
    ConfigError,
    JobDefinitionError,
    NoRetry,
    Outcome,
    Queue,
    ShardInfo,
)

from .conftest import fast_worker

pytestmark = pytest.mark.timeout(60)

ROWS = 1000
BATCH = 40


def rows_after(shard: int, shards: int, cursor: int | None) -> list[int]:
    start = -1 if cursor is None else cursor
    return [i for i in range(start + 1, ROWS) if i % shards == shard][:BATCH]


async def run_until(queue: Queue, done, timeout: float = 20.0, workers: int = 1) -> None:
    running = [fast_worker(queue) for _ in range(workers)]
    tasks = [asyncio.create_task(w.run()) for w in running]
    deadline = time.monotonic() + timeout
    while not await done() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    for w in running:
        w.stop()
    await asyncio.gather(*tasks)
    assert await done(), "the run did not finish in time"


async def test_every_row_once_across_workers_and_runs(queue: Queue) -> None:
    seen: Counter[int] = Counter()

    @batchy.batched
    async def mark(ids: list[int]) -> list[None]:
        seen.update(ids)
        return [None for _ in ids]

    @queue.sharded(shards=5, name="mark")
    async def mark_all(shard: int, shards: int, cursor: int | None) -> int | None:
        batch = rows_after(shard, shards, cursor)
        if not batch:
            return None
        await batchy.gather(*(mark(i) for i in batch))  # one batched call per batch
        return batch[-1]

    assert await mark_all.start("r1") == 5
    assert await mark_all.start("r1") == 0  # still queued: not started twice
    assert not await mark_all.done("r1")
    await run_until(queue, lambda: mark_all.done("r1"), workers=3)
    assert seen == Counter(range(ROWS))
    assert {s.state for s in await mark_all.status("r1")} == {"done"}
    # A finished run can be run again.
    assert await mark_all.start("r1") == 5
    await run_until(queue, lambda: mark_all.done("r1"))
    assert seen == Counter(dict.fromkeys(range(ROWS), 2))


async def test_a_dead_owner_loses_at_most_its_batch_and_the_next_resumes(queue: Queue) -> None:
    seen: Counter[int] = Counter()

    @queue.sharded(shards=1, name="resume")
    async def walk(shard: int, shards: int, cursor: int | None) -> int | None:
        batch = rows_after(shard, shards, cursor)
        seen.update(batch)
        return batch[-1] if batch else None

    await walk.start()
    backend = queue.backend
    now = time.time()
    # A worker claims the shard, saves the cursor after row 399, and dies.
    (claimed,) = await backend.cycle([], ["default"], 1, "ghost", 0.3, now)
    body = json.loads(claimed.payload)
    body["args"][2] = 399
    assert await backend.save_progress(claimed.id, claimed.token, json.dumps(body), 0.3, now)
    await asyncio.sleep(0.35)
    await run_until(queue, walk.done)
    assert seen == Counter(range(400, ROWS))


async def test_a_worker_that_lost_its_lease_stops(
    queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    seen: Counter[int] = Counter()
    stolen = []

    @queue.sharded(shards=1, name="fenced")
    async def walk(shard: int, shards: int, cursor: int | None) -> int | None:
        batch = rows_after(shard, shards, cursor)
        seen.update(batch)
        if cursor == 199 and not stolen:
            # Its lease moves to another worker mid-batch (as after a long stall).
            job_id = walk.shard_id("default", 0)
            backend = queue.backend
            # (Reaching into the worker: its token lets the test give the job back.)
            ((_, token),) = worker._leases.held()
            release = [Outcome(job_id, "release", token=token)]
            # Given back and taken in one cycle: a separate claim would race the
            # running worker's own poll for the job.
            thief = backend.cycle(release, ["default"], 1, "thief", 0.2, time.time())
            stolen.extend(await asyncio.ensure_future(thief))
        return batch[-1] if batch else None

    await walk.start()
    worker = fast_worker(queue, burst=True)
    await worker.run()
    assert [c.id for c in stolen] == [walk.shard_id("default", 0)]
    assert not await walk.done()  # the first worker stopped without an outcome
    job_id = walk.shard_id("default", 0)
    lost = [r.getMessage() for r in caplog.records if "lost job" in r.getMessage()]
    assert len(lost) == 1, lost  # said once, by the worker
    assert f"lost job {job_id} (fenced, queue 'default'): a progress save was refused" in lost[0]
    await asyncio.sleep(0.25)  # the thief dies too; its lease expires
    await run_until(queue, walk.done)
    # Rows 200..239 (the batch in hand when the lease went) ran twice; none missed.
    assert set(seen) == set(range(ROWS))
    assert {i for i, n in seen.items() if n > 1} == set(range(200, 240))


async def test_sharded_errors(queue: Queue) -> None:
    async def handler(shard: int, shards: int, cursor: object) -> None:
        return None

    with pytest.raises(JobDefinitionError, match=r"sharded job 'x': shards=0 must be an int >= 1"):
        queue.sharded(shards=0, name="x")(handler)
    # A store without save_progress says so, and what to do.
    with pytest.raises(ConfigError, match=r"cannot save a running job's progress.*save_progress"):
        await Backend.save_progress(queue.backend, "id", "w", "{}", 1.0, 0.0)
    job = queue.sharded(shards=2, name="slow")(handler)
    with pytest.raises(
        TimeoutError, match=r"'slow' run 'r' not done.*\{0: 'queued', 1: 'queued'\}"
    ):
        await job.start("r")
        await job.wait("r", timeout=0.05)


async def test_a_handler_that_does_not_advance_goes_dead_with_a_reason(queue: Queue) -> None:
    @queue.sharded(shards=1, name="stuck", retries=0)
    async def stuck(shard: int, shards: int, cursor: int | None) -> int:
        return 5

    await stuck.start()
    await fast_worker(queue, burst=True).run()
    (dead,) = await queue.dead_jobs()
    assert "returned the cursor it was given (5)" in dead.reason
    assert "shard 0" in dead.reason


class WritesTextAsItIs:
    """JSON that writes text as it is (a lone surrogate too), not as escapes."""

    def dumps(self, value: Any) -> str:
        return json.dumps(value, ensure_ascii=False)

    def loads(self, data: str) -> Any:
        return json.loads(data)


async def test_a_cursor_no_store_keeps_fails_its_shard_only(backend: Backend) -> None:
    # Memory saved the cursor; the other stores raised their own error (psycopg's,
    # a UnicodeEncodeError), and the shard's retry carried the cursor too, which
    # failed the worker's whole round trip on SQLite and PostgreSQL, on every try:
    # the worker's other jobs never finished.
    queue = Queue(backend, serializer=WritesTextAsItIs())

    @queue.sharded(shards=1, name="files", retries=1, backoff=lambda done, error: 0.0)
    async def files(shard: int, shards: int, cursor: str | None) -> str:
        return "a.txt" if cursor is None else "b\udc80.txt"

    @queue.job(name="other")
    async def other() -> str:
        return "fine"

    await files.start("r")
    handle = await other.enqueue()
    await fast_worker(queue, burst=True).run()
    assert (await handle.status()).state == "done"
    (dead,) = await queue.dead_jobs()
    assert dead.id == "files:r:0"
    assert f"TextError: {type(backend).__name__}.save_progress('files:r:0'): the payload" in (
        dead.reason
    )
    assert "'\\udc80' at position" in dead.reason
    assert "(failed 2 time(s); retries=1 exhausted)" in dead.reason
    # Resumed with `batchy dead retry`, it starts from the last cursor saved.
    assert json.loads(dead.payload)["args"] == ["r", 0, "a.txt"]


async def test_stores_remember_each_sharded_run_until_it_is_past_keeping(
    backend: Backend,
) -> None:
    now = time.time()
    keep = 3600.0
    assert await backend.runs("walk", now, keep) == []  # nothing started: no table yet
    await backend.note_run("walk", "old", now - 5000, keep)
    await backend.note_run("walk", "a", now - 20, keep)
    await backend.note_run("walk", "b", now - 10, keep)
    await backend.note_run("other", "a", now - 5, keep)  # another job's runs are its own
    assert await backend.runs("walk", now, keep) == [("b", now - 10), ("a", now - 20)]
    await backend.note_run("walk", "a", now, keep)  # started again: now the latest
    assert await backend.runs("walk", now, keep) == [("a", now), ("b", now - 10)]
    assert await backend.runs("walk", now, keep, limit=1) == [("a", now)]
    assert await backend.runs("walk", now + keep - 5, keep) == [("a", now)]  # b is past
    assert await backend.runs("other", now, keep) == [("a", now - 5)]


async def test_a_run_with_a_shard_finished_or_dead_is_still_going(queue: Queue) -> None:
    # start(run) pushed every shard whose id was not queued or running: a finished
    # shard ran again while the others still ran, and a dead one began again from
    # the start, its cursor lost (`batchy dead retry` resumes it from there).
    runs: list[tuple[int, int | None]] = []

    @queue.sharded(shards=3, name="copy", retries=0)
    async def copy(shard: int, shards: int, cursor: int | None) -> int | None:
        runs.append((shard, cursor))
        if shard == 1 and cursor == 0:
            raise ValueError("row 1 is broken")
        return None if cursor is not None or shard == 2 else 0

    assert await copy.start("r") == 3
    worker = fast_worker(queue, burst=True)
    await worker.run()
    states = [s.state for s in await copy.status("r")]
    assert states == ["done", "dead", "done"], states
    assert await copy.start("r") == 0  # before: 2 (shards 0 and 1 from the beginning)
    assert await queue.retry_dead() == 1
    assert await copy.start("r") == 0  # shard 1 queued again
    await fast_worker(queue, burst=True).run()
    assert runs.count((0, None)) == 1 and runs.count((1, 0)) == 2  # resumed, twice at 0


GAVE_UP = "(failed 1 time(s); not retried: NoRetry)"


def counted(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The calls ``backend`` receives from now on to the methods that read jobs or runs."""
    calls: Counter[str] = Counter()
    for name in ("job", "jobs", "status", "statuses", "runs"):

        async def call(
            *args: Any, _original: Any = getattr(backend, name), _name: str = name
        ) -> Any:
            calls[_name] += 1
            return await _original(*args)

        monkeypatch.setattr(backend, name, call)
    return calls


async def test_a_page_of_runs_reads_every_shard_in_one_store_call(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Admin.runs read each shard with a store call of its own: a dashboard's page
    # of 20 runs of 256 shards made 5,120 calls, 2.9 s on PostgreSQL, at each of
    # its refreshes (every 5 s); status() and wait() read one shard per call.
    gate = asyncio.Event()

    @queue.sharded(shards=8, name="scan", retries=1)
    async def scan(shard: int, shards: int, cursor: int | None) -> int | None:
        kind = shard % 4
        if kind == 1:
            raise ValueError(f"shard {shard} broke")  # retrying (its next try is far off)
        if kind == 2 and cursor is None:
            return 7  # the cursor saved, then it runs until the test lets it go
        if kind == 2:
            await gate.wait()
        if kind == 3:
            raise NoRetry(f"shard {shard} gave up")
        return None

    await scan.start("r1")
    await scan.start("r2")
    worker = fast_worker(queue)
    task = asyncio.create_task(worker.run())
    try:
        expected = [
            ShardInfo(0, "done", batches=0),
            ShardInfo(1, "retrying", error="ValueError: shard 1 broke"),
            ShardInfo(2, "running", 7, worker.id),
            ShardInfo(3, "dead", error=f"NoRetry: shard 3 gave up {GAVE_UP}"),
        ] * 2
        expected = [replace(s, shard=i) for i, s in enumerate(expected)]
        expected[5] = replace(expected[5], error="ValueError: shard 5 broke")
        expected[7] = replace(expected[7], error=f"NoRetry: shard 7 gave up {GAVE_UP}")
        deadline = time.monotonic() + 10
        for run in ("r1", "r2"):
            while await queue.admin.shards(scan, run) != expected:
                assert time.monotonic() < deadline, await queue.admin.shards(scan, run)
                await asyncio.sleep(0.02)
        calls = counted(queue.backend, monkeypatch)
        r2, r1 = await queue.admin.runs(scan)
        assert calls == {"runs": 1, "jobs": 1}  # before: runs 1, job 16
        assert [(r.run, list(r.shards)) for r in (r1, r2)] == [("r1", expected), ("r2", expected)]
        assert await queue.admin.runs(scan, limit=1) == [r2]
        calls.clear()
        assert await queue.admin.shards(scan, "r1") == expected
        assert [s.state for s in await scan.status("r1")] == [s.state for s in expected]
        assert calls == {"jobs": 1, "statuses": 1}
        calls.clear()
        with pytest.raises(TimeoutError, match=r"run 'r2' not done after 0\.25s"):
            await scan.wait("r2", timeout=0.25)  # a read every 0.1 s
        assert calls.keys() == {"statuses"} and 2 <= calls["statuses"] <= 5, calls
    finally:
        gate.set()
        worker.stop()
        await task
