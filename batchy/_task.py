"""The task: steps one handler, a generator or a coroutine, through one code path.

Both kinds have ``send`` and ``throw``. A generator handler yields what it waits
on and is sent the result; a coroutine handler awaits, and its ``__await__``
yields the future to us and reads the result itself, so it is sent ``None``.
A task waits on one future at a time (a yielded shape becomes one
:class:`~batchy._gather.Gather`) and is put back on the ready queue by that
future's callback: a blocked task costs nothing until it can go on. The one
exception is the idiom of every handler, ``x, y = yield a(k), b(k)``: a flat
tuple or list of loader futures is waited on directly, the task counting its
pending keys down, so a parallel yield costs about what one single yield does.

Whatever goes wrong with what a handler yields (a plain value, a shape nested
too deep, a task of another event loop, a wait that would close a cycle) is
thrown back into the handler at that yield, so the handler can catch it and
nothing else is disturbed.

A cancel reaches the handler where it waits. One requested while the task runs
its step (the handler cancelling its own task) is noted, and delivered by the
step as soon as it parks the task, as asyncio.Task's ``_must_cancel`` is.

The module is longer than most (about 640 lines): the step, ``cancel`` and the
task's two kinds share one set of slots on the hot path, and ``Task.__new__``
picks the coroutine kind, so splitting it off would make an import cycle.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import types
import warnings
from collections.abc import Callable, Coroutine, Generator
from typing import Any, TypeVar

from . import _gather, _hooks
from ._errors import UsageError, YieldError, short_repr
from ._future import DONE, FAILED, PENDING, Future, _fail_unread, _FromAsyncio, from_asyncio
from ._gather import (
    _LEAF_TYPES,
    _PLAIN,
    FIRST,
    Gather,
    _Awaitable,
    _BadLeaf,
    _combine,
    _cycle_error,
    _state_of,
    _value_of,
    find_cycle,
    flat_gather,
    shape_of,
)
from ._scheduler import Scheduler, _local, scheduler_for
from ._scope import Scope, current_scope

__all__ = ["Handler", "Task"]

T = TypeVar("T")

Handler = Generator[Any, Any, T] | Coroutine[Any, Any, T]


class Task(Future[T]):
    """A running handler; resolves to what the handler returns.

    Made by calling a function decorated with :func:`batchy.task`. Yield it,
    await it, gather it or pass it to :func:`batchy.run`.
    """

    __slots__ = (
        "_cancel",
        "_coro",
        "_ctx",
        "_func",
        "_is_coro",
        "_keys",
        "_remaining",
        "_sched",
        "_scope",
        "_waiting",
    )

    def __new__(
        cls, coro: Handler[T], func: Callable[..., Any] | None = None, is_coro: bool | None = None
    ) -> Task[T]:
        coroutine = is_coro if is_coro is not None else not inspect.isgenerator(coro)
        # async def handlers are asyncio's current task while they run
        return object.__new__(_CoroTask if cls is Task and coroutine else cls)

    def __init__(
        self, coro: Handler[T], func: Callable[..., Any] | None = None, is_coro: bool | None = None
    ) -> None:
        """Wrap a generator or coroutine object; ``func`` names it in errors and traces.

        Usually made by calling a :func:`batchy.task` function; build one directly
        to run a handler object you already have.
        """
        self._state = PENDING
        self._value: Any = None
        self._waiters: Any = None
        self._coro = coro
        self._func = func if func is not None else _code_owner(coro)
        self._is_coro = is_coro if is_coro is not None else not inspect.isgenerator(coro)
        self._sched: Scheduler | None = None
        self._scope: Scope | None = None
        # What the task waits on: one future, or (``x, y = yield a(k), b(k)``)
        # in ``_keys`` the yielded tuple or list of loader futures itself, with
        # ``_remaining`` counting those still pending. No Gather for that idiom.
        self._waiting: Future[Any] | None = None
        self._keys: tuple[Future[Any], ...] | list[Future[Any]] | None = None
        self._remaining = 0
        self._cancel: asyncio.CancelledError | None = None
        if isinstance(self, _CoroTask):
            self._cancel_requests = 0

    @property
    def name(self) -> str:
        """The handler's qualified name."""
        return getattr(self._func, "__qualname__", repr(self._func))

    @property
    def scope(self) -> Scope | None:
        """The scope this task runs in (``None`` until it starts)."""
        return self._scope

    def __repr__(self) -> str:
        state = ("pending", "done", "failed")[self._state]
        return f"<batchy.Task {self.name} {state}>"

    def __del__(self) -> None:
        # A task dropped before anything started it: the handler never ran, which
        # is almost always a forgotten ``yield`` or ``await``. asyncio warns about a
        # coroutine never awaited; a generator handler would end in silence. One
        # attribute test per task here; the rest only for the dropped ones.
        try:
            sched = self._sched
        except AttributeError:  # made but never set up (its handler call raised)
            return
        if sched is None:
            _never_started(self)

    def _location(self) -> str:
        frame = getattr(self._coro, "gi_frame", None) or getattr(self._coro, "cr_frame", None)
        if frame is not None:
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        code = self._func.__code__
        return f"{code.co_filename}:{code.co_firstlineno}"

    def _activate(self, sched: Scheduler, scope: Scope | None) -> None:
        if self._state != PENDING:
            # Finished, perhaps in an earlier batchy.run, or cancelled before it
            # started (its handler is closed): its outcome is here, never start it.
            return
        if self._sched is None:
            self._sched = sched
            # A task started from plain asyncio code outside any scope gets a
            # scope of its own: its subtree shares a cache, nobody else does.
            self._scope = scope if scope is not None else Scope()
            # Its context variables: a copy of its starter's, as asyncio gives a
            # task; a handler's children share their tree's (see Scheduler.run).
            parent = sched.current
            self._ctx = parent._ctx if parent is not None else contextvars.copy_context()
            sched._live += 1
            sched._ready.append(self)  # Scheduler.enqueue, inlined for the hot path
            if not sched._running and not sched._scheduled:
                sched._schedule()
        elif self._sched is not sched:
            raise UsageError(
                f"task {self.name} was started on one event loop and awaited on another "
                "before it finished; create the task on the loop that awaits it"
            )
        elif sched.current is not None:
            # A running task is about to wait on this one, which is running too:
            # make sure this one does not (through others) wait on it already.
            cycle = find_cycle(self, sched.current)
            if cycle is not None:
                raise _cycle_error(cycle)

    def start(self, scope: Scope | None = None) -> Task[T]:
        """Start the task on the running event loop without waiting for it; returns the task.

        As ``asyncio.create_task`` does for a coroutine: the handler runs from the
        scheduler's next step, its loads batching with every other task's. It runs
        in ``scope``, else the current scope (else a scope of its own). Nothing
        waits on it: read its outcome with :meth:`add_done_callback`, or await it
        later (an error nothing ever reads is logged, as asyncio logs one). Call
        it once, from code running on the event loop.
        """
        if self._sched is not None or self._state != PENDING:
            how = "was started already" if self._sched is not None else "was cancelled"
            raise UsageError(
                f"Task.start() on task {self.name}: the task {how}; start a task "
                "once, then await it or add a done callback"
            )
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise UsageError(
                f"Task.start() on task {self.name}: no event loop is running here; "
                "call it from async code, or run the task with batchy.run(...)"
            ) from None
        sched = scheduler_for(loop)
        self._activate(sched, scope if scope is not None else current_scope())
        if sched.current is not None:
            # Started by a running handler: as asyncio.create_task, a copy of its
            # context, not its tree's shared one.
            self._ctx = contextvars.copy_context()
        return self

    def start_eagerly(self) -> None:
        """Start the task in the running handler's scope and step it at once, up to its first wait.

        As asyncio's eager tasks start: a handler that finishes without waiting
        is done when this returns, with no trip through the ready queue (so the
        caller can go on with its value in the same step); one that waits goes
        on as any task. Call it from inside a running batchy handler.
        """
        sched = _local.sched
        parent = sched.current if sched is not None else None
        if sched is None or parent is None or self._sched is not None or self._state != PENDING:
            raise UsageError(
                f"Task.start_eagerly() on task {self.name}: call it once, on a task not "
                "started yet, from inside a running batchy handler"
            )
        # An async def handler is asyncio's current task while it runs; the one
        # current now (an async def parent, say) steps aside until it is done.
        loop = sched.loop
        current = asyncio.current_task(loop) if isinstance(self, _CoroTask) else None
        self._sched = sched
        self._scope = parent._scope
        self._ctx = parent._ctx  # we run in the parent's step: its tree's context
        sched._live += 1
        try:
            if current is not None:
                _leave_task(loop, current)
            self._step()
        except BaseException as error:
            # The step broke before the handler went on (a stack at its limit):
            # the scheduler, which is running, steps it again from its own
            # shallow stack. No Python call here or below: at the limit it
            # would break too.
            if self._state == PENDING and self._waiting is None and self._keys is None:
                sched._ready.append(self)
            if not isinstance(error, Exception):
                raise
        finally:
            sched.current = parent  # steps never nest, except this one: restore it
            if current is not None:
                stray = asyncio.current_task(loop)
                if stray is not None:  # the step broke between entering and leaving
                    _leave_task(loop, stray)
                _enter_task(loop, current)

    def _on_done(self, fut: Future[Any]) -> None:
        remaining = self._remaining
        if remaining > 1:  # waiting on a tuple of futures, and others are pending
            self._remaining = remaining - 1
            return
        self._remaining = 0
        sched: Scheduler = self._sched  # type: ignore[assignment]
        sched._ready.append(self)  # Scheduler.enqueue, inlined for the hot path
        if not sched._running and not sched._scheduled:
            sched._schedule()

    def cancel(self, msg: str | None = None) -> bool:
        """Throw ``asyncio.CancelledError`` into the handler where it waits.

        Returns False if the task has already finished. What the task waits on
        is cancelled too, but only if nothing else waits on it: a child task (or
        a gather's leaf) that another parent shares keeps running for that
        parent, and this task gets its ``CancelledError`` at once. The handler may
        catch the error to clean up, and may yield while it does; that cleanup
        runs to its end. A task that has not started is closed and fails at once.
        A task cancelled while it runs (by its own handler, say) gets the error
        where it next waits, or, if it returns first, ends cancelled: as asyncio.
        """
        if self._state != PENDING:
            return False
        error = asyncio.CancelledError(msg) if msg is not None else asyncio.CancelledError()
        sched = self._sched
        if sched is None:
            self._coro.close()
            self._set_exception(error)
            return True
        sched._cancelled.add(self)
        self._cancel = error
        self._deliver_cancel()
        return True

    def _deliver_cancel(self) -> None:
        """Bring the requested cancel (``_cancel``) to the handler where it waits.

        Called by :meth:`cancel`, and by a step that parks the task while a cancel
        requested during that step is pending: asyncio.Task's ``_must_cancel``.
        Until it parks, a task waits on nothing, and the cancel can only be noted.
        """
        error = self._cancel
        if error is None:
            return
        sched: Scheduler = self._sched  # type: ignore[assignment]
        keys = self._keys
        if keys is not None:
            # Loader futures (a parallel yield): they cannot be cancelled, and
            # other handlers may want their keys. Stop waiting on them, run now.
            if self._remaining:
                for leaf in keys:
                    if leaf._state == PENDING:
                        leaf._remove_waiter(self)
                self._remaining = 0
                self._keys = None
                sched.enqueue(self)
            return  # (otherwise every key is there and the task is queued already)
        fut = self._waiting
        if fut is None:
            # Queued, or running its step right now: the step throws the error
            # in, or hands it on here when it parks. Never queue it twice.
            return
        if fut._waiters is self and fut.cancel(*error.args):  # the message, if any
            # Only we wait on it: its CancelledError reaches the handler instead.
            self._cancel = None
            return
        if fut._state == PENDING:
            # Shared or not cancellable: stop waiting on it (so it cannot wake
            # us twice), leave it to its other waiters, and run now.
            fut._remove_waiter(self)
            self._waiting = None
            sched.enqueue(self)
        # Otherwise the task is already due to run (what it waited on is done and
        # woke it): it sees the error then. Queuing it again would step it twice.

    def _step(self) -> None:
        if self._state != PENDING:
            return  # failed while queued (the scheduler crashed it): never resumed
        fut = self._waiting
        send: Any = None
        throw: BaseException | None = None
        if fut is not None:
            self._waiting = None
            if not self._is_coro:
                if fut._state == DONE:
                    send = fut._value
                else:
                    throw = fut._value
        elif (keys := self._keys) is not None:
            self._keys = None
            # A parallel yield of keys; two of them is the usual case.
            if len(keys) == 2 and keys[0]._state == DONE and keys[1]._state == DONE:
                first, second = keys
                send = (
                    (first._value, second._value)
                    if type(keys) is tuple
                    else [first._value, second._value]
                )
            else:
                send, throw = _outcome_of(keys)
        if self._cancel is not None:
            send = None
            throw, self._cancel = self._cancel, None
        coro = self._coro
        # No save/restore: steps never nest (start_eagerly restores it itself), and
        # the scheduler resets ``current`` before it flushes or returns to the loop.
        self._sched.current = self  # type: ignore[union-attr]
        while True:
            try:
                y = coro.send(send) if throw is None else coro.throw(throw)
            except StopIteration as stop:
                # The finished generator is dropped at once: a big page keeps
                # thousands of tasks alive until its root ends, and the garbage
                # collector's passes cost less with fewer live objects.
                self._coro = None  # type: ignore[assignment]
                if self._cancel is not None:
                    # Cancelled during this step, and returned before it waited
                    # again: as asyncio.Task, the task ends cancelled.
                    error, self._cancel = self._cancel, None
                    self._fail(error)
                    return
                self._state = DONE  # Future._set_result, inlined
                self._value = stop.value
                self._sched._live -= 1  # type: ignore[union-attr]
                waiter = self._waiters
                if waiter is not None:
                    if type(waiter) is Gather:
                        # The usual single waiter, a parent's gather: Gather._on_done,
                        # inlined (this task did not fail: nothing to tell it but that).
                        self._waiters = None
                        remaining = waiter._remaining - 1
                        waiter._remaining = remaining
                        if not remaining:
                            waiter._finish()
                    elif type(waiter) is list:
                        self._wake()
                    else:  # another single waiter (a parent)
                        self._waiters = None
                        waiter._on_done(self)
                return
            except BaseException as error:
                self._fail(error)
                if isinstance(error, (KeyboardInterrupt, SystemExit)):
                    raise  # the process decides, not the scheduler
                return
            try:
                if type(y) is Future:  # a loader's key: nothing to start
                    pass
                elif (kind := type(y)) is tuple or kind is list:
                    if not y and not self._is_coro:
                        # An empty parallel yield (a leaf's children): nothing to
                        # wait for, so nothing to register or count.
                        send = y  # the empty container itself: nothing to copy
                        throw = None
                        continue
                    if not self._is_coro and (
                        (len(y) == 2 and type(y[0]) is Future and type(y[1]) is Future)
                        or _PLAIN.issuperset(map(type, y))
                    ):
                        # ``x, y = yield a(k), b(k)``: the idiom of every handler.
                        # The task waits on the loader futures themselves,
                        # counting them down: no Gather to make, start and resolve.
                        remaining = 0
                        for leaf in y:
                            if leaf._state == PENDING:
                                remaining += 1
                                waiters = leaf._waiters  # Future._add_waiter, inlined
                                if waiters is None:
                                    leaf._waiters = self
                                elif type(waiters) is list:
                                    waiters.append(self)
                                else:
                                    leaf._waiters = [waiters, self]
                        if remaining:
                            self._remaining = remaining
                            self._keys = y
                            if self._cancel is not None:  # cancelled during this step
                                self._deliver_cancel()
                            return
                        # Every key is there already.
                        send, throw = _outcome_of(y)
                        continue
                    fast = flat_gather(y)
                    if fast is None:
                        fast = shape_of(y)
                        fast._activate(self._sched, self._scope)  # type: ignore[arg-type]
                    y = fast
                elif isinstance(y, Future):
                    y._activate(self._sched, self._scope)  # type: ignore[arg-type]
                else:
                    y = self._to_future(y, self._sched)  # type: ignore[arg-type]
                    if y is None:
                        return
            except Exception as error:
                # What was yielded cannot be waited on: the handler gets the
                # error at this yield (and may catch it).
                send = None
                throw = (
                    self._yield_error(error.value, y, error.what)
                    if isinstance(error, _BadLeaf)
                    else error
                )
                continue
            if y._state == PENDING:
                self._waiting = y
                waiters = y._waiters  # Future._add_waiter, inlined
                if waiters is None:
                    y._waiters = self
                elif isinstance(waiters, list):
                    waiters.append(self)
                else:
                    y._waiters = [waiters, self]
                if self._cancel is not None:
                    # Cancelled during this step (by the handler itself, by a
                    # callback or an eager child it ran): now that the task waits,
                    # deliver it as cancel() does. Left noted, it would be seen
                    # only once this wait ends, which may be never.
                    self._deliver_cancel()
                return
            # Already resolved: go on without a trip through the ready queue.
            send = None
            throw = None
            if not self._is_coro:
                if y._state == DONE:
                    send = y._value
                else:
                    throw = y._value

    def _to_future(self, y: Any, sched: Scheduler) -> Future[Any] | None:
        """Turn a yielded non-future into a future to wait on (``None``: wait for the loop).

        Raises ``_BadLeaf`` for a value that cannot be waited on.
        """
        fut: Future[Any]
        if isinstance(y, (list, tuple, dict)):
            fut = shape_of(y)
            fut._activate(sched, self._scope)
            return fut
        if y is None and self._is_coro:
            # A bare yield from asyncio (``await asyncio.sleep(0)``): let the loop run once.
            sched.loop.call_soon(sched.enqueue, self)
            return None
        if getattr(y, "_asyncio_future_blocking", None) is not None:
            y._asyncio_future_blocking = False
            get_loop = getattr(y, "get_loop", None)
            if get_loop is not None and get_loop() is not sched.loop:
                raise self._foreign(y)  # its result would come, if ever, on another loop
            return from_asyncio(y)
        if inspect.isawaitable(y):
            fut = _Awaitable(y)
            fut._activate(sched, self._scope)
            return fut
        raise _BadLeaf(y)

    def _foreign(self, future: Any) -> YieldError:
        return YieldError(
            f"handler {self.name} ({self._location()}) waits on {short_repr(future)}, which "
            "belongs to another event loop than the one running this handler (an earlier "
            "batchy.run's, or another thread's): it would never be woken here. Make the "
            "future in this run, or pass results between loops with "
            "asyncio.run_coroutine_threadsafe()"
        )

    def _yield_error(self, value: Any, yielded: Any, what: str = "") -> YieldError:
        inside = "" if value is yielded else f" inside {short_repr(yielded)}"
        if what:
            hint = "Yield the futures themselves, in a list, tuple or dict of at most a few levels."
            what = f"{what}{inside}"
        else:
            what = f"{short_repr(value)} ({type(value).__name__}){inside}"
            if callable(value):
                hint = "Did you forget to call it?"
            elif value is None:
                hint = "A bare 'yield' waits for nothing: yield a future, or remove it."
            else:
                hint = "To use a plain value, assign it instead of yielding it."
        return YieldError(
            f"handler {self.name} ({self._location()}) yielded {what}; a handler may "
            f"yield a batchy future or task, an asyncio awaitable, or a list / tuple / "
            f"dict of them. {hint}"
        )

    def _fail(self, error: BaseException) -> None:
        # Failed first: should waking its waiters break (a stack at its limit),
        # the task is not stepped or counted down a second time.
        _fail_unread(self, error)
        self._sched._live -= 1  # type: ignore[union-attr]
        if _hooks.hooks:
            _hooks.emit_task_failed(self, error)

    def _crash(self, error: Exception) -> None:
        """The scheduler caught ``error`` escaping a step: fail this task with it."""
        if self._state == PENDING:
            coro, self._coro = self._coro, None  # type: ignore[assignment]
            try:
                if coro is not None:
                    coro.close()
            except Exception:  # the handler's own cleanup failed too: we report the first
                pass
            self._fail(error)
        else:  # it finished, and waking its waiters failed: nobody else to tell
            log.error("batchy: error after task %s finished", self.name, exc_info=error)


