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
on and makes them :class:`Unreadable` too, so one bad entry is not an outage;
a client for which every call raises is one, found in a bounded number of calls.
"""

from __future__ import annotations

import pickle
import time
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


def search_budget(n: int) -> int:
    """The most ``get_many`` calls :func:`read_many` makes for ``n`` keys.

    Halving finds one bad entry in at most ``1 + 2 ceil(log2 n)`` calls, so this
    finds two exactly; more bad entries than that are a format change, and a
    client that raises on every call is no bad entry at all: neither may cost
    ``2n - 1`` calls (each a reconnect, under the client's lock).
    """
    return 2 + 4 * (n - 1).bit_length()


def read_many(client: Any, keys: list[str], *, within: float | None = None) -> dict[str, Any]:
    """``client.get_many(keys)``, where an entry the serde raises on is :class:`Unreadable`.

    memcached's and the socket's own failures are raised: they are outages. Any
    other error may be the serde's (pymemcache reads every entry before it
    returns, and closes the socket on an error, so the next call starts clean):
    the keys are asked again in halves until the ones that raise are alone. One
    bad entry among n keys costs about 2 log2(n) more calls, once: the cache
    writes it again.

    The search is bounded: at most :func:`search_budget` calls, and none begun
    after ``within`` seconds. If no call of it succeeded (two keys or more, and
    every set of them asked raised), the client is failing, not an entry: the
    first error is raised, as an outage. If the bound ends a search that had
    found readable entries, the keys not yet cleared are :class:`Unreadable`
    (the cache reloads and rewrites them; a loader fails them).
    """
    try:
        return dict(client.get_many(keys))
    except (MemcacheError, OSError):
        raise
    except Exception as error:
        if len(keys) == 1:
            return {keys[0]: _unreadable(error)}
        first = error
    deadline = None if within is None else time.monotonic() + within
    calls, budget, succeeded = 1, search_budget(len(keys)), False
    found: dict[str, Any] = {}
    pending = [keys[len(keys) // 2 :], keys[: len(keys) // 2]]  # popped from the end
    while pending:
        group = pending.pop()
        if calls >= budget or (deadline is not None and time.monotonic() >= deadline):
            if not succeeded:
                break
            found.update((k, _unreadable(first, together=len(keys))) for k in group)
            continue
        calls += 1
        try:
            found.update(client.get_many(group))
            succeeded = True
        except (MemcacheError, OSError):
            raise
        except Exception as error:
            if len(group) == 1:
                found[group[0]] = _unreadable(error)
            else:
                half = len(group) // 2
                pending += [group[half:], group[:half]]
    if not succeeded:
        first.add_note(
            f"memcached client {client!r}: every get_many of these {len(keys)} keys and of "
            f"parts of them raised ({calls} calls): taken as the client failing, not an entry"
        )
        raise first
    return found


def _unreadable(error: Exception, together: int = 1) -> Unreadable:
    reason = f"{type(error).__name__}: {error}"
    if together > 1:
        reason += (
            f"; it was read with other keys, some of whose entries cannot be read, and "
            f"there were too many of those among the {together} keys to tell which"
        )
    return Unreadable(reason)
