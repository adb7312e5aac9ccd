"""The loader: a batch function and its options; calling it files one key in this round's batch.

Calling a loader with one key gives a future. Duplicate keys in one round are
sent once, with the cache on or off. With the cache on, a key's future is also
kept in the current scope, so the same key asked again in that scope (in any
later round) costs nothing.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, overload

from ._batch import _NO_DEFAULT, Batch
from ._errors import InvalidKeyError, UsageError, error_text, short_repr
from ._future import PENDING, Future, resolved
from ._gather import FIRST, Gather
from ._scheduler import _local, scheduler_for
from ._scope import _current, current_scope

if TYPE_CHECKING:
    from ._scheduler import Scheduler
    from ._scope import Scope

__all__ = ["Loader", "batched"]

_new_future = object.__new__

K = TypeVar("K")
V = TypeVar("V")

BatchResult = Mapping[K, V] | Sequence[V]
BatchFn = Callable[[list[K]], BatchResult[K, V] | Awaitable[BatchResult[K, V]]]


def _positive(name: str, value: int | None, loader: str) -> int | None:
    if value is not None and (type(value) is not int or value < 1):
        raise UsageError(
            f"@batched {name}= for loader {loader!r} must be a positive int or None, "
            f"got {short_repr(value)}"
        )
    return value


class Loader(Generic[K, V]):
    """A batched data-access function. Call it with one key to get a :class:`Future`.

    Made with :func:`batchy.batched`; see there for the options.
    """

    #: Whether a key that fails with nothing waiting on it logs its error if it is
    #: never read (``_future._fail_unread``). A DataLoader turns it off for the
    #: loader it owns: its callers hold its loads, never this loader's futures.
    _report_unread = True

    def __init__(
        self,
        fn: BatchFn[K, V],
        *,
        name: str | None = None,
        max_batch_size: int | None = None,
        max_concurrency: int | None = None,
        cache: bool = True,
        key: Callable[[K], Any] | None = None,
        thread: bool = False,
        default: Any = _NO_DEFAULT,
    ) -> None:
        if not callable(fn):
            raise UsageError(
                f"@batched expects a function taking a list of keys, got {short_repr(fn)}"
            )
        self.fn = fn
        self.name: str = name or getattr(fn, "__qualname__", None) or repr(fn)
        self.max_batch_size = _positive("max_batch_size", max_batch_size, self.name)
        self.max_concurrency = _positive("max_concurrency", max_concurrency, self.name)
        self.cache = cache
        self.key_fn = key
        self.default = default
        if thread and inspect.iscoroutinefunction(fn):
            raise UsageError(
                f"loader {self.name!r} is async def and cannot run in a thread; "
                "drop thread=True (it already runs concurrently)"
            )
        self.thread = thread
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return f"<batchy.Loader {self.name}>"

    # -- loading --------------------------------------------------------------------

    def __call__(self, key: K) -> Future[V]:
        """A future for ``key``'s value, batched with every other key of this round."""
        # The hot path of the engine (once per key per handler): dict look-ups only.
        sched = _local.sched
        scope: Scope | None
        if sched is not None:
            task = sched.current
            scope = task._scope if task is not None else _current.get()
        else:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return _UnstartedLoad(self, key)  # no loop yet: file the key when it starts
            sched = scheduler_for(loop)
            scope = _current.get()
        ck = key if self.key_fn is None else self._cache_key(key)
        cache = None
        # Every hash and == of the key happens in this block, before the key joins
        # a batch: a key that cannot be hashed or compared fails this call alone,
        # and never leaves a half-made batch (or an empty one) for the round.
        try:
            if scope is not None and self.cache:
                cache = scope._caches.get(self)
                if cache is None:
                    cache = scope._caches[self] = {}
                elif ck in cache:  # ``in`` is cheaper than get() on a miss, the usual case
                    scope._hit_log.append(self)  # counted when read: see ScopeStats
                    return cache[ck]  # type: ignore[no-any-return]
            batch: Batch | None = sched._open.get(self)  # type: ignore[assignment]
            if batch is None:
                hash(ck)  # checked by ``in`` below when a batch exists already
                asked = False
            else:
                asked = ck in batch.futures
        except Exception as error:
            raise self._bad_key(key, ck, error) from (None if type(error) is TypeError else error)
        if batch is None:
            batch = Batch(self, sched)
            sched.add_batch(self, batch)
        futures = batch.futures
        if asked:  # again in this round (from another scope, or with the cache off)
            fut = futures[ck]
            batch.shared(scope, ck)
        else:
            # Future() without the __init__ call: this runs once per key.
            fut = futures[ck] = _new_future(Future)
            fut._state = PENDING
            fut._value = None
            fut._waiters = None
            if batch._last_scope is not scope:  # who asks: see Batch.joined
                batch.joined(scope)
            batch.keys.append(key)
        if cache is not None:
            cache[ck] = fut
        return fut

    def many(self, keys: Iterable[K]) -> Future[list[V]]:
        """A future for the values of ``keys``, in order (one batch, not one per key)."""
        return Gather([self(k) for k in keys], None, FIRST)

    def _cache_key(self, key: K) -> Any:
        try:
            return self.key_fn(key)  # type: ignore[misc]
        except Exception as error:
            raise InvalidKeyError(
                f"loader {self.name!r}: its key= function {short_repr(self.key_fn)} raised "
                f"{error_text(error)} for key {short_repr(key)} ({type(key).__name__}); "
                "make key= accept every key the loader is called with",
                loader=self.name,
                key=key,
            ) from error

    def _bad_key(self, key: Any, ck: Any, error: Exception) -> InvalidKeyError:
        what = "key" if ck is key else f"cache key {short_repr(ck)} (from key=) of key"
        if type(error) is TypeError:
            problem = "which cannot be hashed"
        else:
            problem = f"whose hash or == raised {error_text(error)}"
        return InvalidKeyError(
            f"loader {self.name!r} got {what} {short_repr(key)} ({type(ck).__name__}), "
            f"{problem}; pass key= to @batched to turn keys into hashable "
            "cache keys (for example key=tuple for lists)",
            loader=self.name,
            key=key,
        )

    # -- the cache of the current scope ---------------------------------------------

    def _scope_cache(self, action: str) -> dict[Any, Any]:
        scope = current_scope()
        if scope is None:
            raise UsageError(
                f"{self.name}.{action}() needs a scope: call it inside a handler, "
                "batchy.run(...) or 'with batchy.scope():'"
            )
        return scope.cache_for(self)

    def prime(self, key: K, value: V) -> None:
        """Put ``value`` in the current scope's cache for ``key``, unless it is there already."""
        cache = self._scope_cache("prime")
        ck = key if self.key_fn is None else self._cache_key(key)
        if ck not in cache:
            cache[ck] = resolved(value)

    def clear(self, *keys: K) -> None:
        """Forget ``keys`` (all keys when none are given) in the current scope's cache."""
        cache = self._scope_cache("clear")
        if not keys:
            cache.clear()
        for key in keys:
            cache.pop(key if self.key_fn is None else self._cache_key(key), None)


