"""batchy.Watch: one handler waiting on a growing set of futures, going on with each as it is done."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import batchy
from batchy.testing import record


def test_each_future_comes_back_with_its_tag_and_new_ones_join_later_rounds() -> None:
    calls: list[list[int]] = []

    @batchy.batched
    def double(keys: list[int]) -> list[int]:
        calls.append(keys)
        return [k * 2 for k in keys]

    @batchy.task
    def handler() -> Any:
        watch: batchy.Watch[str] = batchy.Watch()
        for k in (1, 2, 3):
            watch.add(double(k), f"first {k}")
        seen = []
        while watch:
            yield watch.ready()
            for tag, fut in watch.take():
                seen.append((tag, fut.result()))
                if tag.startswith("first"):
                    watch.add(double(fut.result()), "second")
        return seen

    with record() as rec:
        seen = batchy.run(handler())
    assert seen == [
        ("first 1", 2),
        ("first 2", 4),
        ("first 3", 6),
        ("second", 4),
        ("second", 8),
        ("second", 12),
    ]
    # double(2) was loaded in the first round: the scope's cache answers it at once.
    assert calls == [[1, 2, 3], [4, 6]]
    assert rec.rounds == 2


def test_a_fast_batch_is_taken_while_a_slow_one_is_still_running() -> None:
    @batchy.batched
    async def slow(keys: list[int]) -> list[int]:
        await asyncio.sleep(0.05)
        return keys

    @batchy.batched
    async def fast(keys: list[int]) -> list[int]:
        return keys

    @batchy.task
    def handler() -> Any:
        watch: batchy.Watch[str] = batchy.Watch()
        watch.add(slow(1), "slow")
        watch.add(fast(1), "fast")
        order = []
        while watch:
            yield watch.ready()
            order.extend(tag for tag, _ in watch.take())
        return order

    assert batchy.run(handler()) == ["fast", "slow"]


def test_tasks_start_in_the_scope_of_the_watching_handler_and_errors_stay_in_their_future() -> None:
    calls: list[list[int]] = []

    @batchy.batched
    def ident(keys: list[int]) -> list[Any]:
        calls.append(keys)
        return [ValueError(f"bad {k}") if k == 2 else k for k in keys]

    @batchy.task
    def child(k: int) -> Any:
        return (yield ident(k))

    @batchy.task
    def handler() -> Any:
        watch: batchy.Watch[int] = batchy.Watch()
        for k in (1, 2, 1):
            watch.add(child(k), k)
        outcomes = {}
        while watch:
            yield watch.ready()
            for k, fut in watch.take():
                outcomes[k] = fut.exception() or fut.result()
        scope = batchy.current_scope()
        return outcomes, scope

    outcomes, scope = batchy.run(handler())
    assert outcomes[1] == 1
    assert str(outcomes[2]) == "bad 2"
    assert calls == [[1, 2]]  # the cache of the handler's scope: key 1 asked once
    assert scope is not None


def test_an_empty_watch_is_false_and_ready_at_once() -> None:
    @batchy.task
    def handler() -> Any:
        watch: batchy.Watch[None] = batchy.Watch()
        yield watch.ready()
        watch.add(batchy.resolved(5), None)
        assert len(watch) == 1
        yield watch.ready()
        return [f.result() for _, f in watch.take()], bool(watch), repr(watch)

    assert batchy.run(handler()) == ([5], False, "<batchy.Watch pending=0 done=0>")


def test_adding_a_non_future_names_it_and_says_what_to_do() -> None:
    watch: batchy.Watch[None] = batchy.Watch()
    coro = asyncio.sleep(0)
    with pytest.raises(batchy.UsageError, match=r"takes a batchy future or task, got coroutine"):
        watch.add(coro, None)  # type: ignore[arg-type]
    coro.close()


def test_adding_a_task_outside_a_handler_is_an_error() -> None:
    @batchy.task
    def child() -> Any:
        return 1
        yield

    watch: batchy.Watch[None] = batchy.Watch()
    task = child()
    with pytest.raises(batchy.UsageError, match=r"outside a running batchy handler.*@batchy.task"):
        watch.add(task, None)
    assert batchy.run(task) == 1  # nothing lost: the task still runs
