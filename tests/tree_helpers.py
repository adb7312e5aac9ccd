"""Random trees of handlers and loaders, shared by the property tests and the chaos suite.

A tree is made of plain tuples, so that Hypothesis prints a falsifying example
that can be pasted back into a test:

- a leaf ``("load", loader, key)`` asks loader number ``loader`` for ``key``;
- a handler node ``(kind, is_async, children)`` with ``kind`` ``"seq"`` (wait on
  each child in turn) or ``"par"`` (wait on all of them in one parallel yield),
  run by a generator handler or, when ``is_async``, an ``async def`` handler.

Suites add leaves and node kinds of their own (``handler_trees(extra_nodes=...)``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import strategies as st

import batchy

Strategy = st.SearchStrategy[Any]

#: Keys whose value, in a well-behaved loader, is a ``KeyFailed`` exception instance.
FAILING_KEYS = frozenset({3, 7})


class KeyFailed(Exception):
    """The value a loader returns for a key in ``FAILING_KEYS``: fails that key alone."""


def value_of(loader: int, key: int) -> str:
    """The value loader number ``loader`` returns for ``key``."""
    return f"L{loader}:{key}"


def load_leaves(n_loaders: int, max_key: int = 9) -> Strategy:
    """Leaves ``("load", loader, key)``."""
    return st.tuples(st.just("load"), st.integers(0, n_loaders - 1), st.integers(0, max_key))


def handler_nodes(children: Strategy, max_children: int = 4) -> Strategy:
    """Handler nodes ``(kind, is_async, children)`` over ``children``."""
    return st.tuples(
        st.sampled_from(["seq", "par"]), st.booleans(), st.lists(children, max_size=max_children)
    )


def handler_trees(
    leaves: Strategy,
    *,
    extra_nodes: Sequence[Callable[[Strategy], Strategy]] = (),
    max_leaves: int = 25,
) -> Strategy:
    """Trees of handler nodes over ``leaves``; ``extra_nodes`` make more node kinds from children."""

    def extend(children: Strategy) -> Strategy:
        nodes = handler_nodes(children)
        if not extra_nodes:
            return nodes
        return st.one_of(nodes, *(make(children) for make in extra_nodes))

    return st.recursive(leaves, extend, max_leaves=max_leaves)


async def as_coro(fut: batchy.Future[Any]) -> Any:
    """Await a batchy future from a plain coroutine (what ``asyncio.wait_for`` needs)."""
    return await fut
