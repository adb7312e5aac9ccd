"""The batch: one loader's distinct keys for one round, and the calls that resolve them.

A batch is flushed exactly once, and never empty. Its keys are split into chunks
of ``max_batch_size``, at most ``max_concurrency`` of them in flight at once; an
async (or threaded) call runs as an asyncio task, so the batches of one round
overlap. Every key's future is resolved when its call ends, whatever happens: a
wrong answer or a raise (any ``BaseException``) fails every key of the call, a
key whose lookup in a returned mapping fails fails alone, and failed keys are
evicted from the caches that hold them so a retry can succeed. Nothing here may
raise into the event loop: an unexpected error while finishing a call fails the
keys of that call that are still pending. ``KeyboardInterrupt`` and
``SystemExit`` fail the keys too, then go on up to the caller of ``batchy.run``.

A batch also knows which scopes asked for its keys (its base, ``_stats.Askers``),
for two reasons: a failed key is evicted from the cache of every scope that
holds it, and each call is counted in the :class:`~batchy.ScopeStats` of the
scopes it answered.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import time
import types
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from . import _hooks
from ._errors import LoaderError, MissingKeyError, error_text, short_repr
from ._future import DONE, PENDING, Future, _fail_unread
from ._gather import Gather
from ._stats import Askers
from ._task import Task

if TYPE_CHECKING:
    from ._scheduler import Scheduler
    from ._scope import Scope

# One call of a batch: (index of its first key in the batch, its keys, their
# futures, when it started, the scopes it answers and how many keys each).
_Call = tuple[int, list[Any], list["Future[Any]"], float, dict["Scope", int]]

__all__ = ["Batch", "LoaderSpec"]


class LoaderSpec(Protocol):
    """What a batch reads of its loader; a protocol, so batches sit below the loaders."""

    @property
    def name(self) -> str: ...
    @property
    def fn(self) -> Callable[..., Any]: ...
    @property
    def key_fn(self) -> Callable[[Any], Any] | None: ...
    @property
    def default(self) -> Any: ...
    @property
    def max_batch_size(self) -> int | None: ...
    @property
    def max_concurrency(self) -> int | None: ...
    @property
    def thread(self) -> bool: ...
    @property
    def cache(self) -> bool: ...
    @property
    def _report_unread(self) -> bool: ...


class Batch(Askers):
    """The keys one loader was asked for in one round (and, as :class:`Askers`, who asked)."""

    __slots__ = (
        "_chunks",
        "_ck_of",
        "_round",
        "_running",
        "ctx",
        "futures",
        "keys",
        "loader",
        "sched",
    )

    def __init__(self, loader: LoaderSpec, sched: Scheduler) -> None:
        super().__init__()
        self.loader = loader
        self.sched = sched
        self.keys: list[Any] = []  # distinct keys, as the user passed them
        self.futures: dict[Any, Future[Any]] = {}  # cache key -> future
        self._chunks: list[tuple[int, list[Any], list[Future[Any]]]] = []
        self._running = 0  # chunks whose asyncio future is pending (max_concurrency)
        self._ck_of: dict[int, Any] | None = None  # id(future) -> cache key, made when needed
        self._round = 0
        # The context its calls run in: that of the handler (or plain asyncio code)
        # that asked for its first key, so a batch of one request's keys sees that
        # request's context variables, never a stale one of whoever woke the loop.
        current = sched.current
        self.ctx = current._ctx if current is not None else contextvars.copy_context()

    @property
    def loader_name(self) -> str:
        return self.loader.name

    def __len__(self) -> int:
        return len(self.keys)

    # -- flushing -------------------------------------------------------------------

    def _flush(self, round: int) -> None:
        self._round = round
        keys = self.keys
        if not keys:  # every key was refused before joining: nothing to send
            return
        for scope in self.scopes():
            scope.stats._in_round(self.sched, round)
        futs = list(self.futures.values())
        size = self.loader.max_batch_size or len(keys)
        self._chunks = [
            (i, keys[i : i + size], futs[i : i + size]) for i in range(0, len(keys), size)
        ]
        self._chunks.reverse()  # pop() from the end takes them in order
        self._start_more()

    def _start_more(self) -> None:
        """Start chunks while fewer than ``max_concurrency`` run.

        A loop, not one start per slot: a plain function's chunk finishes (or
        fails) inside ``_start`` and holds no slot, and no callback would start
        the chunks after it.
        """
        limit = self.loader.max_concurrency or len(self._chunks)
        while self._chunks and self._running < limit:
            self._start(*self._chunks.pop())

    def _start(self, first: int, keys: list[Any], futs: list[Future[Any]]) -> None:
        askers = self.askers(first, first + len(keys))
        started = time.perf_counter()
        for scope in askers:
            scope.stats._call_started(started)
        call = (first, keys, futs, started, askers)
        try:
            # A copy of the keys: the function may keep or mutate it.
            out: Any = self.ctx.run(self._call, list(keys))
            if not isinstance(out, asyncio.Future):
                self._finish(call, result=out)
                return
            afut = out
        except BaseException as error:
            # A plain function raised (CancelledError, GeneratorExit and custom
            # BaseExceptions too), or returned an awaitable asyncio refuses.
            self._finish(call, error=error)
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise  # the process decides, not the scheduler
            return
        self.sched.batch_started(afut)
        self._running += 1

        def done(af: asyncio.Future[Any]) -> None:
            # Called by the event loop: it must not raise, and must always count
            # the call finished, or the scheduler would wait for it forever.
            self._running -= 1
            try:
                if af.cancelled():
                    self._finish(call, error=_cancelled(af))
                elif (error_ := af.exception()) is not None:
                    self._finish(call, error=error_)
                else:
                    self._finish(call, result=af.result())
                self._start_more()
            finally:
                self.sched.batch_finished(af)

        afut.add_done_callback(done)

    def _call(self, keys: list[Any]) -> Any:
        """Call the batch function (in :attr:`ctx`): its result, or an asyncio future of it."""
        loader = self.loader
        loop = self.sched.loop
        if loader.thread:
            # A copy for the thread: one Context cannot be entered in two threads.
            return loop.run_in_executor(None, self.ctx.copy().run, loader.fn, keys)
        out = loader.fn(keys)
        if inspect.isawaitable(out):
            # Made here, so its task runs in a copy of this context.
            return asyncio.ensure_future(out, loop=loop)
        return out

    def _finish(self, call: _Call, result: Any = None, error: BaseException | None = None) -> None:
        first, keys, futs, started, askers = call
        ended = time.perf_counter()
        name = self.loader.name
        # Counted before the keys' waiters hear of them, so what they read is current.
        for scope, count in askers.items():
            scope.stats._call_finished(name, count, ended)
        try:
            error = self._resolve(keys, futs, result, error)
        except Exception as failure:
            # A bug of ours, or a user object misbehaving where we did not expect
            # it: whatever is still pending of this call fails, nothing hangs.
            error = self._wrap(keys, failure)
            pending = [fut for fut in futs if fut._state == PENDING]
            for fut in pending:
                self._fail(fut, error)
            self._evict(pending)
        if error is not None:
            for scope in askers:
                scope.stats._call_failed(name)
        if _hooks.hooks:
            _hooks.emit_batch(
                _hooks.BatchEvent(
                    name,
                    tuple(keys),
                    self._round,
                    ended - started,
                    error,
                    first // (self.loader.max_batch_size or len(self.keys)),
                    tuple(askers),
                )
            )

    def _resolve(
        self,
        keys: list[Any],
        futs: list[Future[Any]],
        result: Any,
        error: BaseException | None,
    ) -> BaseException | None:
        """Resolve every future of one call; returns the error that failed them all, if any."""
        if error is None:
            try:
                values = self._values(keys, futs, result)
            except LoaderError as broken:
                error = broken
        else:
            error = self._wrap(keys, error)
        if error is not None:
            for fut in futs:
                self._fail(fut, error)
            self._evict(futs)
            return error
        failed = []
        sched = self.sched
        enqueue = sched._ready.append
        woke = False
        for fut, value in zip(futs, values, strict=True):
            if isinstance(value, _NOT_VALUES):
                # (A coroutine is rare: only then is its key looked up, at a cost.)
                failure = (
                    value
                    if isinstance(value, BaseException)
                    else self._coroutine(keys[futs.index(fut)], value)
                )
                self._fail(fut, failure)
                failed.append(fut)
                continue
            # Future._set_result, inlined: this runs once per key.
            fut._state = DONE
            fut._value = value
            waiter = fut._waiters
            if waiter is not None:
                fut._waiters = None
                if type(waiter) is Task and waiter._sched is sched:
                    # The usual single waiter, a handler: Task._on_done, inlined
                    # (a handler waiting on several keys counts them down).
                    remaining = waiter._remaining
                    if remaining > 1:
                        waiter._remaining = remaining - 1
                    else:
                        waiter._remaining = 0
                        enqueue(waiter)
                        woke = True
                elif type(waiter) is Gather:
                    # A parallel yield: Gather._on_done, inlined (this key did not fail).
                    remaining = waiter._remaining - 1
                    waiter._remaining = remaining
                    if not remaining:
                        waiter._finish()
                elif type(waiter) is list:
                    for each in waiter:  # Future._wake, inlined (its list is taken already)
                        each._on_done(fut)
                else:
                    waiter._on_done(fut)  # type: ignore[union-attr]
        if woke and not sched._running and not sched._scheduled:
            sched._schedule()  # once for all the handlers woken above
        if failed:
            self._evict(failed)
        return None

    def _fail(self, fut: Future[Any], error: BaseException) -> None:
        """Fail one key; if nothing waits on it, its error is logged should nothing read it."""
        if self.loader._report_unread:
            _fail_unread(fut, error)
        else:  # a DataLoader's own futures: its loads, not these, are what code holds
            fut._set_exception(error)

    def _coroutine(self, key: Any, value: types.CoroutineType[Any, Any, Any]) -> LoaderError:
        """What fails ``key``, whose value was a coroutine never awaited."""
        value.close()  # (no "never awaited" warning, far from its cause)
        return LoaderError(
            f"loader {self.loader.name!r} returned a coroutine ({value.__qualname__}) as the "
            f"value of key {short_repr(key)}, not awaited; await them in the batch "
            "function: return await asyncio.gather(*(fetch(k) for k in keys))",
            loader=self.loader.name,
            keys=[key],
        )

    def _evict(self, futs: list[Future[Any]]) -> None:
        if not self.loader.cache:
            return
        caches = [c for c in (s._caches.get(self.loader) for s in self.scopes()) if c]
        if not caches:
            return
        gone = {id(f) for f in futs}
        for ck, fut in self.futures.items():
            if id(fut) in gone:
                for cache in caches:
                    if cache.get(ck) is fut:
                        del cache[ck]

    # -- checking what came back ----------------------------------------------------

    def _values(self, keys: list[Any], futs: list[Future[Any]], result: Any) -> list[Any]:
        name = self.loader.name
        if isinstance(result, Mapping):
            return self._from_mapping(keys, futs, result)
        if isinstance(result, Sequence) and not isinstance(result, (str, bytes)):
            if len(result) != len(keys):
                raise LoaderError(
                    f"loader {name!r} returned {len(result)} values for {len(keys)} keys. "
                    f"A batch function must return one value per key, in the order of the "
                    f"keys (or a dict keyed by key). Keys: {short_repr(keys)}; returned: "
                    f"{short_repr(list(result))}. For keys with no data, put None (or an "
                    "exception) in their place.",
                    loader=name,
                    keys=keys,
                )
            return list(result)
        if inspect.iscoroutine(result):  # only a thread's call gets here: see _call
            result.close()
            raise LoaderError(
                f"loader {name!r} runs in a thread (thread=True), but its batch function "
                f"returned a coroutine ({result.__qualname__}): an async def batch function "
                "runs on the event loop; drop thread=True",
                loader=name,
                keys=keys,
            )
        raise LoaderError(
            f"loader {name!r} returned {short_repr(result)} ({type(result).__name__}) for "
            f"keys {short_repr(keys)}; a batch function must return a list with one value "
            "per key, in the order of the keys, or a dict mapping each key to its value. "
            "Did you forget a return statement?",
            loader=name,
            keys=keys,
        )

    def _from_mapping(
        self, keys: list[Any], futs: list[Future[Any]], result: Mapping[Any, Any]
    ) -> list[Any]:
        """Each key's value in a returned mapping, keyed by the key or by its cache key."""
        default = self.loader.default
        by_ck = self.loader.key_fn is not None
        values = []
        for key, fut in zip(keys, futs, strict=True):
            try:
                try:
                    values.append(result[key])
                    continue
                except (KeyError, TypeError):
                    if not by_ck:
                        raise
                # With key= (say key=tuple for list keys) the dict is often keyed
                # by cache key, the only hashable form of the key.
                ck_of = self._ck_of
                if ck_of is None:
                    ck_of = self._ck_of = {id(f): ck for ck, f in self.futures.items()}
                values.append(result[ck_of[id(fut)]])
            except KeyError:
                values.append(default if default is not _NO_DEFAULT else self._missing(key, result))
            except Exception as error:
                values.append(self._lookup_failed(key, error))
        return values

    def _missing(self, key: Any, result: Mapping[Any, Any]) -> MissingKeyError:
        name = self.loader.name
        try:
            some = short_repr(list(result)[:10])
        except Exception as error:
            some = f"that cannot be listed ({error_text(error)})"
        return MissingKeyError(
            f"loader {name!r} returned a dict with no entry for key {short_repr(key)} "
            f"(it has keys {some}); return a value for every key, "
            f"or give the loader a default: @batched(default=None).",
            loader=name,
            key=key,
        )

    def _lookup_failed(self, key: Any, error: Exception) -> LoaderError:
        name = self.loader.name
        failure = LoaderError(
            f"loader {name!r} returned a dict, and looking up key {short_repr(key)} in it "
            f"raised {error_text(error)}; key the dict by the keys the function got (or, "
            "with key=, by their cache keys)",
            loader=name,
            keys=[key],
        )
        failure.__cause__ = error
        return failure

    def _wrap(self, keys: list[Any], error: BaseException) -> BaseException:
        if isinstance(error, (LoaderError, asyncio.CancelledError)):
            return error
        name = self.loader.name
        wrapped = LoaderError(
            f"loader {name!r} raised {error_text(error)} while loading keys {short_repr(keys)}",
            loader=name,
            keys=keys,
        )
        wrapped.__cause__ = error
        return wrapped


class _NoDefault:
    def __repr__(self) -> str:
        return "<no default>"


_NO_DEFAULT: Any = _NoDefault()


def _cancelled(af: asyncio.Future[Any]) -> asyncio.CancelledError:
    """The error a cancelled future raises, with its message (``cancel(msg)``)."""
    try:
        af.result()
    except asyncio.CancelledError as error:
        return error
    return asyncio.CancelledError()  # (not reached: the future was cancelled)


# A batch function's values that fail their key: exceptions, and coroutines
# (values of ``[fetch(k) for k in keys]``, the gather forgotten).
_NOT_VALUES = (BaseException, types.CoroutineType)
