"""The memcached key of a cache key: type-tagged canonical text, escaped, hashed when too long.

Each of the three steps is injective, so distinct keys never share an entry by
construction, not by luck:

1. :func:`canonical` turns a key into a type tag and the value's canonical text.
   The tag comes from the key's exact type, so ``1``, ``1.0``, ``True``,
   ``Decimal(1)`` and ``"1"`` differ; equal values of one type give one text
   (``-0.0`` and ``0.0``, ``Decimal("1.0")`` and ``Decimal("1")``, aware datetimes
   of one instant). Tuples length-prefix their items. Nothing depends on
   ``hash()`` or ``id()``: the text is the same in every process.
2. :func:`escape` makes that text memcached-safe with ``%XX`` escapes (of the
   UTF-8 bytes) for everything but printable ASCII, and for ``%`` and ``:``.
   Escaping ``:`` means a prefix ending in ``:`` is always recovered as the
   text up to the last ``:``, so caches with different such prefixes never meet;
   :func:`check_prefix` refuses every other prefix but ``""`` (whose keys have
   no ``:`` at all), since ``"users"`` and ``"user"`` would meet at ``userssx``.
3. :func:`safe_key` leaves a valid key as it is and replaces anything else with
   a readable head, ``#`` and a SHA-256 of the whole text. A valid key that
   *looks* like such a replacement (it ends in ``#`` and 64 hex digits) is
   replaced too, so a kept key never equals a replacement.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import re
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from batchy import InvalidKeyError, UsageError, short_repr

__all__ = [
    "MAX_KEY",
    "SUPPORTED",
    "UnsupportedKey",
    "canonical",
    "check_prefix",
    "escape",
    "exact_key",
    "memcached_key",
    "not_text",
    "safe_key",
    "unsupported",
]

#: memcached's limit on key length, in bytes.
MAX_KEY = 250

#: The key types :func:`canonical` encodes, for error messages and the docs.
SUPPORTED = "None, bool, int, float, Decimal, str, bytes, UUID, date, datetime, or tuples of these"

_VALID = re.compile(r"[!-~]*")  # printable ASCII, no space: what memcached accepts
_DIGEST = re.compile(r"#[0-9a-f]{64}\Z")  # the tail of safe_key's replacement
_UNSAFE = re.compile(r"[^!-$&-9;-~]")  # escaped: not printable ASCII, or '%' or ':'
_UTC = dt.UTC
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=_UTC)
_MICROSECOND = dt.timedelta(microseconds=1)
# int -> str is refused above sys.get_int_max_str_digits() (640 digits at the
# least); ints longer than this many bits use hex, which has no such limit, so the
# text of an int never depends on how a process set that limit.
_DECIMAL_INT_BITS = 2000


class UnsupportedKey(Exception):
    """:func:`canonical` has no canonical text for a key; the message says why."""


def safe_key(text: str) -> str:
    """``text`` if it is a valid memcached key, else a readable head plus its SHA-256.

    A valid key is at most 250 bytes of printable ASCII with no spaces. Anything
    else (long keys, spaces, control or non-ASCII characters) becomes its first
    100 characters with the bad ones replaced, ``#``, and the SHA-256 of the whole
    text. A valid key that ends like such a replacement (``#`` and 64 hex digits)
    is replaced too, so distinct texts always give distinct keys::

        >>> safe_key("users:42")
        'users:42'
        >>> safe_key("users:a b")[:10]
        'users:a_b#'
    """
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= MAX_KEY and _VALID.fullmatch(text) and not _DIGEST.search(text):
        return text
    head = "".join(c if "!" <= c <= "~" else "_" for c in text[:100])
    return head + "#" + hashlib.sha256(raw).hexdigest()


def escape(text: str) -> str:
    """``text`` with ``%XX`` escapes for all but printable ASCII, and for ``%`` and ``:``."""
    return _UNSAFE.sub(_percent, text)


def _percent(match: re.Match[str]) -> str:
    # surrogatepass: a str may hold lone surrogates, and they must stay distinct too.
    return "".join(f"%{b:02X}" for b in match.group().encode("utf-8", "surrogatepass"))


def canonical(key: Any) -> str:
    """The type tag and canonical text of ``key``; :class:`UnsupportedKey` for other types.

    ``None``: ``n``; bools: ``b0``/``b1``; ints: ``i`` and decimal digits (``I`` and
    hex digits past 2,000 bits); floats: ``f`` and ``repr``; Decimals: ``d`` and
    digits ``e`` exponent; str: ``s`` and the text; bytes: ``y`` and hex; UUIDs:
    ``u`` and hex; dates: ``D`` and ISO; naive datetimes: ``t`` and ISO; aware
    datetimes: ``T`` and ISO in UTC; tuples: ``(``, each item's text preceded by
    its length and ``|``, ``)``.
    """
    # The exact type, not isinstance: a subclass (an IntEnum, a NamedTuple) may
    # compare or print differently, so it must say how it maps with key=.
    encode = _ENCODERS.get(type(key))
    if encode is None:
        raise UnsupportedKey(f"{type(key).__qualname__} is not a supported key type")
    return encode(key)


def _int(key: int) -> str:
    if key.bit_length() <= _DECIMAL_INT_BITS:
        return f"i{key}"
    return f"I{key:x}"


def _float(key: float) -> str:
    if math.isnan(key):
        raise UnsupportedKey("float('nan') equals nothing, not even itself")
    # 0.0 == -0.0 (one dict entry, one batch key), so one cache entry too.
    return "f0.0" if key == 0 else f"f{key!r}"


def _decimal(key: Decimal) -> str:
    if key.is_nan():
        raise UnsupportedKey(f"{key!r} equals nothing, not even itself")
    sign, digits, exponent = key.as_tuple()
    minus = "-" if sign else ""
    if key.is_infinite():
        return f"d{minus}inf"
    # Exact, without a context (normalize() would round to the context's precision):
    # the digits without leading or trailing zeros and the exponent that goes with them.
    text = "".join(map(str, digits)).lstrip("0")
    kept = text.rstrip("0")
    if not kept:
        return "d0"  # Decimal("-0") == Decimal("0E+5") == 0
    return f"d{minus}{kept}e{int(exponent) + len(text) - len(kept)}"


def _datetime(key: dt.datetime) -> str:
    if key.utcoffset() is None:
        return f"t{key.isoformat()}"
    # Aware: by its instant, as == and hash() see it, so one instant is one entry.
    try:
        return f"T{key.astimezone(_UTC).replace(tzinfo=None).isoformat()}"
    except OverflowError:  # within a day of year 1 or 9999: microseconds since 1970
        return f"T@{(key - _EPOCH) // _MICROSECOND}"


def _tuple(key: tuple[Any, ...]) -> str:
    items = []
    for item in key:
        try:
            text = canonical(item)
        except UnsupportedKey as error:
            raise UnsupportedKey(f"it holds {short_repr(item)}: {error}") from None
        items.append(f"{len(text)}|{text}")
    return "(" + "".join(items) + ")"


_ENCODERS: dict[type, Callable[[Any], str]] = {
    type(None): lambda key: "n",
    bool: lambda key: "b1" if key else "b0",
    int: _int,
    float: _float,
    Decimal: _decimal,
    str: lambda key: f"s{key}",
    bytes: lambda key: f"y{key.hex()}",
    uuid.UUID: lambda key: f"u{key.hex}",
    dt.date: lambda key: f"D{key.isoformat()}",
    dt.datetime: _datetime,
    tuple: _tuple,
}


def check_prefix(owner: str, prefix: Any) -> str:
    """``prefix`` if it ends in ``:`` or is ``""``, else a :class:`~batchy.UsageError`.

    The key's text follows the prefix and never holds a ``:``, so only then is
    the prefix all of the memcached key up to its last ``:`` (or, for ``""``,
    a key with no ``:``), and two caches with different prefixes never read
    each other's entries. ``owner`` is how the error names the cache.
    """
    if isinstance(prefix, str) and (prefix == "" or prefix.endswith(":")):
        return prefix
    if isinstance(prefix, str):
        got, fix = repr(prefix), f"pass prefix={prefix + ':'!r}"
    else:
        got, fix = f"{short_repr(prefix)} ({type(prefix).__name__})", "pass a str"
    raise UsageError(
        f"{owner} prefix= must end in ':' (or be ''), got {got}: a memcached key is the "
        "prefix and then the key's text, so without the ':' another cache's prefix and "
        "key could spell the same memcached key ('users' and 'x' are 'userssx', as are "
        f"'user' and 'sx') and each would read the other's values; {fix}"
    )


def memcached_key(prefix: str, key: Any) -> str:
    """The memcached key of ``key`` in the cache whose keys start with ``prefix``."""
    return safe_key(prefix + escape(canonical(key)))


def exact_key(prefix: str, key: Any) -> str:
    """The memcached key of ``key`` told apart from every key of another type or ``repr``.

    For an inner loader whose ``key=`` gives what :func:`canonical` refuses: any
    ``key=`` is a function of the key, so keys of one exact type and one ``repr``
    (one value, for the supported types) have one cache key; and keys that
    :func:`canonical` makes one (``Decimal("1.0")``, ``Decimal("1")``) stay
    apart by their ``repr``. The ``r`` tag is no other text's first letter, and
    the canonical text is length-prefixed, as a tuple's items are.
    """
    text = canonical(key)
    return safe_key(prefix + escape(f"r{len(text)}|{text}{key!r}"))


# -- the errors of keys that have no memcached key ------------------------------------


def unsupported(loader: str, key: Any, ck: Any, error: Exception) -> InvalidKeyError:
    """The error of a read-through cache's key that :func:`memcached_key` refused."""
    what = f"key {short_repr(key)} ({type(key).__name__})"
    if ck is not key:
        what += f", cache key {short_repr(ck)} from key=,"
    if isinstance(error, UnsupportedKey):
        reason = str(error)
    else:  # key= raised, or the utcoffset() of an odd tzinfo did
        reason = f"computing it raised {short_repr(error)}"
    return InvalidKeyError(
        f"loader {loader!r} cannot keep {what} in memcached: {reason}. A cached key "
        f"must be {SUPPORTED} (exact types), so that two keys never share an entry; pass "
        "key= to memcache.cached(...) to map keys to one (say key=lambda user: user.id)",
        loader=loader,
        key=key,
    )


def not_text(loader: str, prefix: str, key: Any, text: Any, by_key_fn: bool) -> InvalidKeyError:
    """The error of a ``memcache.loader`` key that is not (or whose ``key=`` is not) a str."""
    if by_key_fn:
        problem = (
            f"got {short_repr(text)} ({type(text).__name__}) from key= for key {short_repr(key)}"
        )
        fix = "make key= return a str"
    else:
        problem = f"got key {short_repr(key)} ({type(key).__name__})"
        fix = f"call it with str keys, or pass key=str to read {short_repr(key)} as {str(key)!r}"
    return InvalidKeyError(
        f"loader {loader!r} {problem}; its keys are the text of memcached keys (after prefix "
        f"{prefix!r}), so they must be str, or 1 and '1' would read one entry: {fix}",
        loader=loader,
        key=key,
    )
