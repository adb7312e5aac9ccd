"""memcached (pymemcache): a loader over ``get_many``, and a read-through cache for any loader.

::

    from batchy_contrib.cache import memcache

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
A value that cannot be pickled is not a memcached failure: that key alone is
not written, and it is logged as what it is.

The cache stores each key under a canonical, type-tagged text, so two distinct
keys never share an entry; keys of other types need ``key=``. This module is the
public face: the cache is ``_read_through``, the key encoding ``_keys``, the
clients' locks ``_clients``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .._extras import extra

with extra(__name__, "'batchy[memcache]'", "pymemcache"):
    from pymemcache.client.base import PooledClient

import batchy
from batchy import InvalidKeyError, LoaderError, UsageError, short_repr

from ..errors import DataSourceError
from ._clients import call_alone, server_of
from ._keys import not_text, safe_key
from ._read_through import CacheStats, ReadThrough
from ._serde import Unreadable, read_many, serde

__all__ = [
    "CacheStats",
    "DataSourceError",
    "InvalidKeyError",
    "LoaderError",
    "ReadThrough",
    "cached",
    "connect",
    "loader",
    "safe_key",
]

K = TypeVar("K")
V = TypeVar("V")


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
    An entry that cannot be unpickled (its class was renamed since) is a miss
    for :func:`cached` and an error for :func:`loader`, never ``None``.
    """
    host, sep, port = server.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UsageError(f"memcache.connect() takes 'host:port', got {server!r}")
    return PooledClient(
        (host, int(port)),
        serde=serde,
        timeout=timeout,
        connect_timeout=connect_timeout,
        max_pool_size=max_pool_size,
        no_delay=True,
    )


def loader(
    client: Any,
    *,
    prefix: str = "",
    name: str = "memcache",
    key: Callable[[Any], str] | None = None,
    max_batch_size: int | None = None,
    default: Any = None,
) -> batchy.Loader[Any, Any]:
    """A loader of memcached values: one ``get_many`` per round, run on a thread.

    A key is the text of a memcached key (after ``prefix``, made valid by
    :func:`safe_key`), so it must be a ``str``: other keys fail alone with
    :class:`~batchy.InvalidKeyError`, because ``1`` and ``"1"`` would read one
    entry. ``key=`` maps keys to that text (``key=str`` reads ``7`` as ``"7"``)
    and is the loader's batchy ``key=`` too, so such keys are one key.
    Missing keys get ``default``. memcached down fails the keys with
    :class:`DataSourceError` naming the loader and the server (use
    :func:`cached` for a cache that never fails a request)::

        sessions = memcache.loader(client, prefix="session:")
        session = await sessions(token)
    """
    host = server_of(client)

    def get_many(keys: list[Any]) -> list[Any]:
        values: list[Any] = [default] * len(keys)
        wanted: dict[str, list[int]] = {}  # memcached key -> the positions asking for it
        for i, k in enumerate(keys):
            text = k if key is None else key(k)
            if isinstance(text, str):
                wanted.setdefault(safe_key(prefix + text), []).append(i)
            else:
                values[i] = not_text(name, prefix, k, text, key is not None)  # fails it alone
        if not wanted:
            return values
        try:
            found = call_alone(client, read_many, client, list(wanted))
        except Exception as error:
            asked = [keys[i] for where in wanted.values() for i in where]
            failure = DataSourceError(
                f"loader {name!r} could not read memcached at {host} "
                f"({type(error).__name__}: {error}) for keys {short_repr(asked)}; check that "
                "memcached is running, or use memcache.cached(...) to fall back to the source",
                loader=name,
                keys=asked,
                host=host,
            )
            failure.__cause__ = error
            for where in wanted.values():
                for i in where:
                    values[i] = failure
            return values
        for mk, found_value in found.items():
            where = wanted.get(mk, [])
            value = found_value
            if isinstance(value, Unreadable):
                value = _unreadable(name, host, [keys[i] for i in where], value)
            for i in where:
                values[i] = value
        return values

    return batchy.Loader(
        get_many,
        name=name,
        thread=True,
        max_batch_size=max_batch_size,
        default=default,
        key=key,
    )


def _unreadable(name: str, host: str, keys: list[Any], entry: Unreadable) -> DataSourceError:
    return DataSourceError(
        f"loader {name!r} found an entry for key {short_repr(keys[0])} in memcached at {host} "
        f"that cannot be read ({entry.reason}); whoever wrote it used another format: write "
        "it again, or read it with a client whose serde matches the writer's",
        loader=name,
        keys=keys,
        host=host,
    )


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
    key: Callable[[K], Any] | None = None,
) -> ReadThrough[K, V]:
    """Put memcached in front of ``inner``: a loader that reads through to it on a miss.

    - ``ttl``: seconds a value stays in memcached (0: until evicted);
    - ``prefix``: memcached key prefix (default ``"<inner name>:"``), ending in
      ``:`` (or ``""``), so that no other cache's prefix and key spell one of this
      cache's keys; change it when the value format changes, to start from an
      empty cache;
    - ``timeout``: seconds to wait for memcached before serving from ``inner``;
    - ``retry_after``: seconds to leave memcached alone after it failed;
    - ``cache_none``: cache ``None`` results too (rows that do not exist);
    - ``key``: maps each key to a cache key of a supported type (None, bool, int,
      float, Decimal, str, bytes, UUID, date, datetime, or tuples of these),
      default ``inner``'s ``key=``; keys of other types fail with
      :class:`~batchy.InvalidKeyError`, since only these have a canonical text.

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
        key=key,
    )
