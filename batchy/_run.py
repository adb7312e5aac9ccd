"""The synchronous entry point: run handlers to their result from code with no event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from ._errors import UsageError, short_repr
from ._scope import Scope

__all__ = ["run"]

T = TypeVar("T")


def run(aw: Awaitable[T], *, scope: Scope | None = None) -> T:
    """Run a task, gather or any awaitable on a new event loop and return its result.

    Everything it starts shares one scope (a new one unless ``scope`` is given),
    so loader caches last exactly as long as the call::

        page = batchy.run(batchy.gather(*(post_view(p) for p in range(1, 51))))

    Inside async code, ``await`` the task instead.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise UsageError(
            "batchy.run() was called while an event loop is running in this thread; "
            "inside async code, 'await' the task (or gather) instead"
        )
    if not hasattr(aw, "__await__"):
        raise UsageError(
            f"batchy.run() takes a task, a gather or another awaitable, got "
            f"{short_repr(aw)} ({type(aw).__name__}). Did you call a plain function "
            "instead of a @batchy.task?"
        )
    out: list[T] = []
    # _main returns None: asyncio.run looks at (and reprs) what the main
    # coroutine returns, which can be slow for a large result.
    asyncio.run(_main(aw, scope if scope is not None else Scope(), out))
    return out[0]


async def _main(aw: Awaitable[T], scope: Scope, out: list[T]) -> None:
    with scope:
        out.append(await aw)
