"""Scopes: caches live in one run / request / job and never leak into another."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import batchy


def counting_loader(calls: list[list[int]]) -> batchy.Loader[int, int]:
    @batchy.batched
    async def ident(keys: list[int]) -> list[int]:
        calls.append(keys)
        return keys

    return ident


def test_explicit_async_scope_shares_a_cache_inside_and_not_outside() -> None:
    calls: list[list[int]] = []
    ident = counting_loader(calls)

    async def main() -> None:
        async with batchy.scope() as s:
            assert batchy.current_scope() is s
            await ident(1)
            await ident(1)
        async with batchy.scope():
            await ident(1)
        assert batchy.current_scope() is None

    asyncio.run(main())
    assert calls == [[1], [1]]


def test_two_requests_batch_together_but_keep_separate_caches() -> None:
    calls: list[list[int]] = []
    ident = counting_loader(calls)

    async def request(k: int) -> list[int]:
        async with batchy.scope():
            first = await ident(k)
            again = await ident(k)  # served by this request's cache
            return [first, again]

    async def main() -> list[list[int]]:
        return await asyncio.gather(request(1), request(1), request(2))

    assert asyncio.run(main()) == [[1, 1], [1, 1], [2, 2]]
    assert calls == [[1, 2]]  # one batch for all three requests, duplicate key sent once


def test_tasks_inherit_their_parents_scope() -> None:
    @batchy.task
    def child() -> Any:
        yield batchy.resolved(None)
        return batchy.current_scope()

    @batchy.task
    def parent() -> Any:
        mine = batchy.current_scope()
        theirs = yield child()
        return mine, theirs

    custom = batchy.Scope("custom")
    mine, theirs = batchy.run(parent(), scope=custom)
    assert mine is theirs is custom
    assert repr(custom).startswith("<batchy.Scope custom loaders=")


def test_root_tasks_awaited_outside_a_scope_get_their_own() -> None:
    @batchy.task
    def h() -> Any:
        yield batchy.resolved(None)
        return batchy.current_scope()

    async def main() -> tuple[Any, Any]:
        return await h(), await h()

    a, b = asyncio.run(main())
    assert a is not None and b is not None and a is not b


def test_sync_scope_context_manager_and_clear() -> None:
    calls: list[list[int]] = []
    ident = counting_loader(calls)
    with batchy.scope() as s:
        ident.prime(5, 50)
        assert batchy.run(ident(5), scope=s) == 50
        s.clear()
        assert batchy.run(ident(5), scope=s) == 5
    assert calls == [[5]]


def test_scope_exit_restores_the_outer_scope() -> None:
    outer = batchy.scope("outer")
    with outer:
        with batchy.scope("inner"):
            pass
        assert batchy.current_scope() is outer
    with pytest.raises(batchy.UsageError, match="was exited without being the current scope"):
        outer.__exit__(None, None, None)  # exiting more often than entering


def test_one_scope_entered_by_concurrent_tasks_across_awaits() -> None:
    shared = batchy.scope("shared")

    async def use() -> Any:
        with shared:
            await asyncio.sleep(0)
            return batchy.current_scope()

    async def main() -> list[Any]:
        return await asyncio.gather(use(), use(), use())

    assert asyncio.run(main()) == [shared, shared, shared]
