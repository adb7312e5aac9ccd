"""The scheduler: when rounds end, busy loops, callbacks, and no leaked loops."""

from __future__ import annotations

import asyncio
import gc
import logging
import weakref
from typing import Any

import pytest

import batchy
from batchy import _scheduler
from batchy.testing import record


def test_busy_loop_still_flushes_after_max_defer_iterations() -> None:
    calls: list[list[int]] = []

    @batchy.batched
    def ident(keys: list[int]) -> list[int]:
        calls.append(keys)
        return keys

    async def main() -> int:
        stop = False

        def spin() -> None:  # another library keeping the loop busy forever
            if not stop:
                asyncio.get_running_loop().call_soon(spin)

        spin()
        try:
            return await ident(1)
        finally:
            stop = True

    assert asyncio.run(main()) == 1
    assert calls == [[1]]


def test_a_failing_done_callback_does_not_stop_other_waiters(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @batchy.batched
    def ident(keys: list[int]) -> list[int]:
        return keys

    seen: list[int] = []

    @batchy.task
    def h() -> Any:
        fut = ident(1)
        fut.add_done_callback(lambda f: 1 / 0)
        fut.add_done_callback(lambda f: seen.append(f.result()))
        value = yield fut
        return value

    with caplog.at_level(logging.ERROR, logger="batchy"):
        assert batchy.run(h()) == 1
    assert seen == [1]
    assert "done callback" in caplog.text


def test_schedulers_do_not_keep_their_loops_alive() -> None:
    @batchy.batched
    def ident(keys: list[int]) -> list[int]:
        return keys

    gc.collect()
    before = len(_scheduler._schedulers)  # what earlier tests left is not ours to judge
    for _ in range(5):
        batchy.run(ident(1))
    gc.collect()
    assert len(_scheduler._schedulers) <= before + 1


def test_rounds_wait_for_asyncio_tasks_that_are_still_running() -> None:
    calls: list[list[int]] = []

    @batchy.batched
    def ident(keys: list[int]) -> list[int]:
        calls.append(keys)
        return keys

    @batchy.task
    def handler(k: int) -> Any:
        value = yield ident(k)
        return value

    async def uneven(k: int) -> int:
        for _ in range(k):
            await asyncio.sleep(0)
        return await handler(k)

    async def main() -> list[int]:
        return await asyncio.gather(*(uneven(k) for k in range(5)))

    with record() as rec:
        assert asyncio.run(main()) == list(range(5))
    assert calls == [[0, 1, 2, 3, 4]]
    assert rec.rounds == 1


def test_a_loop_closed_with_a_wake_up_queued_is_not_kept_alive() -> None:
    @batchy.batched
    def ident(keys: list[int]) -> list[int]:
        return keys

    async def leave_a_batch_open() -> None:
        ident(1)  # opens a batch and queues the scheduler's wake-up; nobody waits

    loop = asyncio.new_event_loop()
    loop.run_until_complete(leave_a_batch_open())
    ref = weakref.ref(loop)
    loop.close()
    del loop
    gc.collect()
    assert ref() is None
