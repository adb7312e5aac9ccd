"""memcached (pymemcache): a loader over ``get_many``, and a read-through cache for any loader.

::

    from batchy_contrib import memcache

    client = memcache.connect("127.0.0.1:11211")
    users = memcache.cached(users_by_id, client, ttl=300)   # use it like users_by_id
    user = await users(7)
    users.delete(7)                                        # after writing user 7

The read-through cache, per round: one ``get_many`` for all of the round's
keys; only the misses go to the inner loader, together, as one batch; the
values it returns are written back with one ``set_many`` and a TTL. pymemcache
blocks, so its calls run on worker threads and overlap with the other batches
of the round (the MySQL queries of other loaders). memcached is an optimisation,
never a dependency: when it is down or slow the keys are served by the inner
loader, the failure is counted and logged, and memcached is left alone for
``retry_after`` seconds so a dead server costs one timeout, not one per round.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any, TypeVar, cast

from pymemcache import exceptions as mc
from pymemcache import serde
from pymemcache.client.base import Client, PooledClient

import batchy
from batchy import LoaderError, UsageError, short_repr

from ._source import DataSourceError

__all__ = [
    "CacheStats",
    "DataSourceError",
    "LoaderError",
    "ReadThrough",
    "cached",
    "connect",
    "loader",
    "safe_key",
]

K = TypeVar("K")
V = TypeVar("V")

log = logging.getLogger("batchy_contrib.memcache")

#: memcached's limit on key length, in bytes.
MAX_KEY = 250


def connect(
    server: str = "127.0.0.1:11211",
    *,
    timeout: float = 0.5,
    connect_timeout: float = 0.5,
    max_pool_size: int = 16,
) -> Any:
    """A thread-safe pymemcache ``PooledClient`` for ``host:port`` that pickles values.

    The timeouts are short on purpose: a cache that answers late is worse than
    no cache. Values are pickled, so only point it at a memcached you trust.
    """
    host, sep, port = server.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UsageError(f"memcache.connect() takes 'host:port', got {server!r}")
    return PooledClient(
        (host, int(port)),
        serde=serde.pickle_serde,
        timeout=timeout,
        connect_timeout=connect_timeout,
        max_pool_size=max_pool_size,
        no_delay=True,
    )


def safe_key(text: str) -> str:
    """``text`` if it is a valid memcached key, else a readable head plus its SHA-256.

    A valid key is at most 250 bytes of printable ASCII with no spaces. Anything
    else (long keys, spaces, control or non-ASCII characters) becomes its first
    100 characters with the bad ones replaced, ``#``, and the SHA-256 of the whole
    text, so distinct texts stay distinct::

        >>> safe_key("users:42")
        'users:42'
        >>> safe_key("users:a b")[:10]
        'users:a_b#'
    """
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= MAX_KEY and all(0x21 <= b <= 0x7E for b in raw):
        return text
    head = "".join(c if "!" <= c <= "~" else "_" for c in text[:100])
    return head + "#" + hashlib.sha256(raw).hexdigest()


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


def _server(client: Any) -> str:
    server = getattr(client, "server", None)
    if isinstance(server, tuple) and len(server) == 2:
        return f"{server[0]}:{server[1]}"
    return str(server) if server is not None else repr(client)


def loader(
    client: Any,
    *,
    prefix: str = "",
    name: str = "memcache",
    max_batch_size: int | None = None,
    default: Any = None,
) -> batchy.Loader[Any, Any]:
    """A loader of memcached values: one ``get_many`` per round, run on a thread.

    Missing keys get ``default``. memcached down fails the keys with
    :class:`DataSourceError` naming the loader and the server (use
    :func:`cached` for a cache that never fails a request)::

        sessions = memcache.loader(client, prefix="session:")
        session = await sessions(token)
    """
    host = _server(client)

    def get_many(keys: list[Any]) -> dict[Any, Any]:
        mkeys = {safe_key(f"{prefix}{k}"): k for k in keys}
        try:
            found = client.get_many(list(mkeys))
        except Exception as error:
            raise DataSourceError(
                f"loader {name!r} could not read memcached at {host} "
                f"({type(error).__name__}: {error}) for keys {short_repr(keys)}; check that "
                "memcached is running, or use memcache.cached(...) to fall back to the source",
                loader=name,
                keys=keys,
                host=host,
            ) from error
        return {mkeys[mk]: v for mk, v in found.items() if mk in mkeys}

    return batchy.Loader(
        get_many, name=name, thread=True, max_batch_size=max_batch_size, default=default
    )


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
        # The inner loader's key= makes our cache keys too: the same keys, the same rules.
        super().__init__(fn, name=name, max_batch_size=max_batch_size, key=inner.key_fn)
        self.inner = inner
        self.client = client
        self.ttl = ttl
        self.prefix = f"{inner.name}:" if prefix is None else prefix
        self.timeout = timeout
        self.retry_after = retry_after
        self.cache_none = cache_none
        self.server = _server(client)
        self.stats = CacheStats()
        self._down_until = 0.0
        # A plain pymemcache Client is one socket: never let two threads use it at once.
        self._lock: threading.Lock | None = threading.Lock() if type(client) is Client else None

    def __repr__(self) -> str:
        return f"<batchy_contrib.memcache.ReadThrough {self.name} at {self.server}>"

    def memcache_key(self, key: K) -> str:
        """The memcached key of ``key``: prefix + ``repr(key)`` (so ``1`` and ``"1"`` differ)."""
        return safe_key(self.prefix + repr(key))

    # -- memcached calls, on a worker thread, never failing -------------------------

    async def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
        """Run a blocking client call on a thread: ("ok", result), ("failed" | "skipped", None)."""
        if time.monotonic() < self._down_until:
            return "skipped", None

        def call() -> Any:
            if self._lock is None:
                return fn(*args)
            with self._lock:
                return fn(*args)

        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout):
                return "ok", await loop.run_in_executor(_executor(), call)
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
        mkeys = [self.memcache_key(k) for k in keys]
        status, found = await self._call("get_many", self.client.get_many, mkeys)
        ok = status == "ok"
        if not ok:
            found = {}
            if status == "skipped":
                self.stats.skipped += len(keys)
        values: list[Any] = [None] * len(keys)
        missing: list[int] = []
        for i, mk in enumerate(mkeys):
            if mk in found:
                values[i] = found[mk]
            else:
                missing.append(i)
        if ok:
            self.stats.hits += len(keys) - len(missing)
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
                store[mkeys[i]] = value
        if store and ok:  # no write-back to a memcached that just failed
            status, _ = await self._call("set_many", self._set_many, store)
            if status == "ok":
                self.stats.sets += len(store)
        return values

    def _set_many(self, values: dict[str, Any]) -> Any:
        return self.client.set_many(values, expire=self.ttl, noreply=False)

    # -- invalidation ---------------------------------------------------------------

    def delete(self, *keys: K) -> bool:
        """Forget ``keys`` in memcached (and in the current scope); call it after a write.

        Blocks on memcached (use :meth:`adelete` in async code). Returns
        ``False`` if memcached could not be reached: the old values then live
        until their TTL, which is what bounds staleness when memcached misbehaves.
        """
        self._clear_scope(keys)
        try:
            self.client.delete_many([self.memcache_key(k) for k in keys], noreply=False)
        except Exception as error:
            return self._delete_failed(keys, error)
        self.stats.deletes += len(keys)
        return True

    async def adelete(self, *keys: K) -> bool:
        """:meth:`delete` on a worker thread, for async code."""
        self._clear_scope(keys)
        mkeys = [self.memcache_key(k) for k in keys]
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout):
                await loop.run_in_executor(
                    _executor(), lambda: self.client.delete_many(mkeys, noreply=False)
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


def cached(
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
) -> ReadThrough[K, V]:
    """Put memcached in front of ``inner``: a loader that reads through to it on a miss.

    - ``ttl``: seconds a value stays in memcached (0: until evicted);
    - ``prefix``: memcached key prefix (default ``"<inner name>:"``); change it
      when the value format changes, to start from an empty cache;
    - ``timeout``: seconds to wait for memcached before serving from ``inner``;
    - ``retry_after``: seconds to leave memcached alone after it failed;
    - ``cache_none``: cache ``None`` results too (rows that do not exist).

    Errors of ``inner`` are never cached. ::

        users = memcache.cached(users_by_id, client, ttl=600)
        user = await users(7)
    """
    return ReadThrough(
        inner,
        client,
        ttl=ttl,
        prefix=prefix,
        name=name,
        timeout=timeout,
        retry_after=retry_after,
        cache_none=cache_none,
        max_batch_size=max_batch_size,
    )
