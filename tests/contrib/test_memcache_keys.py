"""memcached keys: one entry per distinct key, the same in every process; refusals named and alone.

The property tests pin the encoding (``batchy_contrib.cache._keys``); the tests on a
real memcached pin what the server is asked for, and what each caller gets back.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import batchy
from batchy import InvalidKeyError
from batchy.testing import record
from batchy_contrib.cache import memcache
from batchy_contrib.cache._keys import canonical, escape, exact_key, memcached_key, safe_key

# -- the encoding, as properties --------------------------------------------------------

offsets = st.integers(-86_399, 86_399).map(lambda s: dt.timezone(dt.timedelta(seconds=s)))
# Texts made of the characters the encoding gives a meaning to, so that hypothesis
# looks for a tuple whose items' texts could be read another way, or an escape that
# could be mistaken for a character.
tricky = st.text(st.sampled_from("|():%#_sitn0123456789 é\x00\ud800"), max_size=8)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(2**1990, 2**2010) | st.integers(-(2**2010), -(2**1990)),  # decimal | hex
    st.floats(allow_nan=False),
    st.decimals(allow_nan=False),
    st.text(st.characters(exclude_categories=["Cn"])),  # surrogates too
    tricky,
    st.binary(),
    st.uuids(),
    st.dates(),
    st.datetimes(),
    st.datetimes(timezones=offsets),
)
keys = st.recursive(scalars, lambda items: st.lists(items, max_size=4).map(tuple), max_leaves=12)


def same(a: Any, b: Any) -> bool:
    """One key: equal and of the same types all the way down (1 and True are two keys)."""
    if type(a) is not type(b):
        return False
    if type(a) is tuple:
        return len(a) == len(b) and all(map(same, a, b))
    return bool(a == b)


def valid(mkey: str) -> bool:
    raw = mkey.encode()
    return len(raw) <= 250 and all(0x21 <= b <= 0x7E for b in raw)


# A decoder: the encoding is injective because this gives every key back from its text.

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class Instant:
    """An aware datetime as the encoding sees it: its instant (equal instants are one key)."""

    micros: int


def normal(key: Any) -> Any:
    if type(key) is tuple:
        return tuple(map(normal, key))
    if type(key) is dt.datetime and key.utcoffset() is not None:
        return Instant((key - EPOCH) // dt.timedelta(microseconds=1))
    return key


def unescape(text: str) -> str:
    assert ":" not in text and all("!" <= c <= "~" for c in text), text
    raw, i = bytearray(), 0
    while i < len(text):
        if text[i] == "%":
            raw.append(int(text[i + 1 : i + 3], 16))
            i += 3
        else:
            raw += text[i].encode()
            i += 1
    return raw.decode("utf-8", "surrogatepass")


def decode(text: str) -> Any:
    tag, body = text[0], text[1:]
    if tag == "(":
        assert body.endswith(")")
        items, body = [], body[:-1]
        while body:
            size, _, body = body.partition("|")
            items.append(decode(body[: int(size)]))
            body = body[int(size) :]
        return tuple(items)
    if tag == "T":
        if body.startswith("@"):
            return Instant(int(body[1:]))
        return normal(dt.datetime.fromisoformat(body).replace(tzinfo=dt.UTC))
    if tag == "d" and body not in ("inf", "-inf", "0"):
        digits, exponent = body.split("e")
        return Decimal(f"{digits}E{exponent}")
    scalar: dict[str, Callable[[str], Any]] = {
        "n": lambda b: {"": None}[b],
        "b": lambda b: {"0": False, "1": True}[b],
        "i": int,
        "I": lambda b: int(b, 16),
        "f": float,
        "d": Decimal,
        "s": str,
        "y": bytes.fromhex,
        "u": lambda b: uuid.UUID(hex=b),
        "D": dt.date.fromisoformat,
        "t": dt.datetime.fromisoformat,
    }
    return scalar[tag](body)


@settings(max_examples=1000, deadline=None)
@given(keys)
def test_every_key_can_be_read_back_from_its_text(key: Any) -> None:
    """So no two keys have one text: injective by construction, as the decoder shows."""
    assert same(decode(unescape(escape(canonical(key)))), normal(key))
    assert valid(memcached_key("t:", key))


@settings(max_examples=500, deadline=None)
@given(st.lists(keys, max_size=8))
def test_distinct_keys_never_share_an_entry(batch: list[Any]) -> None:
    """Every pair of a batch: one entry exactly when they are one key."""
    mkeys = [memcached_key("t:", k) for k in batch]
    for i, (a, ma) in enumerate(zip(batch, mkeys, strict=True)):
        for b, mb in zip(batch[i + 1 :], mkeys[i + 1 :], strict=True):
            assert (ma == mb) == same(a, b), (a, b, ma)


@settings(max_examples=300, deadline=None)
@given(st.lists(keys, max_size=8))
def test_exact_keys_meet_only_each_other_and_never_a_canonical_one(batch: list[Any]) -> None:
    """The fallback of an inner key= without text: one entry per type and repr, its own space."""
    for a in batch:
        assert exact_key("t:", a) != memcached_key("t:", a)
        for b in batch:
            same_text = type(a) is type(b) and repr(a) == repr(b)
            assert (exact_key("t:", a) == exact_key("t:", b)) == same_text, (a, b)
            assert exact_key("t:", a) != memcached_key("t:", b)


# Keys that are equal, or nearly: 1 and True, a tuple and the texts of its items, an
# escape and the character it stands for. Random pairs seldom meet these.
POOL = [
    *(None, True, False, 0, 1, -1, 1.0, -0.0, 0.0, Decimal(1), Decimal("1.0"), Decimal("-0")),
    *("", "1", "i1", "s", "|", "1|i1", "2|i1", "()", "(", ")", ":", "%", "%3A", "#", " ", "%20"),
    *(b"", b"1", b"i1", dt.date(2024, 1, 1), dt.datetime(2024, 1, 1)),
    *(dt.datetime(2024, 1, 1, tzinfo=dt.UTC), uuid.UUID(int=1)),
]


def one_key(key: Any) -> Any:
    """A dict key that is equal exactly when :func:`same` is true."""
    if type(key) is tuple:
        return ("tuple", tuple(map(one_key, key)))
    return (type(key).__name__, key)


def test_every_small_key_of_a_pool_has_one_entry_of_its_own() -> None:
    """All keys of up to three items of POOL: one entry per key, one key per entry."""
    candidates: list[Any] = [*POOL, *((a,) for a in POOL), *((a, b) for a in POOL for b in POOL)]
    candidates += [((a,), b) for a in POOL for b in POOL] + [(a, (b,)) for a in POOL for b in POOL]
    entries: dict[str, set[Any]] = {}
    keys_of: dict[Any, set[str]] = {}
    for key in candidates:
        mkey = memcached_key("t:", key)
        entries.setdefault(mkey, set()).add(one_key(key))
        keys_of.setdefault(one_key(key), set()).add(mkey)
    assert [k for k, e in entries.items() if len(e) > 1] == []
    assert [k for k, m in keys_of.items() if len(m) > 1] == []


@settings(max_examples=300, deadline=None)
@given(keys)
def test_a_key_and_its_neighbours_have_their_own_entries(a: Any) -> None:
    """The key against keys built from it: wrapped, stringified, of another type."""
    mine = memcached_key("t:", a)
    for other in [(a,), (a, a), ((a,),), str(a), repr(a), (str(a),), ()]:
        if not same(a, other):
            assert memcached_key("t:", other) != mine, other


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1), keys, st.text(min_size=1), keys)
@example("users", "x:sy", "users:sx", "y")  # "users:sx:sy" both, were ':' not escaped
def test_caches_with_prefixes_ending_in_a_colon_never_meet(
    p1: str, a: Any, p2: str, b: Any
) -> None:
    if p1 + ":" != p2 + ":" or not same(a, b):
        assert memcached_key(p1 + ":", a) != memcached_key(p2 + ":", b)


@batchy.batched(name="plain")
def plain(keys: list[Any]) -> list[Any]:
    return keys


@dataclass(frozen=True)
class Marked:
    """What an inner key= may return that has no text (the SQL loaders' marker)."""

    key: Any


marked = batchy.Loader(plain.fn, name="marked", key=Marked)  # its caches use exact_key()

# Prefixes near each other: ends and no ends in ':', and long ones (the hashed keys).
near = st.text(st.sampled_from("us:er%#é x"), max_size=8)
prefixes = st.one_of(
    st.just(""),
    near,
    near.map(lambda t: t + ":"),
    st.tuples(near, st.integers(200, 260)).map(lambda t: t[0] + "p" * t[1] + ":"),
)


def cache_keys(prefix: str, key: Any) -> list[str] | None:
    """The memcached keys of ``key`` in a cache over each kind of loader; None if refused."""
    try:
        caches = [memcache.cached(inner, None, prefix=prefix) for inner in (plain, marked)]
    except batchy.UsageError:
        return None
    return [cache.memcache_key(key) for cache in caches]


@settings(max_examples=500, deadline=None)
@given(prefixes, keys, prefixes, keys)
@example("users", "x", "user", "sx")  # both "userssx", when any prefix was taken
@example("", "ssx", "s", "sx")  # both "sssx"
def test_caches_with_different_prefixes_never_meet(p1: str, a: Any, p2: str, b: Any) -> None:
    """Any two prefixes a cache takes, any keys, plain or exact, short or hashed."""
    mine, theirs = cache_keys(p1, a), cache_keys(p2, b)
    if mine is None or theirs is None or (p1 == p2 and same(a, b)):
        return
    if p1 != p2:
        assert set(mine).isdisjoint(theirs), (mine, theirs)
    else:
        assert mine[0] != theirs[0], mine


@pytest.mark.parametrize(
    ("prefix", "got", "fix"),
    [
        ("users", "'users'", "pass prefix='users:'"),
        ("v2:users", "'v2:users'", "pass prefix='v2:users:'"),
        (7, "7 (int)", "pass a str"),
    ],
)
def test_a_prefix_must_end_in_a_colon(prefix: Any, got: str, fix: str) -> None:
    with pytest.raises(batchy.UsageError) as caught:
        memcache.cached(plain, None, prefix=prefix)
    assert str(caught.value) == (
        f"memcache.cached(plain) prefix= must end in ':' (or be ''), got {got}: a memcached "
        "key is the prefix and then the key's text, so without the ':' another cache's "
        "prefix and key could spell the same memcached key ('users' and 'x' are 'userssx', "
        f"as are 'user' and 'sx') and each would read the other's values; {fix}"
    )
    assert memcache.cached(plain, None, prefix="").memcache_key(7) == "i7"
    assert memcache.cached(plain, None, prefix="v2:users:").memcache_key(7) == "v2:users:i7"


@settings(max_examples=500, deadline=None)
@given(st.text(), st.text() | st.text().map(safe_key) | st.text().map(lambda t: "a_b#" + t))
def test_safe_key_keeps_distinct_texts_distinct(a: str, b: str) -> None:
    """Also when one text is another's replacement: a kept key never looks like one."""
    assert valid(safe_key(a))
    assert (safe_key(a) == safe_key(b)) == (a == b)
    assert safe_key(safe_key(a)) != safe_key(a) or safe_key(a) == a


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (0.0, -0.0),
        (Decimal("1.0"), Decimal("1")),
        (Decimal("0E+5"), Decimal("-0")),
        (Decimal("1E+2"), Decimal("100")),
        (
            dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC),
            dt.datetime(2024, 1, 1, 14, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        ),
        (  # past datetime.max in UTC: the instant as microseconds since 1970
            dt.datetime.max.replace(tzinfo=dt.timezone(dt.timedelta(hours=-5))),
            (dt.datetime.max - dt.timedelta(hours=1)).replace(
                tzinfo=dt.timezone(dt.timedelta(hours=-6))
            ),
        ),
    ],
)
def test_equal_keys_of_one_type_share_their_entry(a: Any, b: Any) -> None:
    """They are one key to batchy (one dict entry, one batch key), so one entry here too."""
    assert a == b and memcached_key("t:", a) == memcached_key("t:", b)


