"""Which memcached clients may be used by two threads at once, and the one lock of each other one.

Why one lock per client, not per loader: a pymemcache ``Client`` is one socket,
and every loader and cache given that client calls it from worker threads. Two
calls at once interleave their commands and replies on the socket: one reads
the other's ``STORED`` or ``VALUE`` lines, or a socket the other just closed.
So every user of one such client takes the same lock, found here by the client
that owns the socket: wrappers (pymemcache's ``RetryingClient``) are seen through,
so two wrappers of one ``Client`` share its lock, and a wrapped pool takes none.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from pymemcache.client.base import PooledClient
from pymemcache.client.hash import HashClient
from pymemcache.client.retrying import RetryingClient

__all__ = ["call_alone", "lock_of", "server_of", "unwrapped"]

T = TypeVar("T")

_locks: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_strong: dict[int, tuple[Any, threading.Lock]] = {}  # clients that take no weak reference
_guard = threading.Lock()


def unwrapped(client: Any) -> Any:
    """The client under any pymemcache ``RetryingClient`` wrappers: the one that owns sockets.

    A ``RetryingClient`` answers every attribute it lacks with a function that
    calls the inner client's, so neither ``isinstance`` nor ``getattr`` sees through it.
    """
    while isinstance(client, RetryingClient):
        client = vars(client)["_client"]
    return client


def _thread_safe(client: Any) -> bool:
    """A pool of sockets (a thread takes one at a time); anything else may be one socket."""
    if isinstance(client, PooledClient):
        return True
    return isinstance(client, HashClient) and bool(getattr(client, "use_pooling", False))


def lock_of(client: Any) -> threading.Lock | None:
    """The lock every user of ``client``'s socket takes; ``None`` for a thread-safe client."""
    client = unwrapped(client)
    if _thread_safe(client):
        return None
    with _guard:
        try:
            lock = _locks.get(client)
            if lock is None:
                lock = _locks[client] = threading.Lock()
        except TypeError:  # no weak references: keep it (and its lock) for good
            lock = _strong.setdefault(id(client), (client, threading.Lock()))[1]
    return lock


def call_alone(client: Any, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` while no other thread uses ``client``, unless it is thread-safe."""
    lock = lock_of(client)
    if lock is None:
        return fn(*args, **kwargs)
    with lock:
        return fn(*args, **kwargs)


def server_of(client: Any) -> str:
    """``host:port`` of a client, for messages."""
    client = unwrapped(client)
    server = getattr(client, "server", None)
    if isinstance(server, tuple) and len(server) == 2:
        return f"{server[0]}:{server[1]}"
    return str(server) if server is not None else repr(client)
