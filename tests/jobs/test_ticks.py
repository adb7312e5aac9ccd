"""Periodic ticks on one worker: a tick is enqueued once, late after a failed push, never lost."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Awaitable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batchy.jobs import Envelope, MemoryBackend, Queue
from batchy.jobs._outage import NoAnswer
from batchy.jobs._ticks import RETRY, Ticks

START = 1_800_000_030.0  # 30 s before a minute's tick


class Flaky(MemoryBackend):
    """A store whose pushes fail while ``down``; it records the unique keys it kept."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.kept: list[str] = []

    async def push(
        self, envelopes: Sequence[Envelope], now: float, *, connection: Any = None
    ) -> list[bool]:
        if self.down:
            raise ConnectionError("the store is down")
        pushed = await super().push(envelopes, now)
        self.kept += [e.unique or "" for e, ok in zip(envelopes, pushed, strict=True) if ok]
        return pushed


def every_minute() -> tuple[Queue, Ticks]:
    queue = Queue(MemoryBackend())

    @queue.periodic(60, name="report")
    async def report() -> None:
        return None

    return queue, Ticks(queue.periodics, queue.serializer)


async def step(ticks: Ticks, store: Flaky, now: float, failures: list[BaseException]) -> None:
    async def bounded(pushing: Awaitable[list[bool]]) -> list[bool]:
        return await pushing

    await ticks.push_due(store, now, lambda message: None, failures.append, bounded)


def tick(at: float) -> str:
    return f"periodic:report:{at:.6f}"


async def test_a_tick_whose_push_failed_is_pushed_again_after_a_pause() -> None:
    # The schedule moved on before the push: a push that failed (an outage longer
    # than the loop's own patience) lost its tick for good.
    _, ticks = every_minute()
    store, failures = Flaky(), []
    await step(ticks, store, START, failures)  # the first look: the schedule only
    store.down = True
    await step(ticks, store, START + 31, failures)
    assert len(failures) == 1 and store.kept == []
    assert ticks.next_at() == START + 31 + RETRY  # tried again after a pause, not at once
    store.down = False
    await step(ticks, store, START + 31 + RETRY / 2, failures)
    assert store.kept == []
    await step(ticks, store, START + 31 + RETRY, failures)
    assert store.kept == [tick(START + 30)]
    assert ticks.next_at() == START + 90


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 100.0), st.booleans()), min_size=1, max_size=40))
async def test_no_tick_is_lost_or_kept_twice_whatever_fails(
    steps: list[tuple[float, bool]],
) -> None:
    # Whatever the pattern of failed pushes: each tick is kept at most once, and
    # once a push gets through, the latest tick due by then has been kept.
    _, ticks = every_minute()
    store, failures = Flaky(), []
    now, paused_until = START, START
    await step(ticks, store, now, failures)
    for advance, down in steps:
        now += advance
        store.down = down
        tried = now >= paused_until
        await step(ticks, store, now, failures)
        if down and tried and failures:
            paused_until = now + RETRY
        if not down and tried:
            latest = now // 60 * 60
            assert latest <= START or tick(latest) in store.kept
    assert len(store.kept) == len(set(store.kept))


async def test_a_tick_four_years_apart_is_enqueued(caplog: pytest.LogCaptureFixture) -> None:
    # A 29 February job's unique key was kept 3 x 4 years, past the ten years every
    # store allows: each tick was refused (DelayError), logged as the store down.
    queue = Queue(MemoryBackend())

    @queue.periodic("0 12 29 2 *", name="leap")
    async def leap() -> None:
        return None

    ticks, store, failures = Ticks(queue.periodics, queue.serializer), Flaky(), []
    noon = dt.datetime(2028, 2, 29, 12, tzinfo=dt.UTC).timestamp()
    await step(ticks, store, noon - 1, failures)
    with caplog.at_level(logging.ERROR, logger="batchy.jobs"):
        await step(ticks, store, noon + 1, failures)
    assert failures == [] and caplog.records == []
    assert store.kept == [f"periodic:leap:{noon:.6f}"]


