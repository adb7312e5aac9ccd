"""Values longer than SQLite stores fail their own job, never a worker's round trip."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from batchy.jobs import (
    Envelope,
    Outcome,
    Queue,
    ResultNotKept,
    SerializationError,
    SQLiteBackend,
    Worker,
)

pytestmark = pytest.mark.timeout(30)

LIMIT = 5000  # bytes; SQLite's own limit is a billion, too much to build in a test


def store(path: Path) -> SQLiteBackend:
    backend = SQLiteBackend(path)
    backend._db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, LIMIT)
    return backend


async def test_a_result_too_long_is_not_kept_and_the_other_outcomes_land(tmp_path: Path) -> None:
    # One job's result past the limit failed every cycle that carried it: the
    # worker claimed nothing more, its other jobs stayed running, and it logged
    # the store as unreachable.
    queue = Queue(store(tmp_path / "jobs.db"))

    @queue.job(name="echo", keep_result=60)
    async def echo(n: int) -> str:
        return "x" * n

    big = await echo.enqueue(LIMIT + 1)
    small = [await echo.enqueue(3) for _ in range(3)]
    await Worker(queue, burst=True, concurrency=4, poll_interval=0.05).run()
    assert (await big.status()).state == "done"
    with pytest.raises(ResultNotKept, match="finished, but its result could not be kept"):
        await big.result()
    assert [await h.result() for h in small] == ["xxx"] * 3
    await queue.close()


async def test_a_retry_too_long_goes_dead_with_its_claimed_payload(tmp_path: Path) -> None:
    backend = store(tmp_path / "jobs.db")
    await backend.push([Envelope("a", "default", "{}"), Envelope("b", "default", "{}")], 0.0)
    a, b = await backend.cycle([], ["default"], 2, "W", 30.0, 0.0)
    outcomes = [
        Outcome("a", "retry", "default", "y" * (LIMIT + 1), due=0.0, token=a.token),
        Outcome("b", "done", "default", token=b.token),
    ]
    claims = await backend.cycle(outcomes, ["default"], 2, "W", 30.0, 0.0)
    assert list(claims) == [] and claims.refused == []
    (dead,) = await backend.dead_jobs()
    assert dead.id == "a" and dead.payload == "{}"
    assert "5,001 bytes" in dead.reason and "at most 5,000 bytes in a row" in dead.reason
    assert (await backend.status("b", 0.0)).state in ("done", "unknown")
    await backend.close()


async def test_a_death_too_long_is_cut(tmp_path: Path) -> None:
    backend = store(tmp_path / "jobs.db")
    await backend.push([Envelope("a", "default", "{}")], 0.0)
    (a,) = await backend.cycle([], ["default"], 1, "W", 30.0, 0.0)
    why = Outcome("a", "dead", "default", reason="r" * LIMIT * 2, traceback="t" * 9, token=a.token)
    await backend.cycle([why], ["default"], 1, "W", 30.0, 0.0)
    (dead,) = await backend.dead_jobs()
    # The short traceback is kept whole; the reason takes the rest of the row.
    assert dead.reason.startswith("rrr") and dead.traceback == "t" * 9
    assert len(dead.reason) + len(dead.traceback) <= LIMIT - 1024  # the store's own columns
    # Cut by bytes, never inside a character; a reason of a few hundred characters
    # beside a long traceback is kept whole (its end says what to do).
    await backend.push([Envelope("b", "default", "{}")], 0.0)
    (b,) = await backend.cycle([], ["default"], 1, "W", 30.0, 0.0)
    why = Outcome("b", "dead", "default", reason="é" * 700, traceback="€" * LIMIT, token=b.token)
    await backend.cycle([why], ["default"], 1, "W", 30.0, 0.0)
    dead = next(d for d in await backend.dead_jobs() if d.id == "b")
    assert dead.reason == "é" * 700 and set(dead.traceback) == {"€"}
    assert len((dead.reason + dead.traceback).encode()) <= LIMIT - 1024
    await backend.close()


@pytest.mark.parametrize("in_transaction", [False, True])
async def test_an_enqueue_too_long_is_refused_naming_the_job(
    tmp_path: Path, in_transaction: bool
) -> None:
    path = tmp_path / "jobs.db"
    queue = Queue(store(path))

    @queue.job(name="echo")
    async def echo(text: str) -> None: ...

    app = sqlite3.connect(path)
    app.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, LIMIT)
    with pytest.raises(SerializationError) as caught:
        if in_transaction:
            await echo.options(connection=app).enqueue("é" * LIMIT)
        else:
            await echo.enqueue("é" * LIMIT)
    message = str(caught.value)
    assert "queue 'default'" in message and "SQLite stores at most 5,000 bytes" in message
    assert "a reference to large data" in message and "nothing was enqueued" in message
    app.rollback()
    app.close()
    assert (await queue.admin.info()).queues == ()
    await queue.close()


async def test_a_cursor_too_long_is_refused_naming_the_job(tmp_path: Path) -> None:
    # A sharded job's cursor past the limit raised a bare DataError ("string or
    # blob too big") in its handler, naming neither the job nor the limit.
    queue = Queue(store(tmp_path / "jobs.db"))

    @queue.sharded(shards=1, name="walk", retries=0)
    async def walk(shard: int, shards: int, cursor: str | None) -> str | None:
        return "k" * LIMIT if cursor is None else None

    await walk.start()
    await Worker(queue, burst=True, poll_interval=0.05).run()
    (job,) = await queue.backend.dead_jobs()
    said = f"SerializationError: job {job.id}: its progress cannot be saved on {queue.backend!r}"
    assert said in job.reason and "its payload with the new cursor is 5,0" in job.reason
    assert (
        "at most 5,000 bytes in a row, 1,024 of them kept for the store's own columns; "
        "return a small cursor" in job.reason
    )
    await queue.close()


async def test_values_that_fit_alone_but_not_in_one_row_fail_only_their_job(
    tmp_path: Path,
) -> None:
    # SQLite's limit is a row's: a result beside the payload it keeps, a death's
    # reason beside the payload it was claimed with, each under the limit alone,
    # failed every cycle that carried them (the worker claimed nothing more).
    queue = Queue(store(tmp_path / "jobs.db"))

    @queue.job(name="echo", keep_result=60, retries=0)
    async def echo(pad: str, fail: bool) -> str:
        if fail:
            raise ValueError("f" * (LIMIT // 2))
        return "r" * (LIMIT // 2)

    pad = "p" * (LIMIT // 2)
    kept, died = await echo.enqueue(pad, False), await echo.enqueue(pad, True)
    small = [await echo.enqueue("", False) for _ in range(3)]
    await Worker(queue, burst=True, concurrency=4, poll_interval=0.05).run()
    assert (await kept.status()).state == "done"
    with pytest.raises(ResultNotKept):
        await kept.result()
    assert [await h.result() for h in small] == ["r" * (LIMIT // 2)] * 3
    (dead,) = await queue.backend.dead_jobs()
    assert dead.id == died.id and pad in dead.payload and dead.reason.startswith(f"job {died.id}")
    await queue.close()


async def test_an_enqueue_that_fits_leaves_room_to_be_claimed(tmp_path: Path) -> None:
    # A payload just under the limit went in, and its claim (the worker's id and
    # token beside it) failed every cycle after: no job of the queue ran again.
    backend = store(tmp_path / "jobs.db")
    with pytest.raises(SerializationError, match="kept for the store's own columns"):
        await backend.push([Envelope("a", "default", "p" * (LIMIT - 30))], 0.0)
    await backend.push([Envelope("b", "default", "p" * (LIMIT - 1100))], 0.0)
    (b,) = await backend.cycle([], ["default"], 1, "W" * 60, 30.0, 0.0)
    assert b.id == "b"
    await backend.close()