class _LazyLoad(Future[Any]):
    """A load made before any loop runs: it joins a batch when something first waits on it."""

    __slots__ = ("_key", "_loader")

    def __init__(self, loader: Loader[Any, Any], key: Any) -> None:
        super().__init__()
        self._loader = loader
        self._key = key

    def __repr__(self) -> str:
        state = ("pending", "done", "failed")[self._state]
        return f"<batchy load {self._loader.name}({short_repr(self._key)}) {state}>"

    def _activate(self, sched: Scheduler, scope: Scope | None) -> None:
        """Nothing to start: the load started when something first waited on it."""


class _UnstartedLoad(_LazyLoad):
    """A lazy load nothing has waited on yet; it becomes a :class:`_LazyLoad` when it starts.

    Reading a value's attribute off it (``users_by_id(1).name``) is the mistake
    of code that never waits on it, above all graphql-core run without batchy's
    execution context, whose default resolver reads ``getattr(source, "name",
    None)``: a null or "Cannot return null" that names nothing. So a public name
    it lacks is a UsageError saying what to do. Only here: a ``__getattr__``
    keeps CPython from specializing attribute reads of its class (twice their
    cost), and a load is of this class only until it starts.
    """

    __slots__ = ()

    if not TYPE_CHECKING:  # mypy still reports ``load(key).name`` on a Future

        def __getattr__(self, name: str) -> Any:
            # Private and dunder names stay AttributeErrors: asyncio, inspect,
            # copy and graphql-core probe those with hasattr().
            if name.startswith("_"):
                raise AttributeError(
                    f"{type(self).__name__!r} object has no attribute {name!r}", name=name, obj=self
                )
            raise _read_off_a_load(self._loader.name, self._key, name)

    def _activate(self, sched: Scheduler, scope: Scope | None) -> None:
        # Started: its attribute reads go at full speed again (the layout is the same).
        self.__class__ = _LazyLoad  # type: ignore[assignment]
        # Activation runs in the context that waits on us (a handler's step,
        # or asyncio code inside the scope), so the loader finds ``sched``
        # and ``scope`` there by itself.
        try:
            real = self._loader(self._key)
        except Exception as error:  # a bad key fails this load, where it is awaited
            self._set_exception(error)
            return
        if real.done():
            self._copy_from(real)
        else:
            real._add_waiter(self)