log = logging.getLogger("batchy")


def _outcome_of(
    leaves: tuple[Future[Any], ...] | list[Future[Any]],
) -> tuple[Any, BaseException | None]:
    """What a parallel yield of resolved loader futures gives: (values, None) or (None, error).

    As a gather would: the values in the yielded shape, or the first error in
    the order given with the others noted on it.
    """
    if FAILED in map(_state_of, leaves):
        return None, _combine([f._value for f in leaves if f._state == FAILED], FIRST)
    return type(leaves)(map(_value_of, leaves)), None


_new_task = object.__new__

# asyncio's own bookkeeping of the running task (private, present since Python 3.7).
_enter_task: Callable[[Any, Any], None] = asyncio.tasks._enter_task
_leave_task: Callable[[Any, Any], None] = asyncio.tasks._leave_task


class _CoroTask(Task[T]):
    """A task running an ``async def`` handler: asyncio sees it as the current task.

    Code awaited inside the handler may ask asyncio for its task
    (``asyncio.timeout``, ``TaskGroup``, the redis and aiohttp clients). batchy
    steps the coroutine itself, so while it does, it registers this task as the
    loop's current task, and offers the task methods asyncio uses on it:
    ``cancel`` (counted), ``cancelling``, ``uncancel``, ``get_loop``, ``get_coro``;
    and, for anyio's cancel scopes, two of asyncio.Task's private attributes.
    """

    __slots__ = ("_cancel_requests",)

    def _step(self) -> None:
        loop = self._sched.loop  # type: ignore[union-attr]
        try:
            _enter_task(loop, self)
        except (RuntimeError, TypeError):  # another task is current: run as is
            Task._step(self)
            return
        try:
            Task._step(self)
        finally:
            _leave_task(loop, self)

    def cancel(self, msg: str | None = None) -> bool:
        if self._state == PENDING:
            self._cancel_requests += 1
        return Task.cancel(self, msg)

    def cancelling(self) -> int:
        """How many cancellations were requested and not taken back (as asyncio.Task)."""
        return self._cancel_requests

    def uncancel(self) -> int:
        """Take back one cancellation request (as asyncio.Task)."""
        if self._cancel_requests > 0:
            self._cancel_requests -= 1
        return self._cancel_requests

    def get_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the task runs on."""
        return self._sched.loop  # type: ignore[union-attr]

    def get_coro(self) -> Coroutine[Any, Any, T] | None:
        """The handler's coroutine; ``None`` once the task has finished (as asyncio.Task)."""
        return self._coro  # type: ignore[return-value]

    # anyio's asyncio backend delivers a cancel scope's cancellation from a loop
    # callback, which reads these two attributes of asyncio.Task on the task it
    # cancels, every loop iteration until the task leaves the scope. Without them
    # the callback raised AttributeError into asyncio's log and the scope (a
    # ``fail_after`` deadline) never fired. Meanings as in asyncio.Task:

    @property
    def _must_cancel(self) -> bool:
        """A cancel was requested and waits to be thrown in when the task next steps.

        anyio then leaves the task alone: cancelling it again would add nothing.
        """
        return self._cancel is not None

    @property
    def _fut_waiter(self) -> asyncio.Future[Any] | None:
        """The asyncio future the handler waits on; ``None`` if it waits on a batchy one.

        Once that future is done (cancelled by the scope, or woken), anyio waits
        for the task to step rather than cancelling it again; ``None`` makes it
        cancel, which for a batchy future is what :meth:`cancel` handles.
        """
        fut = self._waiting
        return fut._afut if type(fut) is _FromAsyncio else None