def test_equal_keys_of_different_types_do_not() -> None:
    one = [1, 1.0, True, Decimal(1), "1", b"1", (1,)]
    assert len({memcached_key("t:", k) for k in one}) == len(one)
    naive = dt.datetime(2024, 1, 1, 12)
    assert memcached_key("t:", naive) != memcached_key("t:", naive.replace(tzinfo=dt.UTC))


def test_the_documented_spellings() -> None:
    """The keys the memcache guide shows, character for character."""
    assert [memcached_key("users:", k) for k in (7, "7", (7, "en"), None, 7.5)] == [
        "users:i7",
        "users:s7",
        "users:(2|i73|sen)",
        "users:n",
        "users:f7.5",
    ]
    assert memcached_key("users:", "a b:c") == "users:sa%20b%3Ac"
    long = memcached_key("users:", "x" * 300)
    assert long.startswith("users:s" + "x" * 93 + "#") and len(long) == 100 + 1 + 64


# -- the same entry in every process ----------------------------------------------------

SAMPLES = """[
    None, True, False, 0, 1, -7, 2**70, 2**2000, 2**3000, 1.5, -0.0, float("inf"),
    Decimal("1.10"), Decimal("-0"), Decimal("1E+30"), "a", "a b", "é", ":%#|", "x" * 300,
    b"", b"\\x00\\xff", UUID(int=7), date(2024, 2, 29), datetime(2024, 2, 29, 12, 0, 1, 5),
    datetime(2024, 2, 29, 12, tzinfo=timezone(timedelta(hours=-3))), (),
    (1, ("a", b"b", (None,))), ("k",) * 40,
]"""