def _read_off_a_load(loader: str, key: Any, name: str) -> UsageError:
    return UsageError(
        f"{name!r} was read off the load {loader}({short_repr(key)}), a batchy future, not off "
        f"its value; wait on the load for the value (value = yield {loader}(key), or await it, "
        "or batchy.run(...)). In GraphQL, a resolver's future reached an execution that "
        "does not run on batchy (graphql-core's default resolver reads fields off it): "
        "use batchy_contrib.graphql's graphql_sync(...) or graphql(...), or pass graphql-core "
        "executor_class=BatchyExecutionContext (execution_context_class= on graphql-core 3.2)"
    )


_AsyncSeq = Callable[[list[K]], Awaitable[Sequence[V]]]
_AsyncMap = Callable[[list[K]], Awaitable[Mapping[K, V]]]
_SyncSeq = Callable[[list[K]], Sequence[V]]
_SyncMap = Callable[[list[K]], Mapping[K, V]]


class _Decorator(Protocol):
    """What ``batched(**options)`` returns: a decorator typed like ``batched`` itself."""

    @overload
    def __call__(self, fn: _AsyncSeq[K, V], /) -> Loader[K, V]: ...
    @overload
    def __call__(self, fn: _AsyncMap[K, V], /) -> Loader[K, V]: ...
    @overload
    def __call__(self, fn: _SyncSeq[K, V], /) -> Loader[K, V]: ...
    @overload
    def __call__(self, fn: _SyncMap[K, V], /) -> Loader[K, V]: ...


@overload
def batched(fn: _AsyncSeq[K, V], /, **options: Any) -> Loader[K, V]: ...
@overload
def batched(fn: _AsyncMap[K, V], /, **options: Any) -> Loader[K, V]: ...
@overload
def batched(fn: _SyncSeq[K, V], /, **options: Any) -> Loader[K, V]: ...
@overload
def batched(fn: _SyncMap[K, V], /, **options: Any) -> Loader[K, V]: ...
@overload
def batched(
    *,
    name: str | None = None,
    max_batch_size: int | None = None,
    max_concurrency: int | None = None,
    cache: bool = True,
    key: Callable[[Any], Any] | None = None,
    thread: bool = False,
    default: Any = _NO_DEFAULT,
) -> _Decorator: ...
def batched(fn: Any = None, /, **options: Any) -> Any:
    """Turn a function from a list of keys to their values into a :class:`Loader`.

    The function (plain or ``async def``) gets distinct keys and returns one value
    per key in the same order, or a dict keyed by key. A value that is an
    exception fails only its key. Options:

    - ``max_batch_size``: split bigger batches into chunks, flushed concurrently;
    - ``max_concurrency``: at most this many chunks in flight at once;
    - ``cache`` (default ``True``): remember values per scope;
    - ``key``: map a key to its cache key (for unhashable keys);
    - ``name``: the name in errors and traces (default: the function's);
    - ``thread``: run a blocking plain function in the loop's thread pool so it
      overlaps with other batches;
    - ``default``: the value of keys missing from a returned dict (default: fail
      them with :class:`MissingKeyError`).

    ::

        @batchy.batched(max_batch_size=500)
        async def users_by_id(ids):
            rows = await db.fetch("SELECT * FROM users WHERE id IN (...)", ids)
            return {row["id"]: row for row in rows}
    """
    if fn is not None:
        return Loader(fn, **options)

    def decorate(f: Any) -> Loader[Any, Any]:
        return Loader(f, **options)

    return decorate
