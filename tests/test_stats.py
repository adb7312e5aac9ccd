"""Per-scope statistics: each scope's rounds, calls, keys, hits, errors and waiting, exactly."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import batchy
from batchy.testing import record

POSTS = {p: {"id": p, "comments": [p * 10 + i for i in range(3)]} for p in range(1, 5)}
COMMENTS = {c: {"id": c, "user": c % 4} for p in POSTS.values() for c in p["comments"]}


@batchy.batched
async def posts_by_id(ids: list[int]) -> list[dict[str, Any]]:
    await asyncio.sleep(0)
    return [POSTS[i] for i in ids]


@batchy.batched
def comments_by_id(ids: list[int]) -> list[dict[str, Any]]:
    return [COMMENTS[i] for i in ids]


@batchy.batched(max_batch_size=3)
async def users_by_id(ids: list[int]) -> list[str]:
    await asyncio.sleep(0)
    return [f"user {i}" for i in ids]


@batchy.task
def comment_view(cid: int) -> Any:
    comment = yield comments_by_id(cid)
    return (yield users_by_id(comment["user"]))


@batchy.task
def post_view(pid: int) -> Any:
    post = yield posts_by_id(pid)
    return (yield [comment_view(c) for c in post["comments"]])


def test_one_page_counts_rounds_calls_keys_and_hits() -> None:
    scope = batchy.Scope("page")
    with record() as rec:
        batchy.run(batchy.gather(*(post_view(p) for p in (1, 2, 3, 4))), scope=scope)
    stats = scope.stats
    # 12 comments by users 0..3: four distinct users in two calls of at most 3.
    assert rec.calls(users_by_id) == [[2, 3, 0], [1]]
    assert stats.rounds == rec.rounds == 3
    assert stats.calls == {"posts_by_id": 1, "comments_by_id": 1, "users_by_id": 2}
    assert stats.keys == {"posts_by_id": 4, "comments_by_id": 12, "users_by_id": 4}
    assert stats.hits == {"users_by_id": 8}  # 12 loads of 4 users
    assert stats.errors == {}
    assert stats.as_dict()["calls"] == stats.calls


def test_stats_are_readable_inside_the_handler() -> None:
    seen: list[tuple[int, dict[str, int]]] = []

    @batchy.task
    def page() -> Any:
        yield posts_by_id(1)
        stats = batchy.current_scope().stats  # type: ignore[union-attr]
        seen.append((stats.rounds, dict(stats.calls)))
        yield posts_by_id(1)  # cached: no round, a hit
        yield comments_by_id(11)
        seen.append((stats.rounds, dict(stats.calls)))
        return stats.hits

    assert batchy.run(page()) == {"posts_by_id": 1}
    assert seen == [
        (1, {"posts_by_id": 1}),
        (2, {"posts_by_id": 1, "comments_by_id": 1}),
    ]


def test_a_call_shared_by_two_scopes_counts_in_both() -> None:
    calls: list[list[int]] = []

    @batchy.batched(name="users")
    async def users(ids: list[int]) -> list[int]:
        calls.append(ids)
        await asyncio.sleep(0)
        return ids

    a, b = batchy.Scope("a"), batchy.Scope("b")

    async def request(scope: batchy.Scope, ids: list[int]) -> Any:
        async with scope:
            return await batchy.gather(*(users(i) for i in ids))

    async def main() -> None:
        await asyncio.gather(request(a, [1, 2]), request(b, [2, 3, 3]))

    with record() as rec:
        asyncio.run(main())
    assert calls == [[1, 2, 3]]  # one call for both requests
    assert [set(e.scopes) for e in rec.batches] == [{a, b}]
    assert [set(e.scopes) for e in rec.round_events] == [{a, b}]
    assert (a.stats.calls, a.stats.keys, a.stats.hits) == ({"users": 1}, {"users": 2}, {})
    assert (b.stats.calls, b.stats.keys, b.stats.hits) == ({"users": 1}, {"users": 2}, {"users": 1})
    assert a.stats.rounds == b.stats.rounds == 1


def test_chunks_count_only_in_the_scopes_with_keys_in_them() -> None:
    @batchy.batched(name="items", max_batch_size=2)
    def items(ids: list[int]) -> list[int]:
        return ids

    a, b = batchy.Scope("a"), batchy.Scope("b")

    async def request(scope: batchy.Scope, ids: list[int]) -> Any:
        async with scope:
            return await items.many(ids)

    async def main() -> None:
        # Keys in order 1 2 | 3 4 | 5: a asks 1, 2, 5; b asks 3, 4 and 1 (shared, chunk 0).
        await asyncio.gather(request(a, [1, 2, 5]), request(b, [3, 4, 1]))

    with record() as rec:
        asyncio.run(main())
    assert [(e.chunk, list(e.keys), set(e.scopes)) for e in rec.batches] == [
        (0, [1, 2], {a, b}),
        (1, [5, 3], {a, b}),
        (2, [4], {b}),
    ]
    assert (a.stats.calls, a.stats.keys) == ({"items": 2}, {"items": 3})
    assert (b.stats.calls, b.stats.keys) == ({"items": 3}, {"items": 3})


def test_failed_calls_count_as_errors_and_keys_with_exception_values_do_not() -> None:
    @batchy.batched(name="flaky")
    def flaky(ids: list[int]) -> list[Any]:
        if 0 in ids:
            raise ConnectionError("down")
        return [ValueError(i) if i == 2 else i for i in ids]

    @batchy.task
    def page() -> Any:
        try:
            yield flaky(0)
        except batchy.LoaderError:
            pass
        return (yield batchy.gather(flaky(1), flaky(2), return_exceptions=True))

    scope = batchy.Scope()
    batchy.run(page(), scope=scope)
    assert scope.stats.calls == {"flaky": 2}
    assert scope.stats.errors == {"flaky": 1}


def test_waited_is_the_time_calls_with_the_scopes_keys_were_running() -> None:
    @batchy.batched(name="slow")
    async def slow(ids: list[int]) -> list[int]:
        await asyncio.sleep(0.002)
        return ids

    @batchy.task
    def page() -> Any:
        yield slow(1), posts_by_id(1)  # two calls at once: overlapping time counts once
        yield slow(2)

    scope = batchy.Scope()
    with record() as rec:
        batchy.run(page(), scope=scope)
    first = [e.duration for e in rec.batches if e.round == 1]
    second = [e.duration for e in rec.batches if e.round == 2]
    assert len(first) == 2 and len(second) == 1
    # Round 2 alone is exactly its one call; round 1 is at least its longer call.
    assert max(first) + second[0] <= scope.stats.waited <= sum(first) + second[0]


def test_runs_on_new_loops_count_each_round() -> None:
    # Each batchy.run has a new event loop whose rounds are numbered from 1 again.
    scope = batchy.Scope()
    batchy.run(posts_by_id(1), scope=scope)
    batchy.run(posts_by_id(2), scope=scope)
    assert scope.stats.rounds == 2


def test_scope_hooks_announce_the_outermost_with_block_only() -> None:
    class Scopes(batchy.Hook):
        def __init__(self) -> None:
            self.seen: list[tuple[str, str | None, int]] = []

        def scope_entered(self, scope: Any) -> None:
            self.seen.append(("entered", scope.name, scope.stats.rounds))

        def scope_exited(self, scope: Any) -> None:
            self.seen.append(("exited", scope.name, scope.stats.rounds))

    hook = Scopes()
    scope = batchy.Scope("request")
    with batchy.hooked(hook), scope:
        batchy.run(posts_by_id(1), scope=scope)  # enters it again, inside
        with scope:
            pass
    assert hook.seen == [("entered", "request", 0), ("exited", "request", 1)]


# -- a property: any scopes, keys and chunk sizes ---------------------------------------

loads = st.lists(st.integers(0, 9), max_size=8)


@settings(max_examples=60, deadline=None)
@given(
    asked=st.lists(loads, min_size=1, max_size=4),
    size=st.integers(1, 4),
    cache=st.booleans(),
)
def test_every_scope_counts_exactly_its_own_loads(
    asked: list[list[int]], size: int, cache: bool
) -> None:
    @batchy.batched(name="ids", max_batch_size=size, cache=cache)
    def ids(keys: list[int]) -> list[int]:
        return keys

    scopes = [batchy.Scope(str(i)) for i in range(len(asked))]

    async def request(scope: batchy.Scope, keys: list[int]) -> Any:
        async with scope:
            return await ids.many(keys)

    async def main() -> None:
        await asyncio.gather(*(request(s, k) for s, k in zip(scopes, asked, strict=True)))

    with record() as rec:
        asyncio.run(main())
    for scope, keys in zip(scopes, asked, strict=True):
        mine = set(keys)
        sent = len(mine) if cache else len(keys)
        calls = sum(1 for e in rec.batches if mine & set(e.keys))
        assert scope.stats.keys == ({"ids": sent} if keys else {})
        assert scope.stats.hits == ({"ids": len(keys) - sent} if len(keys) > sent else {})
        assert scope.stats.calls == ({"ids": calls} if calls else {})
        assert scope.stats.rounds == (1 if keys else 0)
        assert [scope in e.scopes for e in rec.batches] == [
            bool(mine & set(e.keys)) for e in rec.batches
        ]


def test_a_scope_outside_any_run_has_empty_stats() -> None:
    stats = batchy.Scope().stats
    assert stats.as_dict() == {
        "rounds": 0,
        "calls": {},
        "keys": {},
        "hits": {},
        "errors": {},
        "waited": 0.0,
    }
    assert repr(stats) == "<batchy.ScopeStats rounds=0 calls={} waited=0.0ms>"


@pytest.mark.parametrize("thread", [False, True])
def test_threaded_and_plain_loaders_are_counted_alike(thread: bool) -> None:
    @batchy.batched(name="t", thread=thread)
    def t(ids: list[int]) -> list[int]:
        return ids

    scope = batchy.Scope()
    batchy.run(t.many([1, 2, 2]), scope=scope)
    assert (scope.stats.calls, scope.stats.keys, scope.stats.hits) == (
        {"t": 1},
        {"t": 2},
        {"t": 1},
    )


def test_the_example_prints_each_requests_own_stats() -> None:
    example = Path(__file__).resolve().parents[1] / "examples" / "scope_stats.py"
    out = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    request = [
        "  calls {'users_by_id': 2, 'friends_of': 1}",
        "  keys  {'users_by_id': 3, 'friends_of': 1}",
        "  hits  {'users_by_id': 1}",
    ]
    assert [line for line in out if "waited" not in line] == [
        "GET /profile/1: 2 rounds",
        *request,
        "GET /profile/2: 2 rounds",
        *request,
        "the loaders were called: {'users_by_id': [[1, 2], [2, 3, 1]], 'friends_of': [[1, 2]]}",
    ]
    assert sum("waited on batches: " in line for line in out) == 2