PROGRAM = f"""
import json
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from uuid import UUID

import batchy
from batchy_contrib.cache import memcache


@batchy.batched(name="samples")
def samples(keys):
    return keys


cached = memcache.cached(samples, None, prefix="p:")
print(json.dumps([cached.memcache_key(k) for k in {SAMPLES}]))
"""


def keys_in_a_new_process(**env: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    found: list[str] = json.loads(out.stdout)
    return found


def test_a_key_has_the_same_entry_in_every_process() -> None:
    """No hash(), no id(): other hash seeds (and int-to-str limits) give the same keys."""
    here: dict[str, Any] = {}
    exec(PROGRAM.replace("print(", "result = ("), here)
    mine = json.loads(here["result"])
    assert len(set(mine)) == len(mine)
    assert keys_in_a_new_process(PYTHONHASHSEED="0") == mine
    assert keys_in_a_new_process(PYTHONHASHSEED="4242", PYTHONINTMAXSTRDIGITS="640") == mine


# -- on a real memcached ----------------------------------------------------------------


@pytest.fixture
def client(memcached: tuple[str, int]) -> Any:
    host, port = memcached
    return memcache.connect(f"{host}:{port}")


@pytest.fixture
def prefix() -> str:
    return f"k{uuid.uuid4().hex[:10]}:"  # a fresh namespace per test


class Recording:
    """A client that remembers the keys of each get_many it sends to the server."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.get_many_keys: list[list[str]] = []

    def get_many(self, keys: list[str]) -> Any:
        self.get_many_keys.append(list(keys))
        return self.client.get_many(keys)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


async def load(loader: batchy.Loader[Any, Any], keys: list[Any]) -> list[Any]:
    async with batchy.scope():
        return await batchy.gather(*(loader(k) for k in keys), return_exceptions=True)


class Handle:
    """A key type with the default repr, "<... object at 0x...>": addresses are reused."""

    def __init__(self, n: int) -> None:
        self.n = n


@batchy.batched(name="handles")
async def handles(keys: list[Any]) -> list[Any]:
    return [k.n if isinstance(k, Handle) else f"value of {k!r}" for k in keys]


async def test_a_key_without_a_canonical_text_is_refused_not_mixed_up(
    client: Any, prefix: str
) -> None:
    """repr(key) held an address, reused after gc: most lookups got another key's value."""
    cached = memcache.cached(handles, client, prefix=prefix)
    got = [(await load(cached, [Handle(n)]))[0] for n in range(200)]
    assert [g for g in got if not isinstance(g, InvalidKeyError)] == []
    assert str(got[0]) == (
        f"loader 'cached(handles)' cannot keep key <{Handle.__module__}.Handle object at "
        f"{hex(id(got[0].key))}> (Handle) in memcached: Handle is not a supported key type. "
        "A cached key must be None, bool, int, float, Decimal, str, bytes, UUID, date, "
        "datetime, or tuples of these (exact types), so that two keys never share an entry; "
        "pass key= to memcache.cached(...) to map keys to one (say key=lambda user: user.id)"
    )
    assert cached.stats.hits == 0 and cached.stats.sets == 0


async def test_a_refused_key_fails_alone(client: Any, prefix: str) -> None:
    cached = memcache.cached(handles, client, prefix=prefix)
    with record() as rec:
        one, bad, nan, nested = await load(
            cached, [1, Handle(2), float("nan"), (1, frozenset({2}))]
        )
    assert one == "value of 1"
    assert rec.calls(handles) == [[1]]
    assert isinstance(bad, InvalidKeyError) and bad.loader == "cached(handles)"
    assert str(nan).startswith(
        "loader 'cached(handles)' cannot keep key nan (float) in memcached: float('nan') "
        "equals nothing, not even itself. A cached key must be"
    )
    assert str(nested).startswith(
        "loader 'cached(handles)' cannot keep key (1, frozenset({2})) (tuple) in memcached: it "
        "holds frozenset({2}): frozenset is not a supported key type. A cached key must be"
    )


async def test_key_maps_other_keys_to_their_own_entries(client: Any, prefix: str) -> None:
    cached = memcache.cached(handles, client, prefix=prefix, key=lambda h: h.n)
    got = [(await load(cached, [Handle(n)]))[0] for n in range(20)]
    assert got == list(range(20))
    assert cached.memcache_key(Handle(3)) == f"{prefix}i3"
    assert [(await load(cached, [Handle(n)]))[0] for n in range(20)] == list(range(20))
    assert cached.stats.hits == 20


async def test_a_key_function_that_raises_is_reported(client: Any, prefix: str) -> None:
    def broken(key: Any) -> Any:
        raise ValueError("no id")

    cached = memcache.cached(handles, client, prefix=prefix, key=broken)
    with pytest.raises(InvalidKeyError) as caught:
        cached.delete(Handle(1))
    assert f"cannot keep key <{Handle.__module__}.Handle object at " in str(caught.value)
    assert "in memcached: computing it raised ValueError('no id'). A cached key" in str(
        caught.value
    )


async def test_one_int_and_one_str_in_one_batch_of_the_cache(client: Any, prefix: str) -> None:
    recording = Recording(client)
    cached = memcache.cached(handles, recording, prefix=prefix)
    assert await load(cached, [1, "1"]) == ["value of 1", "value of '1'"]
    assert recording.get_many_keys == [[f"{prefix}i1", f"{prefix}s1"]]
    assert await load(cached, [1, "1"]) == ["value of 1", "value of '1'"]
    assert cached.stats.hits == 2


async def test_keys_that_batchy_thinks_equal_have_their_own_entries(
    client: Any, prefix: str
) -> None:
    """1 == 1.0 == True == Decimal(1): one key within a scope, but one entry per type."""
    cached = memcache.cached(handles, client, prefix=prefix)
    ones = [1, 1.0, True, Decimal(1)]
    for k in ones:  # one scope each: within one scope batchy sends only the first
        assert await load(cached, [k]) == [f"value of {k!r}"]
    assert [client.get(cached.memcache_key(k)) for k in ones] == [f"value of {k!r}" for k in ones]


async def test_the_loader_reads_str_keys_only_so_1_and_str_1_do_not_share(
    client: Any, prefix: str
) -> None:
    """1 and "1" read one entry, "1", and in one batch the int got None."""
    client.set(f"{prefix}1", "one", noreply=False)
    recording = Recording(client)
    numbers = memcache.loader(recording, prefix=prefix, name="numbers")
    with record() as rec:
        as_int, as_str = await load(numbers, [1, "1"])
    assert rec.calls(numbers) == [[1, "1"]]
    assert recording.get_many_keys == [[f"{prefix}1"]]  # the int is not asked for
    assert as_str == "one"
    assert isinstance(as_int, InvalidKeyError)
    assert str(as_int) == (
        f"loader 'numbers' got key 1 (int); its keys are the text of memcached keys (after "
        f"prefix {prefix!r}), so they must be str, or 1 and '1' would read one entry: call "
        "it with str keys, or pass key=str to read 1 as '1'"
    )


async def test_the_loader_with_key_str_reads_1_as_its_text(client: Any, prefix: str) -> None:
    client.set(f"{prefix}1", "one", noreply=False)
    recording = Recording(client)
    numbers = memcache.loader(recording, prefix=prefix, name="numbers", key=str)
    with record() as rec:
        assert await load(numbers, [1, "1", 2]) == ["one", "one", None]
    assert rec.calls(numbers) == [[1, 2]]  # key=str: 1 and "1" are one key
    assert recording.get_many_keys == [[f"{prefix}1", f"{prefix}2"]]
    odd = memcache.loader(client, prefix=prefix, name="odd", key=lambda k: k)
    (error,) = await load(odd, [3])
    assert str(error).startswith("loader 'odd' got 3 (int) from key= for key 3; its keys")
    assert str(error).endswith("would read one entry: make key= return a str")


async def test_a_key_shaped_like_a_hashed_key_does_not_read_its_entry(
    client: Any, prefix: str
) -> None:
    """ "a_b#<sha of 'a b'>" was a valid key, kept as it was: the entry of "a b"."""
    client.set(memcache.safe_key(f"{prefix}a b"), "spaced", noreply=False)
    twin = "a_b#" + hashlib.sha256(f"{prefix}a b".encode()).hexdigest()
    texts = memcache.loader(client, prefix=prefix, name="texts")
    assert await load(texts, ["a b", twin]) == ["spaced", None]
    assert memcache.safe_key("a_b#" + hashlib.sha256(b"a b").hexdigest()) != memcache.safe_key(
        "a b"
    )


@pytest.mark.parametrize("wrapped", [False, True])
async def test_a_value_that_cannot_be_pickled_fails_its_write_alone(
    client: Any, prefix: str, caplog: pytest.LogCaptureFixture, wrapped: bool
) -> None:
    """Not a memcached failure: the other values are written, memcached stays in use.

    Through a RetryingClient, every value of the write was taken as unserializable:
    the wrapper answered ``serde`` with a function, which has no ``serialize``.
    """
    from pymemcache.client.retrying import RetryingClient

    @batchy.batched(name="things")
    async def things(keys: list[int]) -> list[Any]:
        return [threading.Lock() if k < 0 else {"k": k} for k in keys]

    cached = memcache.cached(
        things, RetryingClient(client) if wrapped else client, prefix=prefix, retry_after=30
    )
    with caplog.at_level(logging.WARNING, logger="batchy_contrib.cache.memcache"):
        lock, two = await load(cached, [-1, 2])
        assert await load(cached, [-3, 4]) != []  # a second lock: not warned about again
    assert type(lock) is type(threading.Lock()) and two == {"k": 2}  # served all the same
    assert (cached.stats.errors, cached.stats.sets) == (0, 2)
    assert client.get(cached.memcache_key(2)) == {"k": 2}
    assert client.get(cached.memcache_key(-1)) is None
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith(
        "loader 'cached(things)' did not store key -1 in memcached: its value <unlocked "
        "_thread.lock object at "
    )
    assert message.endswith(
        "(lock) cannot be serialized (TypeError: cannot pickle '_thread.lock' object); the "
        "key is read from 'things' each time, memcached stays in use (more values of this "
        "type are logged at DEBUG)"
    )
    with record() as rec:
        assert await load(cached, [2, 5]) == [{"k": 2}, {"k": 5}]
    assert rec.calls(things) == [[5]]  # 2 from memcached: it was not switched off
    assert cached.stats.skipped == 0