_LEAF_TYPES.update((Task, _CoroTask))
_gather._task_type = Task


def _never_started(task: Task[Any]) -> None:
    """Warn that ``task`` is being dropped without having started (see ``Task.__del__``)."""
    if task._state != PENDING:
        return  # cancelled before it started: its end was asked for
    coro, task._coro = task._coro, None  # type: ignore[assignment]
    if coro is None:
        return
    code = getattr(coro, "gi_code", None) or getattr(coro, "cr_code", None)
    if code is None:  # not a generator or coroutine object: nothing to name
        return
    origin = getattr(coro, "cr_origin", None)  # kept for coroutines in asyncio debug mode
    # Our warning replaces Python's own "coroutine ... was never awaited".
    coro.close()
    where = ""
    if origin:
        # Innermost first; the first frame is TaskFunction's generated __call__.
        frames = [f"{f}:{line}" for f, line, _ in origin if not f.startswith("<batchy")]
        where = f", created at {frames[0]}" if frames else ""
    warnings.warn(
        f"batchy task {task.name} (defined at {code.co_filename}:{code.co_firstlineno}"
        f"{where}) was never awaited: it was made and dropped without being started, "
        "so its handler never ran. Await it or yield it where it is made (or gather "
        "it, or call .start() on it)",
        RuntimeWarning,
        stacklevel=3,  # the code that dropped it: __del__ -> here -> that code
        source=task,
    )


def _code_owner(coro: Any) -> Any:
    code = getattr(coro, "gi_code", None) or getattr(coro, "cr_code", None)
    if code is None:
        raise UsageError(
            f"batchy.Task() takes a generator or coroutine object, got {short_repr(coro)} "
            f"({type(coro).__name__}); call the handler function first"
        )
    return types.SimpleNamespace(__qualname__=code.co_qualname, __code__=code)
