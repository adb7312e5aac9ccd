"""The future: one pending value and the waiters it wakes by callback when it is resolved.

A future is both yieldable (from a generator handler) and awaitable (from an
``async def`` handler, or from plain asyncio code). Inside a handler stepped by
batchy, awaiting yields the future itself to the scheduler; anywhere else it
bridges to an asyncio future so asyncio tasks can wait on it too.

Futures and tasks start lazily: a task made outside a running loop starts when
something first yields, awaits or runs it (``_activate``). That is what lets
``batchy.run(gather(*tasks))`` build its tree before any loop exists.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import types
from collections.abc import Callable, Generator
from typing import Any, Generic, Protocol, TypeVar

from ._errors import UsageError, error_text
from ._scheduler import Scheduler, current_scheduler, scheduler_for
from ._scope import Scope, current_scope

__all__ = ["Future", "Waiter", "failed", "from_asyncio", "resolved"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

PENDING = 0
DONE = 1
FAILED = 2


class Waiter(Protocol):
    def _on_done(self, fut: Future[Any]) -> None: ...


class Future(Generic[T_co]):
    """A value that is not there yet: a loader key, a task's result, a gather.

    Yield it from a generator handler or ``await`` it; read it with
    :meth:`result` once :meth:`done`.
    """

    __slots__ = ("__weakref__", "_state", "_value", "_waiters")

    def __init__(self) -> None:
        self._state = PENDING
        self._value: Any = None
        # None, one waiter, or a list of them: most futures have exactly one
        # waiter, and a list per future is an allocation per key and per task.
        self._waiters: Waiter | list[Waiter] | None = None

    def __repr__(self) -> str:
        state = ("pending", "done", "failed")[self._state]
        return f"<{type(self).__name__} {state}>"

    # -- reading --------------------------------------------------------------------

    def done(self) -> bool:
        """True once the future has a result or an error."""
        return self._state != PENDING

    def result(self) -> T_co:
        """The value; raises the error if the future failed."""
        if self._state == DONE:
            return self._value  # type: ignore[no-any-return]
        if self._state == FAILED:
            raise self._value
        raise UsageError(
            f"{self!r} has no result yet; yield or await it inside a handler, "
            "or run it with batchy.run(...)"
        )

    def exception(self) -> BaseException | None:
        """The error if the future failed, else ``None``."""
        if self._state == PENDING:
            self.result()  # raises the "no result yet" error
        return self._value if self._state == FAILED else None

    def add_done_callback(self, fn: Callable[[Future[T_co]], object]) -> None:
        """Call ``fn(future)`` when the future is resolved (at once if it already is)."""
        if self._state != PENDING:
            fn(self)
        else:
            self._add_waiter(_Callback(fn))

    # -- resolving (engine internal) ------------------------------------------------

    def _add_waiter(self, waiter: Waiter) -> None:
        waiters = self._waiters
        if waiters is None:
            self._waiters = waiter
        elif isinstance(waiters, list):
            waiters.append(waiter)
        else:
            self._waiters = [waiters, waiter]

    def _set_result(self, value: Any) -> None:
        self._state = DONE
        self._value = value
        if self._waiters is not None:
            self._wake()

    def _set_exception(self, error: BaseException) -> None:
        self._state = FAILED
        self._value = error
        if self._waiters is not None:
            self._wake()

    def _fail_unread(self, error: BaseException) -> None:
        """Fail with ``error``, logged if it is collected unread (:func:`_fail_unread`)."""
        _fail_unread(self, error)

    def _wake(self) -> None:
        """Tell every waiter the future is resolved (each exactly once)."""
        waiters = self._waiters
        self._waiters = None
        if isinstance(waiters, list):
            for w in waiters:
                w._on_done(self)
        elif waiters is not None:
            waiters._on_done(self)

    def _remove_waiter(self, waiter: Waiter) -> None:
        waiters = self._waiters
        if waiters is waiter:
            # Not None: that says nobody ever waited (see _fail_unread). Whoever
            # asked stopped waiting (cancelled), so an error is nobody's to report.
            self._waiters = _GONE
        elif isinstance(waiters, list) and waiter in waiters:
            waiters.remove(waiter)

    def _copy_from(self, other: Future[Any]) -> None:
        if other._state == DONE:
            self._set_result(other._value)
        else:
            self._set_exception(other._value)

    def _on_done(self, fut: Future[Any]) -> None:
        # A future can wait on another one and take over its outcome.
        self._copy_from(fut)

    def _activate(self, sched: Scheduler, scope: Scope | None) -> None:
        """Start whatever this future depends on; a plain future has nothing to start."""

    # -- awaiting -------------------------------------------------------------------

    def __await__(self) -> Generator[Any, None, T_co]:
        if self._state == PENDING:
            sched = current_scheduler()
            if sched is not None and sched.current is not None:
                # Inside a handler stepped by batchy: the task waits on us directly.
                yield self
            else:
                yield from self._await_from_asyncio().__await__()
        return self.result()

    def _await_from_asyncio(self) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        sched = scheduler_for(loop)
        self._activate(sched, current_scope())
        bridge: asyncio.Future[Any] = loop.create_future()
        if self._state == PENDING:
            self._add_waiter(_ToAsyncio(bridge))
            # Like asyncio: cancelling the awaiting task (a timeout, say) cancels us.
            bridge.add_done_callback(self._on_bridge_done)
        else:
            bridge.set_result(None)
        return bridge

    def _on_bridge_done(self, bridge: asyncio.Future[Any]) -> None:
        if bridge.cancelled() and self._state == PENDING:
            self.cancel()

    def cancel(self, msg: str | None = None) -> bool:
        """Cancel what this future waits for, if it can be; a plain future cannot."""
        return False

    # -- the coroutine protocol -----------------------------------------------------
    # With ``send``, ``throw`` and ``close`` a future is a coroutine to asyncio,
    # which then drives it itself (``asyncio.ensure_future``, ``wait_for``,
    # ``gather``, ``create_task``) rather than through a wrapper coroutine of its
    # own. That wrapper, cancelled before its first step (``wait_for(x, 0)``),
    # never touched the future: a task in it was left unstarted, and warned about
    # as never awaited. Now asyncio throws the cancel into the future itself.

    def send(self, value: object) -> Any:
        """Go on as a coroutine awaiting this future would: what asyncio calls to step it."""
        if self._state == PENDING:
            bridge = self._await_from_asyncio()
            if not bridge.done():
                bridge._asyncio_future_blocking = True  # as asyncio.Future.__await__ does
                return bridge
        raise StopIteration(self.result())

    def throw(self, typ: Any, val: Any = None, tb: types.TracebackType | None = None) -> Any:
        """Raise ``typ`` out of this future as its coroutine would, cancelling it if nobody waits.

        asyncio throws ``CancelledError`` in when the task driving the future is
        cancelled. A future nothing waits on (one ``wait_for(x, 0)`` timed out
        before it started) is cancelled with it, as the coroutine would be closed;
        a future already done gives its outcome instead.
        """
        error = typ if isinstance(typ, BaseException) else typ() if val is None else val
        if isinstance(error, asyncio.CancelledError):
            if self._state != PENDING:
                # Done already: the cancel comes too late and changes nothing, as
                # for an asyncio future (wait_for(done, 0) returns its result).
                raise StopIteration(self.result())
            self._drop(error.args[0] if error.args else None)
        raise error.with_traceback(tb) if tb is not None else error

    def close(self) -> None:
        """Cancel this future if nothing waits on it, as a coroutine never to run is closed."""
        self._drop(None)

    def _drop(self, msg: str | None) -> None:
        # Only a future nobody waits on: one awaited elsewhere (or whose asyncio
        # waiter was cancelled, which cancelled it already) is left alone.
        if self._state == PENDING and self._waiters is None:
            self.cancel(msg)


class _Gone:
    """The waiter a future keeps when its last one stopped waiting: it hears nothing."""

    __slots__ = ()

    def _on_done(self, fut: Future[Any]) -> None:
        pass


_GONE = _Gone()


def _fail_unread(fut: Future[Any], error: BaseException) -> None:
    """Fail ``fut`` with ``error``; if nothing waits on it, log the error if nothing ever reads it.

    asyncio logs "Task exception was never retrieved" for a failed task or future
    nobody looked at. Here a task started and never awaited, or a loader key
    asked for and never yielded, failed in silence. Waiters are the rule (a
    parent, a gather, an await): only a future that fails with none changes
    class, at no cost to the others, to one that notes any read and logs the
    error if it is collected unread. Cancellation is not an error to report.
    """
    unwatched = fut._waiters is None
    fut._set_exception(error)
    if unwatched and isinstance(error, Exception) and fut._state == FAILED:
        cls = type(fut)
        unread = _UNREAD.get(cls)
        if unread is None:
            # Same name and layout: only the methods that read the outcome differ.
            unread = _UNREAD[cls] = type(cls.__name__, (_Unread, cls), {"__slots__": ()})
        fut.__class__ = unread


class _Unread:
    """Mixin of a failed future nothing has read yet: any read turns it back into its own class."""

    __slots__ = ()

    def __del__(self) -> None:
        error: BaseException = self._value  # type: ignore[attr-defined]
        logging.getLogger("batchy").error(
            "batchy: %r failed with %s and its error was never retrieved: nothing "
            "yielded, awaited or read it. Yield or await every task you start and every "
            "key you ask for (or read it with .exception())",
            self,
            error_text(error),
            exc_info=(type(error), error, error.__traceback__),
        )

    def _read(self) -> Any:
        cls = type(self).__mro__[2]  # (this class, _Unread, the future's own class, ...)
        self.__class__ = cls
        return self

    def _activate(self, sched: Scheduler, scope: Scope | None) -> None:
        self._read()._activate(sched, scope)

    def result(self) -> Any:
        return self._read().result()

    def exception(self) -> BaseException | None:
        return self._read().exception()  # type: ignore[no-any-return]

    def add_done_callback(self, fn: Any, **kwargs: Any) -> None:
        self._read().add_done_callback(fn, **kwargs)

    def __await__(self) -> Generator[Any, None, Any]:
        return self._read().__await__()  # type: ignore[no-any-return]

    def send(self, value: object) -> Any:
        return self._read().send(value)

    def throw(self, typ: Any, val: Any = None, tb: types.TracebackType | None = None) -> Any:
        return self._read().throw(typ, val, tb)


_UNREAD: dict[type, type] = {}


class _Callback:
    __slots__ = ("context", "fn")

    def __init__(self, fn: Callable[[Any], object]) -> None:
        self.fn = fn
        self.context = contextvars.copy_context()

    def _on_done(self, fut: Future[Any]) -> None:
        # A failing user callback must not stop the other waiters from waking.
        try:
            self.context.run(self.fn, fut)
        except Exception:
            logging.getLogger("batchy").exception("batchy: done callback %r failed", self.fn)


class _ToAsyncio:
    """Wakes an asyncio waiter; the waiter reads the outcome from the batchy future."""

    __slots__ = ("bridge",)

    def __init__(self, bridge: asyncio.Future[Any]) -> None:
        self.bridge = bridge

    def _on_done(self, fut: Future[Any]) -> None:
        if not self.bridge.done():
            self.bridge.set_result(None)


def failed(error: BaseException) -> Future[Any]:
    """A future that has already failed with ``error``."""
    fut: Future[Any] = Future()
    fut._set_exception(error)
    return fut


def resolved(value: T) -> Future[T]:
    """A future that already holds ``value``."""
    fut: Future[T] = Future()
    fut._set_result(value)
    return fut


class _FromAsyncio(Future[Any]):
    """Takes the outcome of an asyncio future; cancelling it cancels that future."""

    __slots__ = ("_afut",)

    def __init__(self, afut: asyncio.Future[Any]) -> None:
        super().__init__()
        self._afut = afut
        afut.add_done_callback(self._copy)

    def _copy(self, af: asyncio.Future[Any]) -> None:
        if af.cancelled():
            try:
                af.result()
            except asyncio.CancelledError as cancelled:  # keeps the cancel message
                self._set_exception(cancelled)
        elif (error := af.exception()) is not None:
            self._set_exception(error)
        else:
            self._set_result(af.result())

    def cancel(self, msg: str | None = None) -> bool:
        return self._afut.cancel(msg)


def from_asyncio(afut: asyncio.Future[Any]) -> Future[Any]:
    """A batchy future that takes the outcome of an asyncio future when it is done."""
    return _FromAsyncio(afut)
