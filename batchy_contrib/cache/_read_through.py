"""The read-through cache: memcached in front of a loader, one get_many and one batch a round.

:func:`batchy_contrib.cache.memcache.cached` makes it, and documents it; the names
here are re-exported by :mod:`batchy_contrib.cache.memcache`. memcached is reached on
worker threads, and its failures are counted and logged, never raised.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any, TypeVar, cast

from pymemcache import exceptions as mc

import batchy
from batchy import InvalidKeyError, UsageError, short_repr

from ._clients import call_alone, server_of, unwrapped
from ._keys import UnsupportedKey, check_prefix, exact_key, memcached_key, unsupported
from ._serde import Unreadable, read_many

__all__ = ["CacheStats", "ReadThrough"]

K = TypeVar("K")
V = TypeVar("V")

log = logging.getLogger("batchy_contrib.cache.memcache")

_threads: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    """The threads of every read-through cache: not the loop's default pool, because a hung
    memcached holds a thread until its socket timeout and must not starve other work."""
    global _threads
    if _threads is None:
        _threads = ThreadPoolExecutor(16, thread_name_prefix="batchy-memcache")
    return _threads


def _refused_request(error: BaseException) -> bool:
    """True if memcached answered with an error about the request (the server is fine)."""
    if isinstance(error, mc.MemcacheUnexpectedCloseError):
        return False
    return isinstance(error, (mc.MemcacheServerError, mc.MemcacheClientError))


@dataclass
class CacheStats:
    """What a read-through cache did, counted by key (``errors`` by failed memcached call)."""

    hits: int = 0
    misses: int = 0  # keys sent to the inner loader
    skipped: int = 0  # keys not looked up because memcached failed recently
    errors: int = 0  # memcached calls that failed or timed out
    sets: int = 0  # values written back
    deletes: int = 0  # keys invalidated

    def reset(self) -> None:
        for f in fields(self):
            setattr(self, f.name, 0)


class ReadThrough(batchy.Loader[K, V]):
    """A loader that answers from memcached and sends only the misses to ``inner``.

    Made by :func:`cached`; see there for the options.
    """

    def __init__(
        self,
        inner: batchy.Loader[K, V],
        client: Any,
        *,
        ttl: int = 300,
        prefix: str | None = None,
        name: str | None = None,
        timeout: float = 0.5,
        retry_after: float = 1.0,
        cache_none: bool = True,
        max_batch_size: int | None = None,
        key: Callable[[K], Any] | None = None,
    ) -> None:
        if not isinstance(inner, batchy.Loader):
            raise UsageError(
                f"memcache.cached() wraps a batchy loader, got {short_repr(inner)}; decorate the "
                "batch function with @batchy.batched first"
            )
        if type(ttl) is not int or ttl < 0:
            raise UsageError(
                f"memcache.cached({inner.name}) ttl= must be whole seconds >= 0 "
                f"(0: no expiry), got {short_repr(ttl)}"
            )
        name = name or f"cached({inner.name})"
        fn = cast(Callable[[list[K]], Any], self._read_through)
        # key=, else the inner loader's key=, makes both our scope's cache keys and the
        # memcached keys: keys batchy treats as one are one entry, and no others are.
        self._inherited_key = key is None and inner.key_fn is not None
        key = inner.key_fn if key is None else key
        super().__init__(fn, name=name, max_batch_size=max_batch_size, key=key)
        self.inner = inner
        self.client = client
        self.ttl = ttl
        self.prefix = (
            f"{inner.name}:"
            if prefix is None
            else check_prefix(f"memcache.cached({inner.name})", prefix)
        )
        self.timeout = timeout
        self.retry_after = retry_after
        self.cache_none = cache_none
        self.server = server_of(client)
        self.stats = CacheStats()
        self._down_until = 0.0
        self._unserializable_seen: set[type] = set()  # value types already logged as a warning

    def __repr__(self) -> str:
        return f"<batchy_contrib.cache.memcache.ReadThrough {self.name} at {self.server}>"

    def memcache_key(self, key: K) -> str:
        """The memcached key of ``key``: the prefix and the key's type-tagged canonical text.

        ``users.memcache_key(7) == "users:i7"``; ``"7"`` is ``"users:s7"``. Keys
        that are not of a supported type (after ``key=``) raise
        :class:`~batchy.InvalidKeyError`.
        """
        ck: Any = key
        try:
            if self.key_fn is not None:
                ck = self.key_fn(key)
            return memcached_key(self.prefix, ck)
        except Exception as error:
            if self._inherited_key and ck is not key:
                # The inner loader's key= may return what has no text (the SQL
                # loaders tell 1.0 from 1 with a private marker); the key's exact
                # text is as fine as any key= of it, so no two of its keys meet.
                try:
                    return exact_key(self.prefix, key)
                except UnsupportedKey:
                    pass
            raise unsupported(self.name, key, ck, error) from error

    # -- memcached calls, on a worker thread, never failing -------------------------

    async def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
        """Run a blocking client call on a thread: ("ok", result), ("failed" | "skipped", None)."""
        if time.monotonic() < self._down_until:
            return "skipped", None
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout):
                return "ok", await loop.run_in_executor(
                    _executor(), call_alone, self.client, fn, *args
                )
        except Exception as error:
            self.stats.errors += 1
            reason = "timed out" if isinstance(error, TimeoutError) else repr(error)
            if _refused_request(error):
                # memcached is up and said no (a value over its item size limit):
                # nothing to back off from.
                log.warning(
                    "memcached at %s refused %s for loader %r (%s)",
                    self.server,
                    what,
                    self.name,
                    reason,
                )
                return "failed", None
            self._down_until = time.monotonic() + self.retry_after
            log.warning(
                "memcached at %s failed in %s for loader %r (%s); serving from %r, "
                "not asking memcached for %.1f s",
                self.server,
                what,
                self.name,
                reason,
                self.inner.name,
                self.retry_after,
            )
            return "failed", None

    async def _read_through(self, keys: list[K]) -> list[Any]:
        values: list[Any] = [None] * len(keys)
        asked: dict[int, str] = {}  # position -> memcached key, for keys that have one
        for i, k in enumerate(keys):
            try:
                asked[i] = self.memcache_key(k)
            except InvalidKeyError as error:
                values[i] = error  # fails this key alone, not the batch
        if not asked:
            return values
        status, found = await self._call(
            "get_many",
            functools.partial(read_many, within=self.timeout),
            self.client,
            list(asked.values()),
        )
        ok = status == "ok"
        if not ok:
            found = {}
            if status == "skipped":
                self.stats.skipped += len(asked)
        missing: list[int] = []
        unreadable: list[int] = []
        for i, mk in asked.items():
            if mk not in found:
                missing.append(i)
            elif isinstance(found[mk], Unreadable):
                # Never served: reloaded like a miss, and the write-back replaces it.
                unreadable.append(i)
                missing.append(i)
            else:
                values[i] = found[mk]
        if unreadable:
            self._unreadable([keys[i] for i in unreadable], found[asked[unreadable[0]]])
        if ok:
            self.stats.hits += len(asked) - len(missing)
        if not missing:
            return values
        self.stats.misses += len(missing)
        # One batch of the inner loader for all misses of this call. Its own scope:
        # the caller's scope caches *our* answers already.
        async with batchy.scope():
            loaded = await batchy.gather(
                *(self.inner(keys[i]) for i in missing), return_exceptions=True
            )
        store: dict[str, Any] = {}
        for i, value in zip(missing, loaded, strict=True):
            values[i] = value
            if not isinstance(value, BaseException) and (value is not None or self.cache_none):
                store[asked[i]] = value
        if store and ok:  # no write-back to a memcached that just failed
            status, unserializable = await self._call("set_many", self._set_many, store)
            if status == "ok":
                self.stats.sets += len(store) - len(unserializable)
                key_of = {mk: keys[i] for i, mk in asked.items()}
                for mk, failure in unserializable.items():
                    self._not_stored(key_of[mk], store[mk], failure)
        return values

    def _set_many(self, values: dict[str, Any]) -> dict[str, Exception]:
        """Write ``values``; returns those that could not be serialized (the others are written)."""
        try:
            self.client.set_many(values, expire=self.ttl, noreply=False)
            return {}
        except (mc.MemcacheError, OSError):
            raise  # memcached's own failures: _call decides about backing off
        except Exception:
            # pymemcache serializes every value before it sends anything, so nothing
            # was written: find the values that cannot be serialized, write the others.
            bad = self._unserializable(values)
            if not bad:
                raise
        rest = {mk: v for mk, v in values.items() if mk not in bad}
        if rest:
            self.client.set_many(rest, expire=self.ttl, noreply=False)
        return bad

    def _unserializable(self, values: dict[str, Any]) -> dict[str, Exception]:
        serde = getattr(unwrapped(self.client), "serde", None)
        bad: dict[str, Exception] = {}
        if serde is None:  # not a pymemcache client: cannot tell, so it counts as a failure
            return bad
        for mk, value in values.items():
            try:
                serde.serialize(mk, value)
            except Exception as error:
                bad[mk] = error
        return bad

    def _unreadable(self, keys: list[K], first: Unreadable) -> None:
        """One warning a read, however many of its entries cannot be read (a format change)."""
        others = (
            f" (and for {len(keys) - 1} more keys of the read: {short_repr(keys[1:])})"
            if len(keys) > 1
            else ""
        )
        log.warning(
            "loader %r found an entry for key %s%s in memcached at %s that cannot be read "
            "(%s); loading %s from %r and writing %s again. Change prefix= when the "
            "values' format changes, and give caches that share a memcached their own prefix",
            self.name,
            short_repr(keys[0]),
            others,
            self.server,
            first.reason,
            "the key" if len(keys) == 1 else "them",
            self.inner.name,
            "it" if len(keys) == 1 else "them",
        )

    def _not_stored(self, key: K, value: Any, error: Exception) -> None:
        """Log a value that cannot be serialized: a warning per value type, then at DEBUG."""
        kind = type(value)
        first = kind not in self._unserializable_seen
        self._unserializable_seen.add(kind)
        log.log(
            logging.WARNING if first else logging.DEBUG,
            "loader %r did not store key %s in memcached: its value %s (%s) cannot be "
            "serialized (%s: %s); the key is read from %r each time, memcached stays in use%s",
            self.name,
            short_repr(key),
            short_repr(value),
            kind.__qualname__,
            type(error).__name__,
            error,
            self.inner.name,
            " (more values of this type are logged at DEBUG)" if first else "",
        )

    # -- invalidation ---------------------------------------------------------------

    def delete(self, *keys: K) -> bool:
        """Forget ``keys`` in memcached (and in the current scope); call it after a write.

        Blocks on memcached (use :meth:`adelete` in async code). Returns
        ``False`` if memcached could not be reached: the old values then live
        until their TTL, which is what bounds staleness when memcached misbehaves.
        A key of a type the cache cannot store raises :class:`~batchy.InvalidKeyError`.
        """
        mkeys = [self.memcache_key(k) for k in keys]  # before anything is forgotten
        self._clear_scope(keys)
        try:
            call_alone(self.client, self.client.delete_many, mkeys, noreply=False)
        except Exception as error:
            return self._delete_failed(keys, error)
        self.stats.deletes += len(keys)
        return True

    async def adelete(self, *keys: K) -> bool:
        """:meth:`delete` on a worker thread, for async code."""
        mkeys = [self.memcache_key(k) for k in keys]
        self._clear_scope(keys)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout):
                await loop.run_in_executor(
                    _executor(),
                    lambda: call_alone(self.client, self.client.delete_many, mkeys, noreply=False),
                )
        except Exception as error:
            return self._delete_failed(keys, error)
        self.stats.deletes += len(keys)
        return True

    def _clear_scope(self, keys: Sequence[K]) -> None:
        if batchy.current_scope() is not None and keys:
            self.clear(*keys)
            self.inner.clear(*keys)

    def _delete_failed(self, keys: Sequence[K], error: BaseException) -> bool:
        self.stats.errors += 1
        log.warning(
            "memcached at %s could not delete %s for loader %r (%r); the old values stay "
            "until their TTL (%d s)",
            self.server,
            short_repr(list(keys)),
            self.name,
            error,
            self.ttl,
        )
        return False


# Shown as batchy_contrib.cache.memcache.X, where they are documented and imported from.
for _cls in (CacheStats, ReadThrough):
    _cls.__module__ = "batchy_contrib.cache.memcache"
