"""The synchronous entry point: run handlers to their result from code with no event loop.

A run always ends, and ends clean: when its result is ready, every task it
started has finished. A task still running then (started and never waited for,
say through a :class:`batchy.Watch`) is cancelled with a ``RuntimeWarning``
naming it, and the run waits for it to end, as it waits for the cleanup of tasks
that were cancelled already (a timeout): cleanup code that yields runs to its end.
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Awaitable
from typing import Any, TypeVar

from ._errors import UsageError, short_repr
from ._future import PENDING
from ._gather import gather
from ._scheduler import Scheduler, scheduler_for
from ._scope import Scope
from ._task import Task

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
    sched = scheduler_for(asyncio.get_running_loop())
    with scope:
        try:
            result = await aw
        except Exception:
            await _end_leftovers(sched)
            raise
        await _end_leftovers(sched)
        out.append(result)


async def _end_leftovers(sched: Scheduler) -> None:
    """Cancel (and name) the tasks still running, and wait until every one has ended."""
    for _ in range(100):  # cleanup may start tasks of its own; each pass ends those too
        if not sched._live:
            return
        left = _unfinished(sched)
        if not left:  # the count also holds tasks dropped and collected unfinished
            return
        fresh = [t for t in left if t not in sched._cancelled]
        if fresh:
            names = ", ".join(f"{t.name} ({t._location()})" for t in fresh[:10])
            more = f" and {len(fresh) - 10} more" if len(fresh) > 10 else ""
            warnings.warn(
                f"batchy.run(): {len(fresh)} task(s) it started were still running when "
                f"its result was ready: {names}{more}. They were cancelled; yield, await "
                "or gather every task you start.",
                RuntimeWarning,
                stacklevel=2,
            )
            for t in fresh:
                t.cancel()
        await gather(*left, return_exceptions=True)


def _unfinished(sched: Scheduler) -> list[Task[Any]]:
    # Only reached when the live count says some task has not ended: looking
    # the tasks up here keeps every task's own start and end to a counter.
    # getattr: a task whose making failed half way (batchy.Task() refused its
    # argument) has no _sched, and a traceback may still hold it.
    return [
        o
        for o in gc.get_objects()
        if isinstance(o, Task) and getattr(o, "_sched", None) is sched and o._state == PENDING
    ]