class Holidays:
    """A schedule of the user's own whose next_after raises while ``broken``."""

    def __init__(self) -> None:
        self.broken = False

    def next_after(self, t: float) -> float:
        if self.broken:
            raise LookupError("holiday table missing")
        return (t // 60 + 1) * 60

    def __repr__(self) -> str:
        return "Holidays()"


async def test_a_schedule_that_raises_stops_only_its_own_job(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Its error went up the worker's loop: the worker died, and every periodic job
    # with it.
    queue = Queue(MemoryBackend())
    holidays = Holidays()

    @queue.periodic(holidays, name="payroll")
    async def payroll() -> None:
        return None

    @queue.periodic(60, name="report")
    async def report() -> None:
        return None

    ticks = Ticks(queue.periodics, queue.serializer)
    store, failures = Flaky(), []
    await step(ticks, store, START, failures)  # the first look
    holidays.broken = True
    with caplog.at_level(logging.ERROR, "batchy.jobs"):
        for now in (START + 30, START + 90, START + 150):
            await step(ticks, store, now, failures)
    assert store.kept == [tick(START + 30), tick(START + 90), tick(START + 150)]
    (line,) = [r.getMessage() for r in caplog.records]  # once, not at every look
    assert line == (
        "periodic job 'payroll': its schedule Holidays() failed (LookupError: holiday table "
        "missing), so it does not tick; asked again every 60s until it answers. Fix its "
        "next_after()"
    )
    holidays.broken = False  # fixed: a first look, then its ticks again
    await step(ticks, store, START + 210, failures)
    await step(ticks, store, START + 270, failures)
    assert store.kept[-2:] == [f"periodic:payroll:{START + 270:.6f}", tick(START + 270)]
    assert failures == []


def test_a_periodic_job_ordered_by_a_key_has_its_ticks_ordered() -> None:
    # ordered_by= was taken and ignored: the ticks went in with no ordering key, so a
    # run longer than the interval overlapped the next one.
    queue = Queue(MemoryBackend())

    @queue.periodic(60, name="payroll", ordered_by=lambda: "payroll")
    async def payroll() -> None:
        return None

    ticks = Ticks(queue.periodics, queue.serializer)
    assert ticks.due(START) == []  # the first look
    ((_, envelope),) = ticks.due(START + 30)
    assert envelope.key == payroll.order_key(payroll.call())
    assert envelope.key is not None and envelope.key.endswith(":payroll")


async def test_a_tick_whose_push_went_unanswered_is_pushed_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A store that did not answer within the worker's lease (NoAnswer: a PostgreSQL
    # server that is down keeps a push waiting for a connection) was taken for one
    # that refused the tick, since NoAnswer is a JobError: the tick was logged as
    # "not enqueued" and dropped, so a daily job whose tick fell in an outage
    # skipped its day.
    _, ticks = every_minute()
    store, failures = Flaky(), []
    answering = False

    async def bounded(pushing: Awaitable[list[bool]]) -> list[bool]:
        if not answering:
            pushing.close()  # type: ignore[attr-defined]  # (a coroutine, never awaited)
            raise NoAnswer("<store> did not answer within 1s (the worker's lease)")
        return await pushing

    def push(now: float) -> Awaitable[None]:
        return ticks.push_due(store, now, lambda message: None, failures.append, bounded)

    await push(START)
    with caplog.at_level(logging.ERROR, logger="batchy.jobs"):
        await push(START + 31)
    assert [type(f) for f in failures] == [NoAnswer] and store.kept == []
    assert caplog.records == []  # an outage: the worker logs it, once
    assert ticks.next_at() == START + 31 + RETRY
    answering = True
    await push(START + 31 + RETRY)
    assert store.kept == [tick(START + 30)]
