"""The planned executor's pending positions: what each waits on, and dropping work under a null.

Every position whose value is not there yet is a *slot* (how to go on, and
where) waiting on a batchy future in a :class:`batchy.Watch`. :class:`Pending`
keeps, beside the watch, which slots are still wanted. When an error nulls a
position, graphql-core answers at once and cancels the work below it; so do we:
the slots below a nulled position are dropped, so the response no longer waits
for them, and the work that only they wanted is cancelled. What we started for a
position (the task stepping a generator or ``async def`` resolver, a
``resolve_type`` coroutine, the reading of an async iterable) is that position's
alone: it is cancelled, and a load it waits on that others share keeps running
for them (batchy cancels only what nothing else waits on). A loader future a
resolver returned is shared by nature and is never cancelled. A task a resolver
returned is waited on through a task of ours, so that cancelling ours cancels it
only if nothing else waits on it.

Slots found before the handler runs (the resolvers graphql-core would call
before its first ``await``) are kept until the handler starts, because a watch
starts its futures in its handler's scope.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any

import batchy

__all__ = [
    "END",
    "Pending",
    "close_iterator",
    "close_unstarted",
    "next_item",
    "own_awaitable",
    "own_coroutine",
    "own_task",
    "read_all",
]

# What next_item() returns when the iterator is exhausted.
END: Any = object()


class Pending:
    """The slots waiting on futures, by ``id(slot)``, with the future to cancel if dropped."""

    __slots__ = ("alarm", "buffer", "live", "slots", "watch")

    def __init__(self) -> None:
        self.watch: batchy.Watch[Any] = batchy.Watch()
        # id(slot) -> (slot, future to cancel or None, what it runs). A slot tuple
        # stays alive while the watch holds it, so its id is not reused before
        # it is taken.
        self.slots: dict[int, tuple[Any, batchy.Future[Any] | None, Any]] = {}
        self.buffer: list[tuple[batchy.Future[Any], Any]] = []
        self.live = False  # True once the handler runs and the watch may start futures
        self.alarm: batchy.Future[Any] | None = None

    def add(self, fut: batchy.Future[Any], slot: Any, inner: Any) -> None:
        """Wait on ``fut`` for ``slot``.

        ``inner``: False if others may share ``fut``; else ``fut`` is this slot's
        alone, and runs ``inner`` (a coroutine, a task or a generator).
        """
        self.slots[id(slot)] = (slot, None if inner is False else fut, inner)
        if self.live:
            self.watch.add(fut, slot)
        else:
            self.buffer.append((fut, slot))

    def start(self) -> None:
        """Called first in the handler: the slots found before it go into the watch."""
        self.live = True
        add = self.watch.add
        for fut, slot in self.buffer:
            add(fut, slot)
        self.buffer = []

    def wake_after(self, seconds: float) -> None:
        """Have :meth:`taken` return after ``seconds`` at the latest (for a time budget).

        The alarm is no slot: the response never waits for it, and it is
        cancelled with what is left when the response is complete.
        """
        self.alarm = _sleep(max(seconds, 0.0))
        self.watch.add(self.alarm, _ALARM)

    def taken(self) -> Generator[Any, Any, list[tuple[Any, batchy.Future[Any]]]]:
        """Wait until a slot is done; the (slot, future) pairs done since, still wanted."""
        watch = self.watch
        yield watch.ready()
        slots = self.slots
        return [pair for pair in watch.take() if slots.pop(id(pair[0]), None) is not None]

    def drop(self, dropped: Callable[[Any], bool]) -> None:
        """Forget the slots for which ``dropped(slot)``; cancel the work only they wanted."""
        for key, (slot, fut, inner) in list(self.slots.items()):
            if dropped(slot):
                del self.slots[key]
                if fut is not None:
                    _cancel(fut, inner)

    def cancel_all(self) -> None:
        """The response is complete without them: cancel what is still ours."""
        slots, self.slots = self.slots, {}
        if self.alarm is not None:
            self.alarm.cancel()
        for _, fut, inner in slots.values():
            if fut is not None:
                _cancel(fut, inner)
        self.buffer = []


def _cancel(fut: batchy.Future[Any], inner: Any) -> None:
    fut.cancel()
    # A task cancelled before it ran never starts what it was to run: close that
    # too, as graphql-core closes the coroutines it abandons.
    if not close_unstarted(inner) and isinstance(inner, batchy.Task) and inner.scope is None:
        inner.cancel()


def close_unstarted(value: Any) -> bool:
    """Close ``value`` if it is a coroutine that never ran (it never will); True if it was."""
    if inspect.iscoroutine(value) and inspect.getcoroutinestate(value) == inspect.CORO_CREATED:
        value.close()
        return True
    return False


@batchy.task
async def own_awaitable(aw: Any) -> Any:
    """An asyncio awaitable as a batchy task (a resolver's coroutine: :func:`own_coroutine`)."""
    return await aw


def own_coroutine(coro: Coroutine[Any, Any, Any]) -> batchy.Task[Any]:
    """An ``async def`` resolver's coroutine as a batchy task that steps it itself.

    The same as :func:`own_awaitable` without a coroutine around it: one frame
    less for every step, and the task is named after the resolver.
    """
    code = coro.cr_code  # type: ignore[attr-defined]
    owner: Any = _owners.get(code)
    if owner is None:
        # What names the task in errors and traces: made once per resolver, not per call.
        owner = types.SimpleNamespace(__qualname__=code.co_qualname, __code__=code)
        if len(_owners) < 10_000:  # resolvers made at run time must not grow it forever
            _owners[code] = owner
    return batchy.Task(coro, owner, True)


_owners: dict[Any, Any] = {}


@batchy.task
def own_task(task: batchy.Task[Any]) -> Generator[Any, Any, Any]:
    """Waits on a task a resolver returned, which others may share (see the module doc)."""
    return (yield task)


# The alarm's slot: never in Pending.slots, so taken() leaves it out.
_ALARM = ("alarm",)


@batchy.task
async def _sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


@batchy.task
async def next_item(iterator: Any) -> Any:
    """The next item of an async iterator, or END."""
    try:
        return await anext(iterator)
    except StopAsyncIteration:
        return END


@batchy.task
async def close_iterator(aclose: Callable[[], Any]) -> None:
    """``await aclose()``, as graphql-core does after an error: its own errors are ignored."""
    with contextlib.suppress(Exception):  # graphql-core suppresses them too
        await aclose()


@batchy.task
async def read_all(iterable: Any) -> list[Any]:
    """The items of an async iterable, as graphql-core 3.2 reads them: all, then completed."""
    return [item async for item in iterable]
