"""The scheduler: runs ready handlers and, when none can go on, flushes every pending batch at once.

There is one scheduler per event loop.

It knows two small protocols and nothing else: a *runnable* (a task) has
``_step()``, and a *batch* has ``_flush(round)``. Tasks put themselves on the
ready queue when a future they wait on is resolved (by callback: nothing is ever
re-walked), and loaders open one batch per loader per round here.

When a round ends
-----------------
A round ends when the ready queue is empty *and* the event loop has nothing else
ready to run. The second condition matters because handlers also run as plain
asyncio tasks (a GraphQL resolver awaiting a loader): they reach the loader only
after some loop iterations, and flushing before them would split the batch. So
when the loop still has ready callbacks we step aside for one iteration
(``call_soon``) and look again. Under a loop that is never idle we flush anyway
after ``max_defer`` iterations, so a busy server trades a little batch size for
bounded latency. There is no timer: an idle loop flushes at once.

Batches in flight do not block a round: when a fast batch finishes, its waiters
run and their new keys are flushed while a slow batch is still running.

What may never escape
---------------------
``run`` is called by the event loop. An exception escaping it would go to
asyncio's "Exception in callback" log, and every task still on the ready queue,
and every batch of the round, would wait forever. Tasks and batches resolve
their own errors; should one still raise here, the task that raised fails with
that error (waking its waiters) and the loop goes on. Only ``KeyboardInterrupt``
and ``SystemExit`` leave, as they do from asyncio, and the batches of the round
not flushed yet stay open for the next one.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import weakref
from collections import deque
from typing import Any, Protocol

from . import _hooks
from ._errors import UsageError

__all__ = ["Scheduler", "current_scheduler", "scheduler_for"]


class Runnable(Protocol):
    _ctx: contextvars.Context  # set when it starts, before it is first queued

    def _step(self) -> None: ...

    def _crash(self, error: Exception) -> None: ...


class Batch(Protocol):
    loader: Any

    @property
    def loader_name(self) -> str: ...

    def __len__(self) -> int: ...

    def scopes(self) -> list[Any]: ...

    def _flush(self, round: int) -> None: ...


class _Local(threading.local):
    sched: Scheduler | None = None


_local = _Local()
_schedulers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Scheduler] = (
    weakref.WeakKeyDictionary()
)


def current_scheduler() -> Scheduler | None:
    """The scheduler whose ready queue is being run on this thread right now, if any."""
    return _local.sched


def scheduler_for(loop: asyncio.AbstractEventLoop) -> Scheduler:
    """The scheduler of ``loop``, created on first use."""
    sched = _schedulers.get(loop)
    if sched is None:
        sched = _schedulers[loop] = Scheduler(loop)
    return sched


class Scheduler:
    """Ready queue, open batches and rounds of one event loop."""

    #: Loop iterations a flush may wait for other asyncio work to block.
    max_defer = 64

    __slots__ = (
        "__weakref__",
        "_cancelled",
        "_deferred",
        "_handle",
        "_inflight",
        "_live",
        "_loop_ref",
        "_open",
        "_ready",
        "_running",
        "_scheduled",
        "current",
        "round",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # A weak reference: the registry maps loops to schedulers weakly, and a
        # strong one here would keep every loop (and its scheduler) alive forever.
        self._loop_ref = weakref.ref(loop)
        self._ready: deque[Runnable] = deque()
        # loader -> its batch for the next round; a dict keeps flush order stable.
        self._open: dict[object, Batch] = {}
        self._running = False
        self._scheduled = False
        self._deferred = 0
        # Our queued wake-up, if any, held weakly: a handle refers to its loop, and a
        # strong one here would keep a closed loop (and this scheduler) alive.
        self._handle: weakref.ref[asyncio.Handle] | None = None
        self._inflight: set[asyncio.Future[Any]] = set()  # batch calls running
        # Tasks started and not finished. Counted, not kept: batchy.run looks for
        # the tasks themselves only when this is not 0 at its end (rare), so the
        # hot path pays one integer update per task.
        self._live = 0
        # Tasks cancelled while running: at the end of a run they are waited for,
        # not cancelled again (their cleanup may still be yielding).
        self._cancelled: weakref.WeakSet[Any] = weakref.WeakSet()
        self.current: Any = None  # the task being stepped, read by loaders and futures
        self.round = 0

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop this scheduler runs on."""
        loop = self._loop_ref()
        if loop is None:  # only if a future outlives its loop and is awaited elsewhere
            raise UsageError(
                "a batchy scheduler was used after its event loop was closed and collected; "
                "create tasks and futures on the loop that runs them"
            )
        return loop

    # -- called by tasks and loaders ------------------------------------------------

    def enqueue(self, runnable: Runnable) -> None:
        """Make ``runnable`` run soon; wakes the scheduler if it is idle."""
        self._ready.append(runnable)
        if not self._running and not self._scheduled:
            self._schedule()

    def open_batch(self, loader: object) -> Batch | None:
        return self._open.get(loader)

    def add_batch(self, loader: object, batch: Batch) -> None:
        self._open[loader] = batch
        if not self._running and not self._scheduled:
            self._schedule()

    def batch_started(self, call: asyncio.Future[Any]) -> None:
        # Held here until it ends: asyncio keeps only weak references to tasks, and
        # a call awaiting something only its own frame holds would be collected
        # mid-flight, its keys left waiting forever.
        self._inflight.add(call)

    def batch_finished(self, call: asyncio.Future[Any]) -> None:
        """A batch call finished and resolved its futures: run what it woke, now."""
        self._inflight.discard(call)
        if not self._running:
            self.run()

    def has_work(self) -> bool:
        """True while anything is ready, pending or in flight on this scheduler."""
        return bool(self._ready or self._open or self._inflight)

    # -- the loop -------------------------------------------------------------------

    def _schedule(self) -> None:
        self._scheduled = True
        self._handle = weakref.ref(self.loop.call_soon(self.run))

    def _loop_busy(self) -> bool:
        # CPython's loop keeps its ready callbacks in ``_ready``; other loops
        # (uvloop) do not expose it, and there one extra iteration is the best guess.
        ready = getattr(self.loop, "_ready", None)
        if ready is None:
            return self._deferred < 1
        # Our own wake-up, cancelled by run(), is not other work.
        return any(not handle.cancelled() for handle in ready)

    def run(self) -> None:
        """Step ready tasks until none is left, flushing a round whenever all are blocked."""
        ref, self._handle = self._handle, None
        handle = ref() if ref is not None else None
        if handle is not None:
            # Entered directly (batch_finished) while a wake-up is queued: drop it,
            # or _loop_busy takes it for other work and defers up to max_defer times.
            handle.cancel()
        self._scheduled = False
        if self._running:
            return
        self._running = True
        outer = _local.sched
        _local.sched = self
        ready = self._ready
        try:
            while True:
                while ready:
                    # Each task runs in its tree's context: the context variables
                    # of the request or job that started it, not of whoever woke
                    # the scheduler. One Context.run per stretch of the queue.
                    ctx = ready[0]._ctx
                    ctx.run(self._step_all, ctx)
                self.current = None
                if not self._open:
                    self._deferred = 0
                    return
                if self._deferred < self.max_defer and self._loop_busy():
                    self._deferred += 1
                    self._schedule()
                    return
                self._deferred = 0
                # In the context that woke the scheduler, not an empty one: libraries
                # such as asgiref find their per-loop state there (Django's thread).
                self._flush()
        finally:
            self.current = None
            _local.sched = outer
            self._running = False

    def _step_all(self, ctx: contextvars.Context) -> None:
        """Step the ready tasks at the head of the queue whose context is ``ctx``."""
        ready = self._ready
        while ready and ready[0]._ctx is ctx:
            runnable = ready.popleft()
            try:
                runnable._step()
            except Exception as error:  # see "What may never escape"
                runnable._crash(error)

    def _flush(self) -> None:
        batches = list(self._open.values())
        self._open.clear()
        self.round += 1
        if _hooks.hooks:
            _hooks.emit_round(
                _hooks.RoundEvent(
                    self.round,
                    tuple(b.loader_name for b in batches),
                    sum(len(b) for b in batches),
                    tuple(dict.fromkeys(s for b in batches for s in b.scopes())),
                )
            )
        for i, batch in enumerate(batches):
            try:
                batch._flush(self.round)
            except BaseException:
                # KeyboardInterrupt or SystemExit from a plain batch function (its
                # keys are failed already): the rest of the round stays open.
                for rest in batches[i + 1 :]:
                    self._open.setdefault(rest.loader, rest)
                raise
