"""Gathering: one future for many, in the shape they were given (list, tuple, dict, nested).

This is what a handler gets when it yields ``[a, b]``, ``(a, b)`` or ``{"x": a}``,
and what :func:`batchy.gather` returns. Every leaf runs to its end whatever its
siblings do: an error never cancels a sibling, so nothing is left running and
nothing hangs. Then the first error in the order given is raised (as a plain
sequential evaluation would), with the others listed in a note, or all of them
as an ``ExceptionGroup`` with ``raise_group=True``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from ._errors import YieldError, short_repr
from ._future import FAILED, PENDING, Future, from_asyncio

if TYPE_CHECKING:
    from ._scheduler import Scheduler
    from ._scope import Scope

__all__ = ["Gather", "gather", "is_awaitable_leaf", "shape_of"]

FIRST = 0
RETURN = 1
GROUP = 2


class _Awaitable(Future[Any]):
    """A leaf that is an asyncio awaitable (a coroutine, an asyncio future): run it on the loop."""

    __slots__ = ("_aw", "_source")

    def __init__(self, aw: Awaitable[Any]) -> None:
        super().__init__()
        self._aw: Awaitable[Any] | None = aw
        self._source: Future[Any] | None = None

    def _activate(self, sched: Scheduler, scope: Scope | None) -> None:
        aw, self._aw = self._aw, None
        if aw is not None:
            self._source = from_asyncio(asyncio.ensure_future(aw, loop=sched.loop))
            self._source._add_waiter(self)

    def cancel(self, msg: str | None = None) -> bool:
        return self._source is not None and self._source.cancel(msg)


def is_awaitable_leaf(value: object) -> bool:
    return inspect.isawaitable(value)


def _flatten(value: Any, leaves: list[Future[Any]]) -> Any:
    """Collect the futures of ``value`` into ``leaves``; return its shape (leaf -> index)."""
    if isinstance(value, Future):
        leaves.append(value)
        return len(leaves) - 1
    if isinstance(value, list):
        return [_flatten(v, leaves) for v in value]
    if isinstance(value, tuple):
        return tuple(_flatten(v, leaves) for v in value)
    if isinstance(value, dict):
        return {k: _flatten(v, leaves) for k, v in value.items()}
    if inspect.isawaitable(value):
        leaves.append(_Awaitable(value))
        return len(leaves) - 1
    raise _BadLeaf(value)


def _rebuild(shape: Any, values: list[Any]) -> Any:
    if isinstance(shape, int):
        return values[shape]
    if isinstance(shape, list):
        return [_rebuild(s, values) for s in shape]
    if isinstance(shape, tuple):
        return tuple(_rebuild(s, values) for s in shape)
    return {k: _rebuild(s, values) for k, s in shape.items()}


class _BadLeaf(Exception):
    """Raised by :func:`shape_of` for a value that is not a future or awaitable."""

    def __init__(self, value: object) -> None:
        super().__init__(value)
        self.value = value


def shape_of(value: list[Any] | tuple[Any, ...] | dict[Any, Any], mode: int = FIRST) -> Gather:
    """A :class:`Gather` over a (nested) list / tuple / dict; raises ``_BadLeaf``."""
    leaves: list[Future[Any]] = []
    if type(value) is list and (
        _LEAF_TYPES.issuperset(map(type, value)) or all(isinstance(v, Future) for v in value)
    ):
        return Gather(value, None, mode)  # the common case: no shape to rebuild
    shape = _flatten(value, leaves)
    return Gather(leaves, shape, mode)


class Gather(Future[Any]):
    """Waits for every leaf, then resolves to their results in the original shape."""

    __slots__ = ("_failed", "_leaves", "_mode", "_remaining", "_shape", "_started")

    def __init__(self, leaves: list[Future[Any]], shape: Any, mode: int) -> None:
        super().__init__()
        self._leaves = leaves
        self._shape = shape
        self._mode = mode
        self._remaining = 0
        self._started = False
        self._failed = False  # whether a leaf failed: only then look for errors

    def _activate(self, sched: Scheduler, scope: Scope | None) -> None:
        if self._started:
            return
        self._started = True
        leaves = self._leaves
        remaining = len(leaves)
        enqueue = sched._ready.append
        # Tasks not started yet are started here (Task._activate, inlined: a page
        # starts thousands); outside any scope, Task._activate gives each its own.
        task = _task_type if scope is not None else None
        started = False
        leaf: Any  # a future, and where ``type(leaf) is task``, a Task
        for leaf in leaves:
            if type(leaf) is task and leaf._sched is None:
                leaf._sched = sched
                leaf._scope = scope
                enqueue(leaf)
                started = True
                if leaf._waiters is None:  # as it should be: pending, nobody waits yet
                    leaf._waiters = self
                    continue
            elif type(leaf) is not Future:
                leaf._activate(sched, scope)
            if leaf._state != PENDING:
                remaining -= 1
                if leaf._state == FAILED:
                    self._failed = True
            else:
                waiters = leaf._waiters  # Future._add_waiter, inlined
                if waiters is None:
                    leaf._waiters = self
                elif isinstance(waiters, list):
                    waiters.append(self)
                else:
                    leaf._waiters = [waiters, self]
        if started and not sched._running and not sched._scheduled:
            sched._schedule()  # once for all the tasks started above
        self._remaining = remaining
        if remaining == 0:
            self._finish()

    def cancel(self, msg: str | None = None) -> bool:
        """Cancel every leaf that can be cancelled (tasks); the gather then fails."""
        cancelled = False
        for leaf in self._leaves:
            if leaf._state == PENDING:
                cancelled = leaf.cancel(msg) or cancelled
        return cancelled

    def _on_done(self, fut: Future[Any]) -> None:
        if fut._state == FAILED:
            self._failed = True
        remaining = self._remaining - 1
        self._remaining = remaining
        if not remaining:
            self._finish()

    def _finish(self) -> None:
        leaves = self._leaves
        self._leaves = []  # do not keep the tree alive through the result
        values = [leaf._value for leaf in leaves]
        if self._failed and self._mode != RETURN:
            errors = [leaf._value for leaf in leaves if leaf._state == FAILED]
            self._set_exception(_combine(errors, self._mode))
            return
        shape = self._shape
        if shape is None:
            self._set_result(values)
        else:
            self._set_result(_rebuild(shape, values))


def _combine(errors: list[BaseException], mode: int) -> BaseException:
    if mode == GROUP:
        msg = f"{len(errors)} of the futures gathered together failed"
        if all(isinstance(e, Exception) for e in errors):
            return ExceptionGroup(msg, errors)  # type: ignore[type-var]
        return BaseExceptionGroup(msg, errors)
    first = errors[0]
    # The same error can come back for several leaves (one failed key asked
    # twice, one task gathered twice): list each error once, and not the first.
    unique = {id(e): e for e in errors}
    unique.pop(id(first))
    errors = [first, *unique.values()]
    if len(errors) > 1:
        others = ", ".join(short_repr(e) for e in errors[1:4])
        more = f" and {len(errors) - 4} more" if len(errors) > 4 else ""
        note = (
            f"batchy: {len(errors) - 1} other error(s) in the same parallel yield: "
            f"{others}{more} (gather with raise_group=True to get them all)"
        )
        # The same error object may travel through several gathers: note it once.
        if note not in getattr(first, "__notes__", ()):
            first.add_note(note)
    return first


def gather(
    *aws: Future[Any] | Awaitable[Any],
    return_exceptions: bool = False,
    raise_group: bool = False,
) -> Future[list[Any]]:
    """One future for many: resolves to the list of their results, in order.

    Every future runs to the end even when another fails. Then the first error
    (in argument order) is raised; ``return_exceptions=True`` puts errors in the
    list instead, and ``raise_group=True`` raises all of them as an
    ``ExceptionGroup``. Plain asyncio awaitables are run on the loop.

    >>> page = batchy.run(batchy.gather(post_view(1), post_view(2)))
    """
    mode = RETURN if return_exceptions else GROUP if raise_group else FIRST
    try:
        return shape_of(list(aws), mode)
    except _BadLeaf as bad:
        raise YieldError(
            f"batchy.gather() got {short_repr(bad.value)} ({type(bad.value).__name__}); "
            "it takes batchy futures and tasks or asyncio awaitables. "
            "Did you pass a function instead of calling it?"
        ) from None


#: The future types a list of leaves usually holds, checked for all leaves at once
#: in C (``_task`` adds its tasks); any other future is still a leaf, found slower.
_LEAF_TYPES: set[type] = {Future, Gather}

#: ``Task``, set by ``_task`` (which imports this module): Gather starts those itself.
_task_type: Any = None
