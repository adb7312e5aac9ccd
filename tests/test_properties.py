"""Property tests of the engine: random trees of handlers and loaders against a naive evaluation."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tree_helpers import FAILING_KEYS, KeyFailed, as_coro, handler_trees, load_leaves, value_of

import batchy
from batchy.testing import record

N_LOADERS = 3


def make_loaders(max_batch_size: int | None) -> list[batchy.Loader[int, str]]:
    loaders: list[batchy.Loader[int, str]] = []
    for i in range(N_LOADERS):

        def fn(keys: list[int], i: int = i) -> list[Any]:
            return [KeyFailed(i, k) if k in FAILING_KEYS else value_of(i, k) for k in keys]

        if i == 0:
            loaders.append(
                batchy.batched(fn, name=f"L{i}", cache=False, max_batch_size=max_batch_size)
            )
        else:

            async def afn(keys: list[int], fn: Any = fn) -> list[Any]:
                return fn(keys)  # type: ignore[no-any-return]

            loaders.append(
                batchy.batched(afn, name=f"L{i}", cache=False, max_batch_size=max_batch_size)
            )
    return loaders


trees = handler_trees(load_leaves(N_LOADERS), max_leaves=25)


def naive(node: Any, time: int) -> tuple[Any, BaseException | None, int]:
    """(value, error, finish time) of a sequential evaluation; loads take one round each."""
    if node[0] == "load":
        _, loader, key = node
        if key in FAILING_KEYS:
            return None, KeyFailed(loader, key), time + 1
        return value_of(loader, key), None, time + 1
    kind, _, children = node
    if kind == "seq":
        out = []
        for child in children:
            value, error, time = naive(child, time)
            if error is not None:
                return None, error, time
            out.append(value)
        return out, None, time
    results = [naive(child, time) for child in children]
    end = max((t for _, _, t in results), default=time)
    for _, error, _ in results:
        if error is not None:
            return None, error, end
    return [v for v, _, _ in results], None, end


def build(node: Any, loaders: list[batchy.Loader[int, str]]) -> batchy.Future[Any]:
    if node[0] == "load":
        return loaders[node[1]](node[2])
    return (async_node if node[1] else gen_node)(node, loaders)


@batchy.task
def gen_node(node: Any, loaders: list[batchy.Loader[int, str]]) -> Any:
    kind, _, children = node
    if kind == "seq":
        out = []
        for child in children:
            out.append((yield build(child, loaders)))
        return out
    return (yield [build(child, loaders) for child in children])


@batchy.task
async def async_node(node: Any, loaders: list[batchy.Loader[int, str]]) -> Any:
    kind, _, children = node
    if kind == "seq":
        return [await build(child, loaders) for child in children]
    return await batchy.gather(*(build(child, loaders) for child in children))


@settings(max_examples=150, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees, max_batch_size=st.sampled_from([None, 2, 5]))
def test_random_trees_match_naive_evaluation(tree: Any, max_batch_size: int | None) -> None:
    loaders = make_loaders(max_batch_size)
    root = ("par", False, [tree])
    expected, expected_error, depth = naive(root, 0)
    with record() as rec:
        try:
            got = batchy.run(asyncio.wait_for(as_coro(build(root, loaders)), 10))
            error = None
        except KeyFailed as e:
            got, error = None, e
    # Same result, or the same (first) error as a sequential evaluation.
    assert (got, repr(error)) == (expected, repr(expected_error))
    # With equal latency, rounds equal the dependency depth.
    assert rec.rounds == depth
    for event in rec.round_events:
        calls = [b for b in rec.batches if b.round == event.number]
        for i in range(N_LOADERS):
            keys = [k for b in calls if b.loader == f"L{i}" for k in b.keys]
            # Each round asks each loader for each key at most once...
            assert len(keys) == len(set(keys))
            # ...in one call, or in chunks of at most max_batch_size.
            chunks = [b for b in calls if b.loader == f"L{i}"]
            limit = max_batch_size or len(keys) or 1
            assert all(len(b.keys) <= limit for b in chunks)
            assert len(chunks) == -(-len(keys) // limit)
