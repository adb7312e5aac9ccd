"""Gathering: one future for many, in the shape they were given (list, tuple, dict, nested).

This is what a handler gets when it yields ``[a, b]``, ``(a, b)`` or ``{"x": a}``,
and what :func:`batchy.gather` returns. Every leaf runs to its end whatever its
siblings do: an error never cancels a sibling, so nothing is left running and
nothing hangs. Then the first error in the order given is raised (as a plain
sequential evaluation would), with the others listed in a note, or all of them
as an ``ExceptionGroup`` with ``raise_group=True``.

Cancelling a gather (its waiter was cancelled) fails it at once with
``CancelledError``, cancels each leaf that nothing else waits on, and leaves the
leaves another waiter shares running for that waiter.

This module also finds wait cycles (:func:`find_cycle`): it is the one that
knows what a gather waits on.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import operator
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from ._errors import CycleError, YieldError, short_repr
from ._future import DONE, FAILED, PENDING, Future, from_asyncio

if TYPE_CHECKING:
    from ._scheduler import Scheduler
    from ._scope import Scope

__all__ = ["Gather", "find_cycle", "gather", "shape_of"]

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
        aw, self._aw = self._aw, None
        if aw is not None:
            # Never started (its gather was cancelled first): close it, as asyncio
            # closes a coroutine cancelled before it ran, and fail with the cancel.
            if inspect.iscoroutine(aw):
                aw.close()
            self._set_exception(
                asyncio.CancelledError(msg) if msg is not None else asyncio.CancelledError()
            )
            return True
        return self._source is not None and self._source.cancel(msg)


#: How deep a yielded shape may nest. Deeper is almost surely a mistake (a
#: structure that contains itself, a tree yielded whole), and flattening it
#: must end in a clear YieldError rather than a RecursionError in the scheduler.
MAX_DEPTH = 100


def _flatten(value: Any, leaves: list[Future[Any]], depth: int, path: set[int]) -> Any:
    """Collect the futures of ``value`` into ``leaves``; return its shape (leaf -> index)."""
    if isinstance(value, Future):
        leaves.append(value)
        return len(leaves) - 1
    if isinstance(value, (list, tuple, dict)):
        if id(value) in path:
            raise _BadLeaf(value, "a list / tuple / dict that contains itself")
        if depth >= MAX_DEPTH:
            raise _BadLeaf(value, f"a shape nested more than {MAX_DEPTH} levels deep")
        path.add(id(value))
        depth += 1
        if isinstance(value, list):
            shape: Any = [_flatten(v, leaves, depth, path) for v in value]
        elif isinstance(value, tuple):
            shape = tuple([_flatten(v, leaves, depth, path) for v in value])
        else:
            shape = {k: _flatten(v, leaves, depth, path) for k, v in value.items()}
        path.discard(id(value))
        return shape
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
        return tuple([_rebuild(s, values) for s in shape])
    return {k: _rebuild(s, values) for k, s in shape.items()}


class _BadLeaf(Exception):
    """Raised by :func:`shape_of` for a value that cannot be waited on; ``what`` says why."""

    def __init__(self, value: object, what: str = "") -> None:
        super().__init__(value)
        self.value = value
        self.what = what


#: The shape of a flat tuple of leaves: the result is ``tuple(values)``.
_TUPLE: Any = object()


def shape_of(value: list[Any] | tuple[Any, ...] | dict[Any, Any], mode: int = FIRST) -> Gather:
    """A :class:`Gather` over a (nested) list / tuple / dict; raises ``_BadLeaf``."""
    kind = type(value)
    # The common shapes, one level of futures and tasks: no shape to rebuild.
    if (kind is list or kind is tuple) and (
        _LEAF_TYPES.issuperset(map(type, value)) or all(isinstance(v, Future) for v in value)
    ):
        if kind is list:
            return Gather(value, None, mode)  # type: ignore[arg-type]
        return Gather(list(value), _TUPLE, mode)
    leaves: list[Future[Any]] = []
    shape = _flatten(value, leaves, 0, set())
    return Gather(leaves, shape, mode)


_new_gather = object.__new__
_value_of = operator.attrgetter("_value")  # in C: no comprehension frame per gather
_state_of = operator.attrgetter("_state")
_PLAIN = frozenset((Future,))


def flat_gather(items: list[Any] | tuple[Any, ...]) -> Gather | None:
    """A started gather over a flat list or tuple of loader futures, or ``None`` for other items.

    This is ``x, y = yield a(k), b(k)``, the idiom of every handler: one call
    builds, starts and (when every key is cached) finishes the gather, so a
    parallel yield costs about what two single yields do.
    """
    if not _PLAIN.issuperset(map(type, items)):
        return None
    g: Gather = _new_gather(Gather)
    g._state = PENDING
    g._value = None
    g._waiters = None
    g._leaves = items  # type: ignore[assignment]  # read-only from here on
    g._shape = None if type(items) is list else _TUPLE
    g._mode = FIRST
    g._started = True
    failed = False
    remaining = 0
    for leaf in items:
        state = leaf._state
        if state == PENDING:
            remaining += 1
            waiters = leaf._waiters  # Future._add_waiter, inlined
            if waiters is None:
                leaf._waiters = g
            elif type(waiters) is list:
                waiters.append(g)
            else:
                leaf._waiters = [waiters, g]
        elif state == FAILED:
            failed = True
    g._failed = failed
    g._remaining = remaining
    if not remaining:
        g._finish()
    return g


def find_cycle(start: Future[Any], waiter: Any) -> list[Any] | None:
    """The tasks of a cycle if ``waiter`` (a task) waited on ``start``, else ``None``.

    Follows what each task waits on (and each gather's pending leaves) from
    ``start``; reaching ``waiter`` means the wait would close a circle. The cycle
    is returned starting with ``waiter``. Only called when a task is about to wait
    on a task (or gather) already running, so the common waits never pay for it.
    """
    parent: dict[int, Any] = {id(start): None}
    todo: list[Any] = [start]
    while todo:
        node = todo.pop()
        if node is waiter:
            chain = []
            while node is not None:
                if isinstance(node, _task_type):
                    chain.append(node)
                node = parent[id(node)]
            chain.reverse()  # start ... waiter
            return [waiter, *chain[:-1]]
        if isinstance(node, _task_type):
            # (Loader keys waited on in ``_keys`` wait on no task themselves.)
            nexts = [node._waiting] if node._waiting is not None else []
        elif isinstance(node, Gather) and node._state == PENDING:
            nexts = node._leaves
        else:
            continue
        for nxt in nexts:
            if id(nxt) not in parent and nxt._state == PENDING:
                parent[id(nxt)] = node
                todo.append(nxt)
    return None


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
            # Yielded again (a batchy.gather() shared by several handlers): the
            # new waiter must not be one of the tasks this gather waits on.
            current = sched.current
            if current is not None and self._state == PENDING:
                cycle = find_cycle(self, current)
                if cycle is not None:
                    raise _cycle_error(cycle)
            return
        self._started = True
        try:
            self._start(sched, scope)
        except Exception as error:
            # A leaf that cannot be waited on (a cycle, a task of another loop):
            # this gather fails with it, at the yield that made it.
            self._leaves = []
            if self._state == PENDING:
                self._set_exception(error)

    def _start(self, sched: Scheduler, scope: Scope | None) -> None:
        leaves = self._leaves
        remaining = len(leaves)
        enqueue = sched._ready.append
        # Tasks not started yet are started here (Task._activate, inlined: a page
        # starts thousands); outside any scope, Task._activate gives each its own.
        task = _task_type if scope is not None else None
        started = 0
        parent = sched.current
        ctx = parent._ctx if parent is not None else contextvars.copy_context()
        leaf: Any  # a future, and where ``type(leaf) is task``, a Task
        for leaf in leaves:
            if type(leaf) is task and leaf._sched is None and leaf._state == PENDING:
                leaf._sched = sched
                leaf._scope = scope
                leaf._ctx = ctx
                enqueue(leaf)
                started += 1
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
        if started:
            sched._live += started
            if not sched._running and not sched._scheduled:
                sched._schedule()  # once for all the tasks started above
        self._remaining = remaining
        if remaining == 0:
            self._finish()

    def cancel(self, msg: str | None = None) -> bool:
        """Fail at once with ``CancelledError``; cancel the leaves nothing else waits on.

        A leaf that another waiter shares (a task two parents wait on) keeps
        running for that waiter: it is cancelled only when no one waits on it.
        """
        if self._state != PENDING:
            return False
        leaves = self._leaves
        self._leaves = []
        own = []
        # Not started (asyncio cancelled it before its first step): its tasks were
        # never started either, and nothing else waits on those.
        unstarted = not self._started
        for leaf in leaves:
            if leaf._state == PENDING:
                if leaf._waiters is self or (unstarted and leaf._waiters is None):
                    own.append(leaf)
                leaf._remove_waiter(self)
        self._set_exception(
            asyncio.CancelledError(msg) if msg is not None else asyncio.CancelledError()
        )
        for leaf in own:  # detached first: a leaf that ends at once cannot wake us twice
            leaf.cancel(msg)
        return True

    def _on_done(self, fut: Future[Any]) -> None:
        if fut._state == FAILED:
            self._failed = True
        remaining = self._remaining - 1
        self._remaining = remaining
        if not remaining:
            self._finish()

    def _finish(self) -> None:
        if self._state != PENDING:
            return  # failed already (cancelled, or a leaf could not be waited on)
        leaves = self._leaves
        self._leaves = []  # do not keep the tree alive through the result
        try:
            if self._failed and self._mode != RETURN:
                errors = [leaf._value for leaf in leaves if leaf._state == FAILED]
                self._set_exception(_combine(errors, self._mode))
                return
            shape = self._shape
            if shape is None:
                value: Any = list(map(_value_of, leaves))
            elif shape is _TUPLE:
                value = tuple(map(_value_of, leaves))
            else:
                value = _rebuild(shape, list(map(_value_of, leaves)))
            self._state = DONE  # Future._set_result, inlined
            self._value = value
            waiter = self._waiters
            if waiter is not None:
                if type(waiter) is _task_type:
                    # The usual single waiter, the handler that yielded us:
                    # Task._on_done, inlined.
                    self._waiters = None
                    sched = waiter._sched  # type: ignore[union-attr]
                    sched._ready.append(waiter)
                    if not sched._running and not sched._scheduled:
                        sched._schedule()
                else:
                    self._wake()
        except Exception as error:  # never leave the waiters of a gather hanging
            if self._state == PENDING:
                self._set_exception(error)


def _cycle_error(cycle: list[Any]) -> CycleError:
    first = cycle[0]
    if len(cycle) == 1:
        what = f"task {first.name} waits on itself"
    else:
        chain = ", which waits on ".join(t.name for t in cycle[1:])
        what = f"task {first.name} would wait on {chain}, which waits on {first.name}"
    return CycleError(
        f"{what} ({first._location()}): tasks that wait on each other in a circle can "
        "never finish. Make the dependency run one way, for example by moving the shared "
        "work into a task that both wait on.",
        tasks=cycle,
    )


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
        what = bad.what or f"{short_repr(bad.value)} ({type(bad.value).__name__})"
        raise YieldError(
            f"batchy.gather() got {what}; it takes batchy futures and tasks or asyncio "
            "awaitables, in lists, tuples and dicts at most "
            f"{MAX_DEPTH} levels deep. Did you pass a function instead of calling it?"
        ) from None


#: The future types a list of leaves usually holds, checked for all leaves at once
#: in C (``_task`` adds its tasks); any other future is still a leaf, found slower.
_LEAF_TYPES: set[type] = {Future, Gather}

#: ``Task``, set by ``_task`` (which imports this module): Gather starts those itself.
_task_type: Any = None
