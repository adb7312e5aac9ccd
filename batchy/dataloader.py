"""The DataLoader: the graphql/dataloader contract (aiodataloader, strawberry) on batchy's rounds.

People who come from aiodataloader or strawberry keep their loaders and their
habits: ``loader.load(key)``, ``load_many``, ``prime``, ``clear``,
``clear_all``, options ``max_batch_size``, ``cache``, ``cache_key_fn`` and
``cache_map``. What changes is *when* a batch is sent. Those libraries send it
from ``loop.call_soon`` one loop iteration after the first load, so a load made
two hops later starts a second batch. Here every load files its key in a batchy
loader, and the batch goes out when batchy's scheduler sees that nothing else
can run: resolvers that take more loop hops still land in the same batch, and
the loads of a DataLoader join the same rounds as every ``@batchy.batched``
loader and handler.

This module is built on batchy's public API and on the waiter protocol of
:class:`batchy.Future` (a future wakes each waiter's ``_on_done`` when it is
resolved; its ``_fail_unread`` fails one nothing waits on so that its error is
logged if it is collected unread): each DataLoader owns one uncached
:func:`batchy.batched` loader (which removes duplicate keys within a batch) and
keeps its own cache, because in the DataLoader contract the cache belongs to
the loader instance (one instance per request), not to a scope.

What ``load()`` returns
-----------------------
Code written for aiodataloader treats what ``load()`` returns as an
``asyncio.Future``, so each call returns a :class:`LoadFuture` of its own: a
:class:`batchy.Future` (``await`` it from asyncio code, yield or await it in a
batchy handler) that also has the ``asyncio.Future`` API: ``cancel(msg=None)``,
``cancelled()``, ``done()``, ``result()``, ``exception()``,
``add_done_callback(fn, *, context=None)``, ``remove_done_callback(fn)``,
``set_result()``, ``set_exception()`` and ``get_loop()``.

The value of a key is one shared future (the one in the cache and in the batch);
every load follows it. Cancelling a load (``load.cancel()``, or cancelling the
asyncio task or batchy handler that awaits it), or resolving it from outside
with ``set_result()`` / ``set_exception()``, detaches that load only: the key
stays in its batch, the batch function still gets it, the other loads of the
key and the cache still get the batch function's value, and when the batch
returns the detached load is simply skipped (never an ``InvalidStateError``,
never a broken batch). As with asyncio, ``cancel()`` of a load that is done
returns False, ``set_result()`` / ``set_exception()`` of one raise
:class:`InvalidStateError` (an ``asyncio.InvalidStateError``), and so do
``result()`` / ``exception()`` of a pending one. Unlike asyncio, done callbacks
run as soon as the load is done (at once if it already is), not one loop
iteration later; an error in one is logged, not raised. ``load_many()`` returns
a :class:`batchy.Future` over the keys' shared futures: cancelling it fails it
and leaves the keys alone. A load that fails with nothing waiting on it (never
awaited) logs its error if it is collected unread, as asyncio logs "Future
exception was never retrieved".

The contract, as graphql/dataloader documents it:

- the batch function gets a list of distinct keys and returns one value per key,
  in the same order (a list, or an awaitable of one);
- a value that is an ``Exception`` fails only its key, and stays cached (so a
  missing row is not fetched again and again); ``clear(key)`` forgets it;
- a batch function that raises, or returns the wrong number of values, fails
  every key of the batch, and those keys are cleared from the cache so a retry
  can succeed.

::

    from batchy import DataLoader

    async def load_users(ids):
        rows = await db.fetch_users(ids)
        by_id = {row.id: row for row in rows}
        return [by_id.get(i) for i in ids]

    users = DataLoader(load_users)          # one per request, like any DataLoader
    user = await users.load(1)              # or: yield users.load(1) in a handler
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

# Only names batchy exports (this module is a layer above the engine), taken from
# their modules because the package itself imports this one.
from ._errors import InvalidKeyError, LoaderError, UsageError, short_repr
from ._future import Future, failed, resolved
from ._gather import gather
from ._loader import Loader, batched
from ._scope import Scope

__all__ = ["DataLoader", "InvalidKeyError", "InvalidStateError", "LoadFuture"]

K = TypeVar("K")
V = TypeVar("V")

LoadFn = Callable[[list[K]], Awaitable[Sequence[V | BaseException]] | Sequence[V | BaseException]]


class InvalidStateError(UsageError, asyncio.InvalidStateError):
    """A load was resolved twice, or read before it was done (an ``asyncio.InvalidStateError``)."""


_STOP = "StopIteration interacts badly with generators and cannot be raised into a Future"


@functools.cache
def _asyncio_wraps_stop_iteration() -> bool:
    """Whether this Python's asyncio sets a StopIteration as a RuntimeError (3.13+; before,
    it raised TypeError). Asked of asyncio itself: its C and Python futures agree, and a
    patch release could change it."""
    loop = asyncio.new_event_loop()
    try:
        probe = loop.create_future()
        try:
            probe.set_exception(StopIteration())
        except TypeError:
            return False
        probe.exception()  # read, so its collection logs nothing
        return True
    finally:
        loop.close()


def _stop_iteration(error: StopIteration) -> BaseException:
    """What a load is failed with, given a StopIteration: asyncio's answer, either way.

    A StopIteration raised into a generator handler would end it as if it returned."""
    if _asyncio_wraps_stop_iteration():
        wrapped = RuntimeError(_STOP)
        wrapped.__cause__ = wrapped.__context__ = error
        return wrapped
    if type(error) is StopIteration:
        raise TypeError(_STOP)
    return error  # a subclass: asyncio lets it through before 3.13


_log = logging.getLogger("batchy")
_new = object.__new__

# A load follows its key's shared future through the waiter protocol every
# batchy.Future has (``_add_waiter`` / ``_remove_waiter`` / ``_on_done``), and
# reads its state; the state values are taken from futures, not hard-coded.
_PENDING: int = Future()._state
_DONE: int = resolved(None)._state
_FAILED: int = failed(Exception())._state


class LoadFuture(Future[V]):
    """What :meth:`DataLoader.load` returns: one load of one key, with the ``asyncio.Future`` API.

    It follows the key's shared future (the one in the loader's cache and batch)
    and takes its outcome when the batch returns. Cancelling it or resolving it
    from outside (``set_result`` / ``set_exception``) stops it following: other
    loads of the key, the cache and the batch are not affected, and the batch
    skips it when it returns. Like any :class:`batchy.Future` it can be awaited
    from asyncio code, or yielded or awaited in a batchy handler.
    """

    __slots__ = ("_key", "_owner", "_shared")

    _owner: DataLoader[Any, Any]
    _key: Any
    _shared: Future[Any] | None

    def __init__(self, owner: DataLoader[Any, V], key: Any, shared: Future[V]) -> None:
        """A load of ``key`` by ``owner`` following ``shared`` (what ``owner.load(key)`` makes)."""
        super().__init__()
        self._owner = owner
        self._key = key
        self._shared = None
        if shared.done():
            self._on_done(shared)
        else:
            self._shared = shared
            shared._add_waiter(self)

    def __repr__(self) -> str:
        key = short_repr(self._key)
        return f"<LoadFuture {self._owner.name!r} key={key} {self._state_name()}>"

    def _state_name(self) -> str:
        if self._state == _PENDING:
            return "pending"
        if self._state == _DONE:
            return "done"
        return "cancelled" if self.cancelled() else "failed"

    def _invalid(self, what: str) -> InvalidStateError:
        return InvalidStateError(
            f"DataLoader {self._owner.name!r}: {what} on the load of key "
            f"{short_repr(self._key)}, which is already {self._state_name()}; a load is "
            "resolved once. Check load.done() before resolving it from outside."
        )

    def _not_done(self, what: str) -> InvalidStateError:
        return InvalidStateError(
            f"DataLoader {self._owner.name!r}: {what} of the load of key "
            f"{short_repr(self._key)} is not set yet; await the load (or yield it in a "
            "batchy handler), or check load.done() first."
        )

    # -- following the shared future --------------------------------------------------

    def _on_done(self, fut: Future[Any]) -> None:
        # The key's shared future is resolved. A load cancelled or resolved from
        # outside has detached itself already; the check covers a load detached
        # while the shared future was waking its waiters.
        self._shared = None
        if self._state == _PENDING:
            if fut._state == _FAILED and self._waiters is None:
                # Nothing waits on this load (never awaited): its error is logged if
                # it is collected unread, as asyncio does for an aiodataloader load.
                self._fail_unread(fut._value)
                return
            # Future._copy_from and _wake, inlined: this runs once per load.
            self._state = fut._state
            self._value = fut._value
            waiters = self._waiters
            if waiters is not None:
                if isinstance(waiters, list):
                    self._wake()
                else:  # the usual single waiter (a handler, a gather, an await)
                    self._waiters = None
                    waiters._on_done(self)

    def _detach(self) -> None:
        shared = self._shared
        if shared is not None:
            self._shared = None
            shared._remove_waiter(self)

    def _activate(self, sched: Any, scope: Scope | None) -> None:
        # A load made before any loop ran follows a lazy future: start it now.
        shared = self._shared
        if shared is not None and type(shared) is not Future:
            shared._activate(sched, scope)

    # -- the asyncio.Future API ---------------------------------------------------------

    def result(self) -> V:
        """The value; raises the load's error (``CancelledError`` if it was cancelled).

        Raises :class:`InvalidStateError` if the load is not done yet.
        """
        state = self._state
        if state == _DONE:
            return self._value  # type: ignore[no-any-return]
        if state == _FAILED:
            raise self._value
        raise self._not_done("the result")

    def exception(self) -> BaseException | None:
        """The load's error, or ``None`` if it has a value.

        Raises ``CancelledError`` if the load was cancelled, and
        :class:`InvalidStateError` if it is not done yet.
        """
        state = self._state
        if state == _DONE:
            return None
        if state == _PENDING:
            raise self._not_done("the exception")
        error: BaseException = self._value
        if isinstance(error, asyncio.CancelledError):
            raise error
        return error

    def cancelled(self) -> bool:
        """True if the load was cancelled: by :meth:`cancel`, by cancelling what awaits
        it, or because its batch call was cancelled (or failed it with ``CancelledError``)."""
        return self._state == _FAILED and isinstance(self._value, asyncio.CancelledError)

    def cancel(self, msg: str | None = None) -> bool:
        """Cancel this load only: True if it was pending, False if it was already done.

        Its waiters get ``asyncio.CancelledError``. Other loads of the key, the
        cache and the batch are not affected: the batch still loads the key.
        """
        if self._state != _PENDING:
            return False
        self._detach()
        self._set_exception(
            asyncio.CancelledError(msg) if msg is not None else asyncio.CancelledError()
        )
        return True

    def set_result(self, result: V) -> None:
        """Resolve this load from outside; the batch then skips it.

        Other loads of the key and the cache still get the batch function's
        value. Raises :class:`InvalidStateError` if the load is already done.
        """
        if self._state != _PENDING:
            raise self._invalid("set_result()")
        self._detach()
        self._set_result(result)

    def set_exception(self, exception: BaseException | type[BaseException]) -> None:
        """Fail this load from outside; the batch then skips it.

        An exception class is instantiated. A ``StopIteration`` is handled as this
        Python's asyncio handles it: refused with a ``TypeError`` (3.11, 3.12), or
        set as a ``RuntimeError`` caused by it (3.13+). Raises
        :class:`InvalidStateError` if the load is already done.
        """
        if self._state != _PENDING:
            raise self._invalid("set_exception()")
        error = exception() if isinstance(exception, type) else exception
        if isinstance(error, StopIteration):
            error = _stop_iteration(error)
        self._detach()
        self._set_exception(error)

    def add_done_callback(
        self, fn: Callable[[LoadFuture[V]], object], *, context: contextvars.Context | None = None
    ) -> None:
        """Call ``fn(load)`` in ``context`` (default: the current one) when the load is done.

        At once if it is done already (asyncio would wait one loop iteration).
        An error raised by ``fn`` is logged, not raised.
        """
        callback = _DoneCallback(fn, context if context is not None else contextvars.copy_context())
        if self._state != _PENDING:
            callback._on_done(self)
        else:
            self._add_waiter(callback)

    def remove_done_callback(self, fn: Callable[[LoadFuture[V]], object]) -> int:
        """Remove every pending ``fn`` callback; returns how many were removed."""
        waiters = self._waiters
        if waiters is None:
            return 0
        if not isinstance(waiters, list):
            if type(waiters) is _DoneCallback and waiters.fn == fn:
                self._waiters = None
                return 1
            return 0
        keep = [w for w in waiters if not (type(w) is _DoneCallback and w.fn == fn)]
        removed = len(waiters) - len(keep)
        if removed:
            self._waiters = keep or None
        return removed

    def get_loop(self) -> asyncio.AbstractEventLoop:
        """The running event loop: a load's batch runs on the loop that waits for it.

        A load keeps no loop of its own (one made before any loop runs joins the
        loop that first waits on it), so outside a running loop this raises
        ``RuntimeError``, as ``asyncio.get_running_loop()`` does.
        """
        return asyncio.get_running_loop()


class _DoneCallback:
    """A done callback of a load, run in its context; its errors are logged, as asyncio does."""

    __slots__ = ("context", "fn")

    def __init__(self, fn: Callable[[Any], object], context: contextvars.Context) -> None:
        self.fn = fn
        self.context = context

    def _on_done(self, fut: Future[Any]) -> None:
        try:
            self.context.run(self.fn, fut)
        except Exception:
            _log.exception("batchy: done callback %r of %r failed", self.fn, fut)


class _DictCache:
    """The cache-map protocol (get / set / delete / clear) over a plain dict-like object.

    aiodataloader takes a ``dict``-like ``cache_map``; graphql/dataloader and
    strawberry take an object with ``get``, ``set``, ``delete`` and ``clear``.
    Both work: this adapter gives the first the methods of the second.
    """

    __slots__ = ("map",)

    def __init__(self, mapping: Any) -> None:
        self.map = mapping

    def get(self, key: Any) -> Any:
        return self.map.get(key)

    def set(self, key: Any, value: Any) -> None:
        self.map[key] = value

    def delete(self, key: Any) -> None:
        self.map.pop(key, None)

    def clear(self) -> None:
        self.map.clear()


def _cache_adapter(cache_map: Any) -> Any:
    if cache_map is None:
        return _DictCache({})
    if all(callable(getattr(cache_map, m, None)) for m in ("get", "set", "delete", "clear")):
        return cache_map
    if all(callable(getattr(cache_map, m, None)) for m in ("get", "__setitem__", "pop", "clear")):
        return _DictCache(cache_map)
    raise UsageError(
        f"DataLoader cache_map= must be a dict-like object (get, __setitem__, pop, clear) "
        f"or a cache with get / set / delete / clear methods; got {short_repr(cache_map)} "
        f"({type(cache_map).__name__}). Pass a dict, or leave cache_map out."
    )


class DataLoader(Generic[K, V]):
    """A DataLoader whose batches are sent in batchy's rounds.

    ``DataLoader(batch_load_fn, *, batch=True, max_batch_size=None, cache=True,
    cache_key_fn=None, cache_map=None, name=None)``. The batch function may be a
    plain function or ``async def``; subclasses may define a ``batch_load_fn``
    method instead of passing one (as with aiodataloader). The keyword names of
    aiodataloader (``get_cache_key``) and strawberry (``load_fn``) are accepted
    too, and ``loop=`` is ignored: batchy uses the running loop.

    ``load`` returns a :class:`LoadFuture` of its own on every call: a
    :class:`batchy.Future` (``await`` it from asyncio code, yield or await it
    inside a batchy handler) with the ``asyncio.Future`` API as well: ``cancel``,
    ``cancelled``, ``done``, ``result``, ``exception``, ``add_done_callback``,
    ``remove_done_callback``, ``set_result``, ``set_exception``, ``get_loop``.
    A load cancelled, or resolved from outside, before its batch returns is
    skipped when the batch resolves; the key is still loaded for the cache and
    for its other loads, which a cancelled load never cancels. Resolving a load
    that is done, or reading one that is pending, raises
    :class:`InvalidStateError`.
    """

    def __init__(
        self,
        batch_load_fn: LoadFn[K, V] | None = None,
        *,
        batch: bool = True,
        max_batch_size: int | None = None,
        cache: bool = True,
        cache_key_fn: Callable[[K], Hashable] | None = None,
        cache_map: Any = None,
        name: str | None = None,
        load_fn: LoadFn[K, V] | None = None,
        get_cache_key: Callable[[K], Hashable] | None = None,
        loop: object = None,
    ) -> None:
        fn = batch_load_fn if batch_load_fn is not None else load_fn
        if fn is None:
            fn = getattr(self, "batch_load_fn", None)
        if not callable(fn):
            raise UsageError(
                "DataLoader needs a batch function that takes a list of keys and returns a "
                f"list of values (or an awaitable of one); got {short_repr(fn)}. Pass it as "
                "DataLoader(load_users), or define a batch_load_fn method in a subclass."
            )
        if max_batch_size is not None and (type(max_batch_size) is not int or max_batch_size < 1):
            raise UsageError(
                f"DataLoader max_batch_size= must be a positive int or None, got "
                f"{short_repr(max_batch_size)}; use None for no limit"
            )
        self.batch_load_fn: LoadFn[K, V] = fn
        self.name: str = name or getattr(fn, "__qualname__", None) or type(self).__name__
        self.max_batch_size = 1 if not batch else max_batch_size
        self.cache = cache
        self.cache_key_fn = cache_key_fn if cache_key_fn is not None else get_cache_key
        self.cache_map: Any = _cache_adapter(cache_map) if cache else None
        # Duplicate keys of one batch are sent once even with the cache off; the
        # batchy loader removes them by cache key, so unhashable keys work too.
        make: Callable[[Any], Loader[K, V]] = batched(
            name=self.name, cache=False, max_batch_size=self.max_batch_size, key=self.cache_key_fn
        )
        self._loader = make(self._dispatch)
        # Its futures are ours, followed by the loads we hand out: one whose loads
        # were all cancelled is nobody's error to report.
        self._loader._report_unread = False

    def __repr__(self) -> str:
        return f"<batchy.DataLoader {self.name}>"

    # -- loading --------------------------------------------------------------------

    def load(self, key: K) -> LoadFuture[V]:
        """A future for ``key``'s value, sent in this round's batch (or taken from the cache).

        Each call returns a :class:`LoadFuture` of its own, which follows the
        key's shared future: cancelling or resolving it affects this load only.
        """
        # The body of _shared(), inlined: load() runs once per key per resolver.
        if key is None:
            raise self._none_key()
        cache_map = self.cache_map
        shared: Future[V] | None
        if cache_map is None:
            shared = self._uncached(key)
        else:
            ck = key if self.cache_key_fn is None else self.cache_key_fn(key)
            try:
                if type(cache_map) is _DictCache:  # the usual dict: its get and set, inlined
                    mapping = cache_map.map
                    shared = mapping.get(ck)
                    if shared is None:
                        shared = mapping[ck] = self._loader(key)
                else:
                    shared = cache_map.get(ck)
                    if shared is None:
                        shared = self._loader(key)
                        cache_map.set(ck, shared)
            except TypeError as error:
                raise self._unhashable(key, ck, error) from None
        # LoadFuture(self, key, shared) without the __init__ call: once per load.
        fut: LoadFuture[V] = _new(LoadFuture)
        fut._owner = self
        fut._key = key
        fut._waiters = None
        state = shared._state
        if state == _PENDING:
            fut._state = _PENDING
            fut._value = None
            fut._shared = shared
            waiters = shared._waiters  # Future._add_waiter, inlined
            if waiters is None:
                shared._waiters = fut
            elif type(waiters) is list:
                waiters.append(fut)
            else:
                shared._waiters = [waiters, fut]
        else:  # cached and done: take the outcome now
            fut._shared = None
            if state == _FAILED:
                fut._fail_unread(shared._value)  # (logged if never read, as above)
            else:
                fut._state = state
                fut._value = shared._value
        return fut

    def load_many(self, keys: Iterable[K]) -> Future[list[V]]:
        """A future for the values of ``keys`` in order; fails with the first failing key.

        It waits on the keys' shared futures directly (no one can reach the
        loads inside it): cancelling it fails it with ``CancelledError`` and
        leaves the keys, their other loads and the cache alone.
        """
        if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
            raise InvalidKeyError(
                f"DataLoader {self.name!r}: load_many() must be called with an iterable of "
                f"keys, but got {short_repr(keys)} ({type(keys).__name__}). For one key, "
                "call load(key).",
                loader=self.name,
                key=keys,
            )
        return gather(*[self._shared(k) for k in keys])

    def _shared(self, key: K) -> Future[V]:
        """The future every load of ``key`` follows: the cached one, or a new one in the batch."""
        if key is None:
            raise self._none_key()
        cache_map = self.cache_map
        if cache_map is None:
            return self._uncached(key)
        ck = self._ck(key)
        try:
            shared: Future[V] | None = cache_map.get(ck)
            if shared is None:
                shared = self._loader(key)
                cache_map.set(ck, shared)
        except TypeError as error:
            raise self._unhashable(key, ck, error) from None
        return shared

    def _uncached(self, key: K) -> Future[V]:
        try:
            return self._loader(key)  # (which removes duplicates by cache key)
        except InvalidKeyError as error:
            raise self._unhashable(key, self._ck(key), error) from None

    def _unhashable(self, key: K, ck: Any, error: Exception) -> InvalidKeyError:
        """The error for a key whose cache key cannot be hashed (``error``: what said so)."""
        what = "key" if ck is key else f"cache key {short_repr(ck)} (from cache_key_fn) of key"
        # The batchy loader's own error (the cache off) names an option of @batched.
        reason = error.__cause__ if isinstance(error, InvalidKeyError) else error
        said = f" ({type(reason).__name__}: {reason})" if reason is not None else ""
        return InvalidKeyError(
            f"DataLoader {self.name!r} got {what} {short_repr(key)} ({type(ck).__name__}), "
            f"which cannot be hashed{said}; pass cache_key_fn= to turn keys "
            "into hashable cache keys (for example cache_key_fn=tuple for lists, or "
            "json.dumps with sort_keys=True for dicts)",
            loader=self.name,
            key=key,
        )

    def _none_key(self) -> InvalidKeyError:
        return InvalidKeyError(
            f"DataLoader {self.name!r}: load() must be called with a key, but got None. "
            "Check the value you load (a missing foreign key?), and skip the load "
            "when it is None.",
            loader=self.name,
            key=None,
        )

    # -- the cache ------------------------------------------------------------------

    def _ck(self, key: K) -> Hashable:
        return key if self.cache_key_fn is None else self.cache_key_fn(key)

    def prime(self, key: K, value: V | BaseException, force: bool = False) -> DataLoader[K, V]:
        """Cache ``value`` for ``key`` unless it is cached already (``force=True``: replace).

        An exception as value makes later loads of ``key`` fail with it.
        """
        if self.cache_map is not None:
            ck = self._ck(key)
            if force or self.cache_map.get(ck) is None:
                fut: Future[Any] = (
                    failed(value) if isinstance(value, BaseException) else resolved(value)
                )
                self.cache_map.set(ck, fut)
        return self

    def prime_many(self, data: Mapping[K, V], force: bool = False) -> DataLoader[K, V]:
        """:meth:`prime` every item of ``data``."""
        for key, value in data.items():
            self.prime(key, value, force)
        return self

    def clear(self, key: K) -> DataLoader[K, V]:
        """Forget ``key``: its next load is sent to the batch function again."""
        if self.cache_map is not None:
            self.cache_map.delete(self._ck(key))
        return self

    def clear_many(self, keys: Iterable[K]) -> DataLoader[K, V]:
        """Forget every key of ``keys``."""
        for key in keys:
            self.clear(key)
        return self

    def clear_all(self) -> DataLoader[K, V]:
        """Forget every cached key."""
        if self.cache_map is not None:
            self.cache_map.clear()
        return self

    # -- the batch call -------------------------------------------------------------

    def _dispatch(self, keys: list[K]) -> Any:
        # A plain function is checked here, inline; an awaitable is checked when it
        # is done. Either way the batchy loader gets one value per key, exceptions
        # included, so an error fails exactly the keys it concerns.
        try:
            out = self.batch_load_fn(keys)
        except Exception as error:
            return self._failed(keys, error)
        except BaseException:  # (CancelledError, KeyboardInterrupt...): no key keeps it
            self._forget(keys)
            raise
        if inspect.isawaitable(out):
            return self._run(keys, out)
        return self._check(keys, out)

    def _run(self, keys: list[K], out: Awaitable[Any]) -> Any:
        """Run the batch function's awaitable as a task of its own; check its values when done.

        Its own task, not a coroutine that awaits it: asyncio.run cancels the
        tasks left when its main coroutine returns, and a batch flushed in that
        last iteration had its call cancelled before the first step. A wrapper
        coroutine then never ran: the batch function's coroutine, made already,
        was dropped unawaited ("coroutine ... was never awaited"), and the keys
        kept the CancelledError in the cache. A cancel thrown into the task
        itself closes the coroutine, and the callback below sees every ending.
        """
        try:
            loop = asyncio.get_running_loop()
            call = asyncio.ensure_future(out, loop=loop)
        except Exception as error:  # an awaitable asyncio refuses (another loop's future)
            if inspect.iscoroutine(out):
                out.close()
            return self._failed(keys, error)
        checked: asyncio.Future[list[Any]] = loop.create_future()
        call.add_done_callback(functools.partial(self._done, keys, checked))
        return checked

    def _done(self, keys: list[K], checked: asyncio.Future[list[Any]], call: Any) -> None:
        # Called by the event loop: whatever happens, ``checked`` gets an outcome,
        # or the batch (and every load of its keys) would wait forever.
        try:
            if call.cancelled():
                self._forget(keys)  # a driver's own cancel, say: the next load tries again
                checked.set_exception(_cancelled(call))
            elif (error := call.exception()) is None:
                checked.set_result(self._check(keys, call.result()))
            elif isinstance(error, Exception):
                checked.set_result(self._failed(keys, error))
            else:  # KeyboardInterrupt, SystemExit...: no key keeps it
                self._forget(keys)
                checked.set_exception(error)
        except Exception as error:  # a cache_map whose delete() fails, say
            if not checked.done():
                checked.set_exception(error)

    def _check(self, keys: list[K], values: Any) -> list[Any]:
        if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
            return self._failed(
                keys,
                LoaderError(
                    f"DataLoader {self.name!r}: the batch function must return a list (or "
                    f"an awaitable of a list) with one value per key, but for keys "
                    f"{short_repr(keys)} it returned {short_repr(values)} "
                    f"({type(values).__name__}). Did you forget a return statement, or "
                    "return a dict? Map it: [by_key.get(k) for k in keys].",
                    loader=self.name,
                    keys=keys,
                ),
            )
        try:
            checked: list[Any] = list(values)  # a generator may fail as it is read
        except Exception as error:
            return self._failed(keys, error)
        if len(checked) != len(keys):
            return self._failed(
                keys,
                LoaderError(
                    f"DataLoader {self.name!r}: the batch function must return a list with "
                    f"the same length as the list of keys, in the same order, but it "
                    f"returned {len(checked)} values for {len(keys)} keys.\n\n"
                    f"Keys:\n{short_repr(keys)}\n\nValues:\n{short_repr(checked)}\n\n"
                    "For keys with no data, put None (or an Exception) in their place.",
                    loader=self.name,
                    keys=keys,
                ),
            )
        return checked

    def _failed(self, keys: list[K], error: Exception) -> list[Any]:
        # The whole batch failed: every key gets the error (the original one, as
        # with aiodataloader, so `except MyDbError` keeps working), and no key keeps
        # it in the cache, so the next load tries again.
        self._forget(keys)
        return [error] * len(keys)

    def _forget(self, keys: list[K]) -> None:
        if self.cache_map is not None:
            for key in keys:
                self.cache_map.delete(self._ck(key))


def _cancelled(call: Any) -> asyncio.CancelledError:
    """The error a cancelled call raises, with its message (``cancel(msg)``)."""
    try:
        call.result()
    except asyncio.CancelledError as error:
        return error
    return asyncio.CancelledError()  # (not reached: the call was cancelled)
