"""Watch: a growing set of futures that one handler waits on, taking each as it finishes.

:func:`batchy.gather` waits for a fixed set of futures, all of them. A handler
that drives many independent pieces of work (a GraphQL executor completing a
response, a job worker) instead wants to go on with each piece as soon as *its*
future is done, and to add new futures while it does, without a task per piece.
A watch does that with one waiter object per future and no re-walk::

    watch = batchy.Watch()
    watch.add(users_by_id(1), "first")
    while watch:
        yield watch.ready()               # at least one is done
        for tag, fut in watch.take():     # every one done so far, in finishing order
            ...                           # may call watch.add(...) again
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from ._errors import UsageError
from ._future import PENDING, Future, resolved
from ._scheduler import _local

__all__ = ["Watch"]

T = TypeVar("T")

_READY: Future[None] = resolved(None)


class _Entry:
    """The waiter of one watched future: hands it back to its watch, with its tag."""

    __slots__ = ("tag", "watch")

    def __init__(self, watch: Watch[Any], tag: Any) -> None:
        self.watch = watch
        self.tag = tag

    def _on_done(self, fut: Future[Any]) -> None:
        watch = self.watch
        watch._pending -= 1
        watch._done.append((self.tag, fut))
        signal = watch._signal
        if signal is not None:
            watch._signal = None
            signal._set_result(None)


class Watch(Generic[T]):
    """Futures added one by one, each taken back with its tag once it is done.

    Use it inside a running handler: :meth:`add` starts the future in that
    handler's scope, as yielding it would. A watch is true while any future
    added is not yet taken.
    """

    __slots__ = ("_done", "_pending", "_signal")

    def __init__(self) -> None:
        self._done: list[tuple[T, Future[Any]]] = []
        self._pending = 0
        self._signal: Future[None] | None = None

    def __len__(self) -> int:
        return self._pending + len(self._done)

    def __repr__(self) -> str:
        return f"<batchy.Watch pending={self._pending} done={len(self._done)}>"

    def add(self, fut: Future[Any], tag: T) -> None:
        """Watch ``fut``; :meth:`take` gives it back with ``tag`` when it is done."""
        if not isinstance(fut, Future):
            raise UsageError(
                f"Watch.add() takes a batchy future or task, got {type(fut).__name__}; "
                "wrap a coroutine or asyncio awaitable in a @batchy.task first"
            )
        if type(fut) is not Future:
            sched = _local.sched
            task = sched.current if sched is not None else None
            if sched is None or task is None:
                raise UsageError(
                    "Watch.add() was called outside a running batchy handler; call it from "
                    "inside a @batchy.task (the watch starts futures in that task's scope)"
                )
            fut._activate(sched, task._scope)
        if fut._state != PENDING:
            self._done.append((tag, fut))
            return
        self._pending += 1
        fut._add_waiter(_Entry(self, tag))

    def ready(self) -> Future[None]:
        """A future that is done once at least one watched future is (at once if one is)."""
        if self._done or not self._pending:
            return _READY
        signal = self._signal
        if signal is None:
            signal = self._signal = Future()
        return signal

    def take(self) -> list[tuple[T, Future[Any]]]:
        """The (tag, future) pairs done since the last call, in the order they finished."""
        done = self._done
        self._done = []
        return done
