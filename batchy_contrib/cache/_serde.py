"""Reading entries back: connect()'s format, and the marker of an entry that cannot be read.

The format is pymemcache's own (``pickle_serde``: bytes as they are, str and
int as text, anything else pickled, told apart by the flags), so entries are
shared with other pymemcache programs. What differs is reading an entry that
does not decode: a pickle of a class since renamed or removed (an older deploy
wrote it), bytes cut short, flags another serializer set (compression).
pymemcache's deserializer turns a bad pickle into ``None`` and returns other
flags' bytes raw, so a cache would answer "no such row" or a compressed blob
until the TTL. Here such an entry reads as :class:`Unreadable`, which the cache
treats as a miss (and overwrites) and a ``memcache.loader`` as that key's error.

A client of the user's own may have a serde that raises instead: pymemcache
then fails the whole ``get_many``. :func:`read_many` finds the entries it raised
on and makes them :class:`Unreadable` too, so one bad entry is not an outage.
"""

from __future__ import annotations

import pickle
from io import BytesIO
from typing import Any

from pymemcache.exceptions import MemcacheError
from pymemcache.serde import (
    FLAG_INTEGER,
    FLAG_LONG,
    FLAG_PICKLE,
    FLAG_TEXT,
    python_memcache_serializer,
)

__all__ = ["Unreadable", "read_many", "serde"]


class Unreadable:
    """An entry that could not be decoded: ``reason`` says why."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"<unreadable memcached entry: {self.reason}>"


class _Serde:
    """pymemcache's pickle format; an entry that does not decode is :class:`Unreadable`."""

    def serialize(self, key: str, value: Any) -> tuple[Any, int]:
        return python_memcache_serializer(key, value)  # type: ignore[no-any-return]

    def deserialize(self, key: str, value: bytes, flags: int) -> Any:
        try:
            if flags == 0:
                return value
            if flags == FLAG_TEXT:
                return value.decode("utf8")
            if flags in (FLAG_INTEGER, FLAG_LONG):
                return int(value)
            if flags == FLAG_PICKLE:
                return pickle.Unpickler(BytesIO(value)).load()
        except Exception as error:
            return Unreadable(f"{type(error).__name__}: {error}")
        return Unreadable(f"flags {flags}, which this format never writes (another serializer's?)")


serde = _Serde()


def read_many(client: Any, keys: list[str]) -> dict[str, Any]:
    """``client.get_many(keys)``, where an entry the serde raises on is :class:`Unreadable`.

    memcached's and the socket's own failures are raised: they are outages. Any
    other error can only be the serde's (pymemcache reads every entry before it
    returns, and closes the socket on an error, so the next call starts clean):
    the keys are asked again in halves until the ones that raise are alone. One
    bad entry among n keys costs about 2 log2(n) more calls, once: the cache
    writes it again.
    """
    try:
        return dict(client.get_many(keys))
    except (MemcacheError, OSError):
        raise
    except Exception as error:
        if len(keys) == 1:
            return {keys[0]: Unreadable(f"{type(error).__name__}: {error}")}
        half = len(keys) // 2
        return read_many(client, keys[:half]) | read_many(client, keys[half:])
