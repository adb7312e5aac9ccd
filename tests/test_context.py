"""Context variables: a handler sees the context of the code that started its tree.

Requests served concurrently on one event loop share one scheduler, which steps
every request's handlers. Before each tree carried its context, every handler
ran in the context of whichever request had woken the scheduler: a request id,
a tenant or the current trace span read in a handler was another request's.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import batchy

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


@batchy.batched
def echo(keys: list[int]) -> list[int]:
    return keys


@batchy.task
def child_gen(n: int) -> Any:
    before = request_id.get()
    yield echo(n)  # waits for a round: other requests' handlers run in between
    return (before, request_id.get())


@batchy.task
async def child_async(n: int) -> tuple[str, str]:
    before = request_id.get()
    await echo(n)
    await asyncio.sleep(0)
    return (before, request_id.get())


@batchy.task
def root(n: int) -> Any:
    seen = [request_id.get()]
    pairs = yield [child_gen(n), child_async(n)]
    seen += [x for pair in pairs for x in pair]
    seen.append(request_id.get())
    return seen


async def request(name: str, n: int) -> list[str]:
    request_id.set(name)
    async with batchy.scope():
        return await root(n)


def test_concurrent_requests_each_see_their_own_context() -> None:
    async def main() -> list[list[str]]:
        return await asyncio.gather(*(request(f"req-{i}", i) for i in range(5)))

    results = asyncio.run(main())
    assert results == [[f"req-{i}"] * 6 for i in range(5)]


def test_a_handler_setting_a_variable_does_not_leak_into_the_caller() -> None:
    @batchy.task
    def setter() -> Any:
        request_id.set("inside")
        yield echo(1)
        return request_id.get()

    async def main() -> tuple[str, str]:
        request_id.set("outside")
        inside = await setter()
        return inside, request_id.get()

    assert asyncio.run(main()) == ("inside", "outside")


def test_batchy_run_sees_the_callers_context() -> None:
    request_id.set("sync view")
    try:
        assert batchy.run(root(1)) == ["sync view"] * 6
    finally:
        request_id.set("-")


@batchy.task
def node_gen(shape: tuple[Any, ...], seen: list[tuple[str, str]], name: str) -> Any:
    seen.append((name, request_id.get()))
    values = yield [echo(len(seen))] + [node(s, seen, name) for s in shape]
    seen.append((name, request_id.get()))
    return len(values)


@batchy.task
async def node_async(shape: tuple[Any, ...], seen: list[tuple[str, str]], name: str) -> int:
    seen.append((name, request_id.get()))
    values = await batchy.gather(echo(len(seen)), *(node(s, seen, name) for s in shape))
    await asyncio.sleep(0)
    seen.append((name, request_id.get()))
    return len(values)


def node(shape: Any, seen: list[tuple[str, str]], name: str) -> batchy.Task[int]:
    kind, children = shape
    return (node_gen if kind else node_async)(children, seen, name)


shapes = st.recursive(
    st.tuples(st.booleans(), st.just(())),
    lambda inner: st.tuples(st.booleans(), st.lists(inner, max_size=3).map(tuple)),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(shapes, min_size=1, max_size=5))
def test_any_trees_served_concurrently_see_only_their_own_context(trees: list[Any]) -> None:
    seen: list[tuple[str, str]] = []

    async def serve(i: int, tree: Any) -> int:
        request_id.set(f"req-{i}")
        async with batchy.scope():
            return await node(tree, seen, f"req-{i}")

    async def main() -> None:
        await asyncio.gather(*(serve(i, t) for i, t in enumerate(trees)))

    asyncio.run(main())
    assert seen and all(name == got for name, got in seen)


def test_a_batch_call_runs_in_the_context_of_the_request_that_opened_it() -> None:
    """Batches holding only request b's keys ran in request a's context, after a ended.

    A batch call ran in the context the scheduler was woken in, and each call's
    done callback handed that context on to the next round: b's later rounds read
    a's request id (Django: a's tenant database, a's thread).
    """
    seen: list[tuple[list[int], str]] = []

    @batchy.batched
    async def users(keys: list[int]) -> list[int]:
        seen.append((sorted(keys), request_id.get()))
        await asyncio.sleep(0.001)
        return keys

    @batchy.batched(thread=True)
    def in_thread(keys: list[int]) -> list[int]:
        seen.append((sorted(keys), "thread " + request_id.get()))
        return keys

    @batchy.task
    def chain(start: int, n: int) -> Any:
        for k in range(start, start + n):
            yield users(k)
            yield in_thread(k)
        return n

    async def serve(name: str, start: int, n: int) -> int:
        request_id.set(name)
        async with batchy.scope():
            return await chain(start, n)

    async def main() -> list[int]:
        return list(await asyncio.gather(serve("a", 1, 1), serve("b", 100, 3)))

    assert asyncio.run(main()) == [1, 3]
    # Round 1 is shared (a asked first: its context); the rest hold only b's keys.
    assert seen == [
        ([1, 100], "a"),
        ([1, 100], "thread a"),
        ([101], "b"),
        ([101], "thread b"),
        ([102], "b"),
        ([102], "thread b"),
    ]
