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

This module is built only on batchy's public API: each DataLoader owns one
uncached :func:`batchy.batched` loader (which removes duplicate keys within a
batch) and keeps its own cache, because in the DataLoader contract the cache
belongs to the loader instance (one instance per request), not to a scope.

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

import inspect
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

# Only batchy's public names: this module is a layer above the engine.
from batchy import (
    Future,
    Loader,
    LoaderError,
    UsageError,
    batched,
    failed,
    gather,
    resolved,
    short_repr,
)

__all__ = ["DataLoader", "InvalidKeyError"]

K = TypeVar("K")
V = TypeVar("V")

LoadFn = Callable[[list[K]], Awaitable[Sequence[V | BaseException]] | Sequence[V | BaseException]]


class InvalidKeyError(UsageError, TypeError):
    """``load(None)``, or ``load_many`` of something that is not an iterable of keys."""


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

    ``load`` returns a :class:`batchy.Future`: ``await`` it from asyncio code,
    yield or await it inside a batchy handler.
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

    def __repr__(self) -> str:
        return f"<batchy.DataLoader {self.name}>"

    # -- loading --------------------------------------------------------------------

    def load(self, key: K) -> Future[V]:
        """A future for ``key``'s value, sent in this round's batch (or taken from the cache)."""
        if key is None:
            raise InvalidKeyError(
                f"DataLoader {self.name!r}: load() must be called with a key, but got None. "
                "Check the value you load (a missing foreign key?), and skip the load "
                "when it is None."
            )
        if self.cache_map is None:
            return self._loader(key)
        ck = key if self.cache_key_fn is None else self.cache_key_fn(key)
        fut: Future[V] | None = self.cache_map.get(ck)
        if fut is None:
            fut = self._loader(key)
            self.cache_map.set(ck, fut)
        return fut

    def load_many(self, keys: Iterable[K]) -> Future[list[V]]:
        """A future for the values of ``keys`` in order; fails with the first failing key."""
        if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
            raise InvalidKeyError(
                f"DataLoader {self.name!r}: load_many() must be called with an iterable of "
                f"keys, but got {short_repr(keys)} ({type(keys).__name__}). For one key, "
                "call load(key)."
            )
        return gather(*[self.load(k) for k in keys])

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
        if inspect.isawaitable(out):
            return self._await(keys, out)
        return self._check(keys, out)

    async def _await(self, keys: list[K], out: Awaitable[Any]) -> list[Any]:
        try:
            values = await out
        except Exception as error:
            return self._failed(keys, error)
        return self._check(keys, values)

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
        checked: list[Any] = list(values)
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
        if self.cache_map is not None:
            for key in keys:
                self.cache_map.delete(self._ck(key))
        return [error] * len(keys)
