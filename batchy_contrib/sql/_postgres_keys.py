"""How the PostgreSQL loaders send keys: one untyped array, and which keys fail to be read.

Why untyped, as text: the server then reads each key as a value of the column
it meets (``= ANY(%s)``, or the ``COALESCE`` of :mod:`._build`), exactly as it
reads ``WHERE name = 'ADA'``: ``'7'`` finds 7 in an integer column, ``'ADA'``
finds ``'ada'`` in a ``citext`` one, and keys of mixed Python types share one
array. A typed array (psycopg's ``int2[]`` for small ints, ``text[]``) would
instead be compared as its own type: ``text`` against ``citext`` is
case-sensitive, ``smallint`` against ``varchar`` an error.

Why one bad key fails alone: a key the driver cannot encode (text with NUL or
a lone surrogate) stops the whole array before anything is sent, and a key the
server cannot read as the column's type (``'x'`` for an integer column) fails
the whole statement. :func:`unencodable` and :func:`unreadable` find those
keys, so the loader fails only them and sends the others again.

Why some keys are checked after the statement: ``date``, ``timestamp`` and
``time`` input drops, without a word, what the type has no room for: a
``date`` column reads ``'2024-01-01 00:00:01'`` as 2024-01-01, a ``timestamp``
one ``'2024-01-01 12:00+05:00'`` as 12:00. ``WHERE col = %s`` with the same
Python value compares it whole, so such a key would get a row it is not equal
to. And a ``bytes`` key's text is ``bytea`` input (``b'ada'`` is ``ada``,
``b'\\xff'`` is ``\\377``), which any other type reads as its own: a ``text``
column found the row ``'ada'``, and the row ``'\\377'``, where ``WHERE col = %s``
refuses bytes (no operator ``text = bytea``). :func:`misread` finds them from
the key column's type the result reports.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import psycopg
from psycopg.adapt import PyFormat, Transformer

__all__ = ["key_array", "misread", "unencodable", "unreadable"]

#: psycopg's text dumper per key type (one instance each: they keep no state per value).
_DUMPERS: dict[type, Any] = {}


def key_text(key: Any) -> str | None:
    """``key`` as the text the server reads (psycopg's own text form of its type)."""
    kind = type(key)
    if kind is str:
        return key  # type: ignore[no-any-return]
    if kind is int:
        return str(key)
    if key is None:
        return None
    if isinstance(key, uuid.UUID):
        return str(key)  # psycopg writes 32 hex digits; a text column holds the dashed form
    if isinstance(key, int) and not isinstance(key, bool):
        return str(int(key))  # an IntEnum is its number, not its name
    dumper = _DUMPERS.get(kind)
    if dumper is None:
        dumper = _DUMPERS[kind] = psycopg.adapters.get_dumper(kind, PyFormat.TEXT)(kind)
    data = dumper.upgrade(key, PyFormat.TEXT).dump(key)
    return None if data is None else bytes(data).decode()


def key_array(keys: Sequence[Any]) -> str | list[str | None]:
    """The one parameter of a loader statement: the keys as an untyped array.

    Int keys (ids: most batches) are written as the array literal directly,
    faster than psycopg quoting each element; other keys go as a list of
    strings, which psycopg sends as an untyped array too.
    """
    if all(type(k) is int for k in keys):
        return "{" + ",".join(map(str, keys)) + "}"
    return [key_text(k) for k in keys]


def client_side(error: BaseException) -> bool:
    """True if ``error`` came from encoding the parameters, before anything was sent."""
    if isinstance(error, psycopg.Error):
        return error.sqlstate is None and not isinstance(
            error, (psycopg.OperationalError, psycopg.InterfaceError)
        )
    return isinstance(error, (ValueError, TypeError))  # UnicodeEncodeError is a ValueError


def unencodable(keys: Sequence[Any]) -> dict[int, BaseException]:
    """The keys psycopg cannot encode, each tried alone, as psycopg encodes a parameter."""
    bad: dict[int, BaseException] = {}
    for i, k in enumerate(keys):
        try:
            Transformer().dump_sequence([key_array([k])], [PyFormat.AUTO])
        except Exception as error:
            bad[i] = error
    return bad


Rows = Callable[[str, Sequence[Any]], Awaitable[Any]]


async def unreadable(rows: Rows, sql: str, keys: Sequence[Any]) -> dict[int, BaseException]:
    """The keys the server cannot read as the type ``sql`` compares them with.

    Each probe is ``sql`` under ``LIMIT 0``: the server reads the array when it
    binds it, and then runs nothing. The first probe takes every key; if it
    passes, the statement failed for another reason and nothing is returned.
    Nor is anything when a probe with no key at all fails too: the statement
    fails by itself (a bad literal in it), and no key is to blame.
    Otherwise the keys are halved down to single keys, and a half whose sibling
    passed is known to fail unprobed: about ``log2(n) + 3`` probes for one bad
    key, on a path taken only when a statement already failed.

    The errors are :class:`psycopg.DataError` (``'x'`` for an integer column) or
    :class:`psycopg.IntegrityError`: a key the column's domain refuses.
    """
    # On lines of its own, so that a trailing "-- comment" ends before the
    # parenthesis; and without a final ";", which a subquery cannot have.
    probe = f"SELECT 1 FROM (\n{_body(sql)}\n) AS batchy__probe LIMIT 0"
    bad: dict[int, BaseException] = {}

    async def fails(positions: list[int]) -> BaseException | None:
        try:
            await rows(probe, [key_array([keys[i] for i in positions])])
        except (psycopg.DataError, psycopg.IntegrityError) as error:
            if error.sqlstate is None:
                raise
            return error
        return None

    async def find(positions: list[int], failing: bool) -> bool:
        """Note the bad keys among ``positions``; ``failing``: known to hold one."""
        if not failing or len(positions) == 1:
            error = await fails(positions)
            if error is None:
                return False
            if len(positions) == 1:
                bad[positions[0]] = error
                return True
        half = len(positions) // 2
        left = await find(positions[:half], False)
        return await find(positions[half:], not left) or left

    everyone = list(range(len(keys)))
    first = await fails(everyone)
    if first is None or await fails([]) is not None:
        return bad
    if len(keys) == 1:
        bad[0] = first
    else:
        await find(everyone, True)
    return bad


def _body(sql: str) -> str:
    """``sql`` without the semicolons (and blanks) it may end with."""
    body = sql.rstrip()
    while body.endswith(";"):
        body = body[:-1].rstrip()
    return body


_DATE, _TIMESTAMP, _TIME, _BYTEA = (
    psycopg.adapters.types[n].oid for n in ("date", "timestamp", "time", "bytea")
)
#: Key types psycopg sends as bytea (a domain over bytea reports bytea's type).
_BYTES = (bytes, bytearray, memoryview)


class MisreadKeyError(psycopg.DataError):
    """A key the column's type reads without a part of it (its UTC offset), or not as itself."""


def misread(
    keys: Sequence[Any], column: str, oid: int
) -> tuple[dict[int, BaseException], set[int]]:
    """The keys the column ``column`` (type ``oid``) read otherwise than ``WHERE column = key``.

    A ``bytes`` key against a column that is not ``bytea`` is an error, as
    ``WHERE column = key`` is. A datetime with a time of day against a ``date``
    column cannot equal any of its values: it is absent (no row, as ``WHERE col =
    key`` says). A key with a UTC offset against a ``date``/``timestamp``/``time``
    column is an error: the server read it without the offset, and what it
    equals depends on the session's time zone. Returns the bad keys by
    position, and which of them are only absent.
    """
    bad: dict[int, BaseException] = {}
    absent: set[int] = set()
    if oid and oid != _BYTEA and any(issubclass(t, _BYTES) for t in set(map(type, keys))):
        info = psycopg.adapters.types.get(oid)
        kind = info.name if info is not None else f"of the type with OID {oid}"
        for i, k in enumerate(keys):
            if isinstance(k, _BYTES):
                bad[i] = MisreadKeyError(
                    f"column {column!r} is {kind}, not bytea, and WHERE {column} = key refuses "
                    f"a bytes key (no operator {kind} = bytea); pass the key as the column's "
                    "type: key.decode() for text"
                )
    if oid not in (_DATE, _TIMESTAMP, _TIME):
        return bad, absent
    timed = datetime.time if oid == _TIME else datetime.datetime
    for i, k in enumerate(keys):
        if not isinstance(k, timed):
            continue
        if k.tzinfo is not None:
            kind = {_DATE: "date", _TIMESTAMP: "timestamp without time zone"}.get(oid, "time")
            bad[i] = MisreadKeyError(
                f"column {column!r} is {kind}, which reads the key without its UTC offset; "
                "pass it without tzinfo, in the zone the column's values are in"
            )
        elif isinstance(k, datetime.datetime) and oid == _DATE and k.time() != datetime.time(0):
            bad[i] = MisreadKeyError(f"column {column!r} is a date; the key has a time of day")
            absent.add(i)
    return bad, absent
