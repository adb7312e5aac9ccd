"""memcached on a real server: the get_many loader, the read-through cache, invalidation, outages."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Any

import pytest
from contrib_helpers import closed_port
from hypothesis import given, settings
from hypothesis import strategies as st

import batchy
from batchy.testing import record
from batchy_contrib.cache import memcache
from batchy_contrib.cache._serde import Unreadable, read_many, search_budget
from batchy_contrib.cache.memcache import DataSourceError

DATA = {i: {"id": i, "name": f"user{i}"} for i in range(1, 10)}


def make_inner(name: str = "users") -> batchy.Loader[int, Any]:
    @batchy.batched(name=name)
    async def users(ids: list[int]) -> list[Any]:
        await asyncio.sleep(0.001)
        return [DATA.get(i) if i != 666 else ValueError(f"user {i} is cursed") for i in ids]

    return users


@pytest.fixture
def client(memcached: tuple[str, int]) -> Any:
    host, port = memcached
    return memcache.connect(f"{host}:{port}")


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}:"  # a fresh namespace per test


async def load(loader: batchy.Loader[Any, Any], keys: list[Any]) -> list[Any]:
    async with batchy.scope():
        return await batchy.gather(*(loader(k) for k in keys), return_exceptions=True)


# -- keys -------------------------------------------------------------------------------


def test_safe_keys_pass_through_and_bad_ones_are_hashed() -> None:
    assert memcache.safe_key("users:42") == "users:42"
    odd = ["a b", "tab\there", "new\nline", "nul\x00", "é", "x" * 251, "del\x7f"]
    safe = [memcache.safe_key(k) for k in odd]
    for s in safe:
        raw = s.encode()
        assert len(raw) <= 250 and all(0x21 <= b <= 0x7E for b in raw), s
    assert len(set(safe)) == len(odd)
    assert safe[0].startswith("a_b#") and len(safe[0]) == 4 + 64
    assert memcache.safe_key("x" * 250) == "x" * 250
    assert memcache.safe_key("a b") == safe[0]  # deterministic


async def test_odd_keys_round_trip_through_memcached(client: Any, prefix: str) -> None:
    keys = ["a b", "ctl\r\n", "é", "x" * 300, ("tuple", 1), 1, "1"]
    values = {k: f"v{i}" for i, k in enumerate(keys)}

    @batchy.batched(name="odd")
    def odd(ks: list[Any]) -> list[str]:
        return [values[k] for k in ks]

    cached = memcache.cached(odd, client, prefix=prefix)
    assert await load(cached, keys) == [values[k] for k in keys]
    assert cached.stats.misses == len(keys)
    assert await load(cached, keys) == [values[k] for k in keys]
    assert cached.stats.hits == len(keys)  # 1 and "1" are different keys


# -- the get_many loader ----------------------------------------------------------------


async def test_loader_reads_many_keys_in_one_call(client: Any, prefix: str) -> None:
    client.set_many({f"{prefix}a": 1, f"{prefix}b": {"x": 2}}, noreply=False)
    sessions = memcache.loader(client, prefix=prefix, name="sessions")
    with record() as rec:
        assert await load(sessions, ["a", "b", "zz"]) == [1, {"x": 2}, None]
    assert rec.calls(sessions) == [["a", "b", "zz"]]


async def test_loader_on_a_closed_port_names_loader_and_server() -> None:
    port = closed_port()
    sessions = memcache.loader(memcache.connect(f"127.0.0.1:{port}"), name="sessions")
    (error,) = await load(sessions, ["a"])
    assert isinstance(error, DataSourceError)
    assert str(error).startswith(
        f"loader 'sessions' could not read memcached at 127.0.0.1:{port} ("
    )
    assert str(error).endswith(
        "for keys ['a']; check that memcached is running, or use memcache.cached(...) to "
        "fall back to the source"
    )


def test_connect_wants_host_and_port() -> None:
    with pytest.raises(
        batchy.UsageError, match=r"memcache\.connect\(\) takes 'host:port', got 'localhost'"
    ):
        memcache.connect("localhost")


# -- the read-through cache -------------------------------------------------------------


async def test_cold_then_warm(client: Any, prefix: str) -> None:
    inner = make_inner()
    users = memcache.cached(inner, client, prefix=prefix)
    assert users.name == "cached(users)"
    with record() as rec:
        assert await load(users, [1, 2, 3, 2]) == [DATA[1], DATA[2], DATA[3], DATA[2]]
    assert rec.calls(users) == [[1, 2, 3]]
    assert rec.calls(inner) == [[1, 2, 3]]
    assert (users.stats.hits, users.stats.misses, users.stats.sets) == (0, 3, 3)
    with record() as rec:
        assert await load(users, [3, 1]) == [DATA[3], DATA[1]]
    assert rec.calls(inner) == []  # all from memcached
    assert users.stats.hits == 2


async def test_only_the_misses_go_to_the_inner_loader(client: Any, prefix: str) -> None:
    inner = make_inner()
    users = memcache.cached(inner, client, prefix=prefix)
    await load(users, [1, 2])
    users.stats.reset()
    with record() as rec:
        assert await load(users, [1, 2, 3, 4]) == [DATA[1], DATA[2], DATA[3], DATA[4]]
    assert rec.calls(inner) == [[3, 4]]
    assert (users.stats.hits, users.stats.misses) == (2, 2)


async def test_values_live_for_the_ttl(client: Any, prefix: str) -> None:
    inner = make_inner()
    users = memcache.cached(inner, client, prefix=prefix, ttl=1)
    await load(users, [1])
    assert client.get(users.memcache_key(1)) == DATA[1]
    await asyncio.sleep(2.1)
    with record() as rec:
        await load(users, [1])
    assert rec.calls(inner) == [[1]]


async def test_none_is_cached_unless_told_not_to(client: Any, prefix: str) -> None:
    inner = make_inner()
    users = memcache.cached(inner, client, prefix=prefix)
    await load(users, [404])
    with record() as rec:
        assert await load(users, [404]) == [None]
    assert rec.calls(inner) == []
    no_none = memcache.cached(inner, client, prefix=prefix + "n:", cache_none=False)
    await load(no_none, [404])
    with record() as rec:
        await load(no_none, [404])
    assert rec.calls(inner) == [[404]]


async def test_errors_of_the_inner_loader_fail_their_key_and_are_not_cached(
    client: Any, prefix: str
) -> None:
    inner = make_inner()
    users = memcache.cached(inner, client, prefix=prefix)
    one, cursed = await load(users, [1, 666])
    assert one == DATA[1]
    assert isinstance(cursed, ValueError) and str(cursed) == "user 666 is cursed"
    assert client.get(users.memcache_key(666)) is None
    with record() as rec:
        await load(users, [1, 666])
    assert rec.calls(inner) == [[666]]


async def test_delete_invalidates_memcached_and_the_scope(client: Any, prefix: str) -> None:
    inner = make_inner()
    users = memcache.cached(inner, client, prefix=prefix)
    async with batchy.scope():
        assert await users(1) == DATA[1]
        DATA[1] = {"id": 1, "name": "renamed"}
        try:
            assert await users(1) == {"id": 1, "name": "user1"}  # still cached
            assert users.delete(1) is True
            assert await users(1) == {"id": 1, "name": "renamed"}
        finally:
            DATA[1] = {"id": 1, "name": "user1"}
        assert await users.adelete(1) is True
        assert await users(1) == DATA[1]
    assert users.stats.deletes == 2


async def test_the_cache_runs_in_a_thread_and_never_stalls_the_loop(
    blackhole_port: int, prefix: str
) -> None:
    """A hung memcached: the loop keeps running, the request is served by the inner loader."""
    inner = make_inner()
    hung = memcache.connect(f"127.0.0.1:{blackhole_port}", timeout=5, connect_timeout=5)
    users = memcache.cached(inner, hung, prefix=prefix, timeout=0.3)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    tick_task = asyncio.ensure_future(ticker())
    started = time.monotonic()
    assert await load(users, [1, 2]) == [DATA[1], DATA[2]]
    elapsed = time.monotonic() - started
    tick_task.cancel()
    assert 0.25 < elapsed < 1.5
    assert ticks >= 10  # the loop ran while memcached did not answer
    assert users.stats.errors == 1 and users.stats.misses == 2


async def test_memcached_down_serves_from_the_source_counts_and_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = closed_port()
    inner = make_inner()
    users = memcache.cached(inner, memcache.connect(f"127.0.0.1:{port}"), retry_after=30)
    with caplog.at_level(logging.WARNING, logger="batchy_contrib.cache.memcache"):
        with record() as rec:
            assert await load(users, [1, 2]) == [DATA[1], DATA[2]]
            assert await load(users, [3]) == [DATA[3]]  # within retry_after: not asked
    assert rec.calls(inner) == [[1, 2], [3]]
    assert users.stats.errors == 1 and users.stats.skipped == 1
    assert users.stats.sets == 0  # no write-back to a cache that just failed
    (message,) = [r.getMessage() for r in caplog.records]
    assert message.startswith(
        f"memcached at 127.0.0.1:{port} failed in get_many for loader 'cached(users)' ("
    )
    assert message.endswith("serving from 'users', not asking memcached for 30.0 s")


async def test_delete_with_memcached_down_reports_false(caplog: pytest.LogCaptureFixture) -> None:
    port = closed_port()
    users = memcache.cached(make_inner(), memcache.connect(f"127.0.0.1:{port}"), ttl=60)
    with caplog.at_level(logging.WARNING, logger="batchy_contrib.cache.memcache"):
        assert users.delete(1, 2) is False
        assert await users.adelete(3) is False
    assert users.stats.errors == 2
    assert (
        caplog.records[0]
        .getMessage()
        .startswith(
            f"memcached at 127.0.0.1:{port} could not delete [1, 2] for loader 'cached(users)' ("
        )
    )
    assert caplog.records[0].getMessage().endswith("the old values stay until their TTL (60 s)")


def test_cached_wants_a_loader_and_a_ttl(client: Any) -> None:
    with pytest.raises(
        batchy.UsageError, match=r"memcache.cached\(\) wraps a batchy loader, got <function"
    ):
        memcache.cached(lambda ids: ids, client)  # type: ignore[arg-type]
    with pytest.raises(
        batchy.UsageError,
        match=r"memcache.cached\(users\) ttl= must be whole seconds >= 0 \(0: no expiry\), got -1",
    ):
        memcache.cached(make_inner(), client, ttl=-1)


async def test_cache_overlaps_with_the_database_batch_of_the_same_round(
    client: Any, prefix: str
) -> None:
    """A cached loader and a slow uncached one in one round: memcached does not wait for it."""
    inner = make_inner()
    users = memcache.cached(inner, client, prefix=prefix)
    await load(users, [1])  # warm

    @batchy.batched(name="slow")
    async def slow(keys: list[int]) -> list[int]:
        await asyncio.sleep(0.3)
        return keys

    finished: dict[str, float] = {}
    started = time.monotonic()

    @batchy.task
    async def get_user() -> Any:
        user = await users(1)
        finished["user"] = time.monotonic() - started
        return user

    @batchy.task
    async def get_slow() -> Any:
        value = await slow(7)
        finished["slow"] = time.monotonic() - started
        return value

    with record() as rec:
        async with batchy.scope():
            assert await batchy.gather(get_user(), get_slow()) == [DATA[1], 7]
    assert rec.round_events[0].loaders == ("cached(users)", "slow")
    assert finished["user"] < 0.15
    assert finished["slow"] >= 0.3


async def test_unhashable_keys_use_the_inner_key_function(client: Any, prefix: str) -> None:
    @batchy.batched(name="pairs", key=tuple)
    async def pairs(keys: list[list[int]]) -> list[int]:
        return [sum(k) for k in keys]

    cached = memcache.cached(pairs, client, prefix=prefix)
    with record() as rec:
        assert await load(cached, [[1, 2], [1, 2], [3, 4]]) == [3, 3, 7]
        assert await load(cached, [[1, 2]]) == [3]
    assert rec.calls(pairs) == [[[1, 2], [3, 4]]]


async def test_a_value_memcached_refuses_does_not_disable_the_cache(
    client: Any, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    @batchy.batched(name="blobs")
    async def blobs(keys: list[int]) -> list[str]:
        return ["x" * 2_000_000 if k == 1 else f"small{k}" for k in keys]  # 1: over 1 MB

    cached = memcache.cached(blobs, client, prefix=prefix)
    with caplog.at_level(logging.WARNING, logger="batchy_contrib.cache.memcache"):
        assert [len(v) for v in await load(cached, [1, 2])] == [2_000_000, 6]
    assert cached.stats.errors == 1
    assert (
        caplog.records[0]
        .getMessage()
        .startswith(f"memcached at {cached.server} refused set_many for loader 'cached(blobs)' (")
    )
    with record() as rec:
        assert await load(cached, [3]) == ["small3"]  # memcached is still asked
        assert await load(cached, [3]) == ["small3"]
    assert rec.calls(blobs) == [[3]]
    assert cached.stats.skipped == 0


async def test_a_single_socket_client_is_used_by_one_thread_at_a_time(
    memcached: tuple[str, int], prefix: str
) -> None:
    from pymemcache import serde
    from pymemcache.client.base import Client

    plain = Client(memcached, serde=serde.pickle_serde)
    inner = make_inner()
    users = memcache.cached(inner, plain, prefix=prefix, max_batch_size=1)  # 9 parallel calls
    keys = list(range(1, 10))
    for _ in range(3):
        assert await load(users, keys) == [DATA[k] for k in keys]
    assert users.stats.errors == 0 and users.stats.hits == 18


async def test_loaders_sharing_a_single_socket_client_take_turns(
    memcached: tuple[str, int], prefix: str
) -> None:
    """Two caches and a get_many loader over one plain Client: never two threads on its socket.

    With a lock per cache, the caches' calls of one round ran at once on the one
    socket: each read the other's replies (``STORED`` for a get, a closed file),
    counted it as memcached failing and stopped using memcached.
    """
    from pymemcache import serde
    from pymemcache.client.base import Client

    plain = Client(memcached, serde=serde.pickle_serde, timeout=2)
    caches = [
        memcache.cached(make_inner(f"users{j}"), plain, prefix=f"{prefix}{j}:", timeout=2)
        for j in range(4)
    ]
    for j in range(4):
        plain.set(f"{prefix}raw{j}", f"raw{j}", noreply=False)
    raw = memcache.loader(plain, prefix=f"{prefix}raw", max_batch_size=1)
    keys = list(range(1, 10))
    for _ in range(5):
        for c in caches:  # a fresh round of misses and write-backs each time
            await c.adelete(*keys)
        async with batchy.scope():
            got = await batchy.gather(
                *(batchy.gather(*(c(k) for k in keys)) for c in caches),
                batchy.gather(*(raw(str(j)) for j in range(4))),
            )
        assert got == [[DATA[k] for k in keys]] * 4 + [[f"raw{j}" for j in range(4)]]
    assert [c.stats.errors for c in caches] == [0] * 4


async def test_wrappers_over_one_single_socket_client_share_its_lock(
    memcached: tuple[str, int], prefix: str
) -> None:
    """Each RetryingClient over one plain Client had its own lock: the caches' calls ran at
    once on the one socket and read each other's replies (a ``get`` reading ``STORED``)."""
    from pymemcache import serde
    from pymemcache.client.base import Client
    from pymemcache.client.retrying import RetryingClient

    plain = Client(memcached, serde=serde.pickle_serde, timeout=2)
    caches = [
        memcache.cached(
            make_inner(f"users{j}"),
            RetryingClient(plain, attempts=1),
            prefix=f"{prefix}{j}:",
            timeout=2,
        )
        for j in range(4)
    ]
    keys = list(range(1, 10))
    for _ in range(5):
        for c in caches:  # a fresh round of misses and write-backs each time
            await c.adelete(*keys)
        async with batchy.scope():
            got = await batchy.gather(*(batchy.gather(*(c(k) for k in keys)) for c in caches))
        assert got == [[DATA[k] for k in keys]] * 4
    assert [c.stats.errors for c in caches] == [0] * 4


def test_a_thread_safe_client_takes_no_lock_through_a_wrapper(memcached: tuple[str, int]) -> None:
    from pymemcache.client.base import Client
    from pymemcache.client.retrying import RetryingClient

    from batchy_contrib.cache._clients import lock_of

    pooled = memcache.connect(f"{memcached[0]}:{memcached[1]}")
    assert lock_of(RetryingClient(pooled)) is None
    plain = Client(memcached)
    assert lock_of(RetryingClient(plain)) is lock_of(RetryingClient(plain)) is lock_of(plain)
    assert lock_of(plain) is not None
    # It answered any attribute with a function: the server and the serde were lambdas.
    host, port = memcached
    assert memcache.cached(make_inner(), RetryingClient(plain)).server == f"{host}:{port}"


class Renamed:
    """A value whose class a later deploy renames: its pickles no longer load."""


@pytest.mark.parametrize(
    "stored, flags",
    [
        (b"\x80\x05garbage", 1),  # a pickle cut short
        ("pickle of a class since renamed", 1),
        (b"\x78\x9c compressed", 8),  # another serializer's flags
        (b"\xff\xfe", 16),  # text that is no UTF-8
        (b"12x", 2),  # an int that is none
    ],
)
async def test_an_entry_that_cannot_be_read_is_a_miss_never_none(
    client: Any, prefix: str, caplog: pytest.LogCaptureFixture, stored: Any, flags: int
) -> None:
    """pymemcache's own serde reads a bad pickle as None: the cache said "no such row"."""
    import pickle

    from pymemcache.client.base import Client

    if isinstance(stored, str):
        stored = pickle.dumps(Renamed()).replace(b"Renamed", b"Remaned")
    inner = make_inner()
    users = memcache.cached(inner, client, prefix=prefix)
    Client(client.server).set(users.memcache_key(2), stored, flags=flags, noreply=False)
    with caplog.at_level(logging.WARNING, logger="batchy_contrib.cache.memcache"):
        with record() as rec:
            assert await load(users, [1, 2]) == [DATA[1], DATA[2]]
            assert await load(users, [1, 2]) == [DATA[1], DATA[2]]  # written again
    assert rec.calls(inner) == [[1, 2]]
    assert users.stats.errors == 0
    message = caplog.records[0].getMessage()
    assert message.startswith(
        f"loader 'cached(users)' found an entry for key 2 in memcached at {users.server} "
        "that cannot be read ("
    )
    assert message.endswith(
        "); loading the key from 'users' and writing it again. Change prefix= when the values' "
        "format changes, and give caches that share a memcached their own prefix"
    )

    await _a_raw_loader_fails_only_the_bad_entry(client, prefix, stored, flags, "")


class StrictJson:
    """A user's serde that raises on an entry it cannot read, as json.loads does."""

    def serialize(self, key: str, value: Any) -> tuple[bytes, int]:
        return json.dumps(value).encode(), 7

    def deserialize(self, key: str, value: bytes, flags: int) -> Any:
        return json.loads(value)


async def test_an_entry_the_clients_serde_raises_on_is_a_miss_not_an_outage(
    memcached: tuple[str, int], prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The serde's error failed the whole get_many: every key went to the inner loader,
    memcached was left alone for retry_after s, and the bad entry was never written again."""
    from pymemcache.client.base import Client

    own = Client(memcached, serde=StrictJson(), timeout=2)
    inner = make_inner()
    users = memcache.cached(inner, own, prefix=prefix, retry_after=60, timeout=5)
    await load(users, [1, 2, 3])
    Client(memcached).set(users.memcache_key(2), b"{not json", flags=7, noreply=False)
    with caplog.at_level(logging.WARNING, logger="batchy_contrib.cache.memcache"):
        with record() as rec:
            assert await load(users, [1, 2, 3]) == [DATA[1], DATA[2], DATA[3]]
            assert await load(users, [1, 2, 3]) == [DATA[1], DATA[2], DATA[3]]  # written again
    assert rec.calls(inner) == [[2]]
    assert (users.stats.errors, users.stats.skipped, users.stats.hits) == (0, 0, 5)
    assert (
        caplog.records[0]
        .getMessage()
        .startswith(
            f"loader 'cached(users)' found an entry for key 2 in memcached at {users.server} "
            "that cannot be read (JSONDecodeError: "
        )
    )

    await _a_raw_loader_fails_only_the_bad_entry(own, prefix, b"{not json", 7, "JSONDecodeError: ")


async def _a_raw_loader_fails_only_the_bad_entry(
    client: Any, prefix: str, stored: bytes, flags: int, reason: str
) -> None:
    """memcache.loader over ``client``: the unreadable entry is its key's error, alone."""
    from pymemcache.client.base import Client

    raw = memcache.loader(client, prefix=prefix, name="raw")
    Client(client.server).set(f"{prefix}bad", stored, flags=flags, noreply=False)
    client.set(f"{prefix}good", "fine", noreply=False)
    got = await load(raw, ["bad", "good"])
    assert got[1] == "fine"
    assert isinstance(got[0], DataSourceError)
    server = f"{client.server[0]}:{client.server[1]}"
    assert str(got[0]).startswith(
        f"loader 'raw' found an entry for key 'bad' in memcached at {server} that "
        f"cannot be read ({reason}"
    )


class ServedBy:
    """A client whose serde raises on the entries in ``bad``, as pymemcache's get_many does."""

    def __init__(self, entries: dict[str, int], bad: set[str]) -> None:
        self.entries, self.bad, self.calls, self.answered = entries, bad, 0, 0

    def get_many(self, keys: list[str]) -> dict[str, int]:
        self.calls += 1
        if raising := sorted(self.bad.intersection(keys)):
            raise ValueError(f"cannot decode {raising[0]}")
        self.answered += 1
        return {k: self.entries[k] for k in keys if k in self.entries}


@settings(max_examples=400, deadline=None)
@given(st.sets(st.text("abcdef", min_size=1, max_size=3), max_size=40), st.data())
def test_read_many_makes_just_the_entries_the_serde_raises_on_unreadable(
    keys: set[str], data: st.DataObject
) -> None:
    """Up to two bad entries are found exactly; more cost no more than the budget of calls,
    and leave only keys that were never cleared unreadable; all raising is an outage."""
    asked = sorted(keys)
    stored = data.draw(st.sets(st.sampled_from(asked)) if asked else st.just(set()))
    bad = data.draw(st.sets(st.sampled_from(sorted(stored))) if stored else st.just(set()))
    client = ServedBy({k: i for i, k in enumerate(asked) if k in stored}, bad)
    try:
        found = read_many(client, asked)
    except ValueError:
        assert len(asked) >= 2 and client.answered == 0  # nothing readable: the client fails
        found = None
    assert client.calls <= (search_budget(len(asked)) if bad else 1)
    if found is None:
        return
    for k in asked:
        value = found.get(k)
        own = f"ValueError: cannot decode {k}"
        if isinstance(value, Unreadable) and value.reason != own:
            assert len(bad) > 2 and "too many of those among the" in value.reason
        elif k in bad:
            assert isinstance(value, Unreadable) and value.reason == own
        elif k in stored:
            assert value == asked.index(k)
        else:
            assert k not in found


def test_read_many_takes_a_client_that_raises_on_every_entry_as_failing() -> None:
    """Every entry raising cost 2n - 1 calls (1,999 for 1,000 keys) and made each key a miss."""
    asked = [f"k{i}" for i in range(1000)]
    client = ServedBy(dict.fromkeys(asked, 1), set(asked))
    with pytest.raises(ValueError, match="cannot decode k0"):
        read_many(client, asked)
    assert client.calls == search_budget(1000) == 42


def test_read_many_begins_no_call_after_its_time() -> None:
    class Slow(ServedBy):
        def get_many(self, keys: list[str]) -> dict[str, int]:
            time.sleep(0.02)
            return super().get_many(keys)

    asked = [f"k{i}" for i in range(1000)]
    client = Slow(dict.fromkeys(asked, 1), set(asked))
    with pytest.raises(ValueError):
        read_many(client, asked, within=0.1)
    assert client.calls <= 7


class Refusing:
    """A user's serde that can read nothing (every entry was written in another format)."""

    def serialize(self, key: str, value: Any) -> tuple[bytes, int]:
        return json.dumps(value).encode(), 7

    def deserialize(self, key: str, value: bytes, flags: int) -> Any:
        raise ValueError("not this format")


class Wrapped:
    """A client of the user's own whose every call raises its own error (memcached is fine)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.server, self.calls = inner, inner.server, 0

    def get_many(self, keys: list[str]) -> Any:
        self.calls += 1
        raise RuntimeError("wrapper is broken")

    def set_many(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("wrapper is broken")


@pytest.mark.parametrize("kind", ["serde raises on every entry", "every call raises"])
async def test_a_client_that_can_read_nothing_is_an_outage_logged_once(
    memcached: tuple[str, int], prefix: str, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    """It cost 2n - 1 get_many calls under the client's lock (1,999 for 1,000 keys), a
    warning per key, and was never an outage: no retry_after, every round the same."""
    from pymemcache.client.base import Client

    keys = list(range(1000))
    own = Client(memcached, serde=Refusing(), timeout=2)
    calls = 0
    get_many = own.get_many

    def counted(asked: list[str]) -> Any:
        nonlocal calls
        calls += 1
        return get_many(asked)

    own.get_many = counted  # type: ignore[method-assign]
    client: Any = own if kind == "serde raises on every entry" else Wrapped(own)

    @batchy.batched(name="users")
    async def inner(ids: list[int]) -> list[Any]:
        return [{"id": i} for i in ids]

    users = memcache.cached(inner, client, prefix=prefix, retry_after=60, timeout=5)
    own.set_many({users.memcache_key(k): k for k in keys}, noreply=False)
    calls = 0
    with caplog.at_level(logging.WARNING, logger="batchy_contrib.cache.memcache"):
        for _ in range(2):
            assert await load(users, keys) == [{"id": k} for k in keys]
    made = calls if client is own else client.calls
    assert made <= search_budget(1000)
    assert (users.stats.errors, users.stats.skipped) == (1, 1000)
    assert len(caplog.records) == 1
    assert (
        caplog.records[0]
        .getMessage()
        .startswith(f"memcached at {users.server} failed in get_many for loader 'cached(users)' (")
    )
    own.delete_many([users.memcache_key(k) for k in keys], noreply=False)


def test_read_many_raises_memcacheds_own_failures() -> None:
    class Down:
        def get_many(self, keys: list[str]) -> dict[str, Any]:
            raise ConnectionRefusedError("refused")

    with pytest.raises(ConnectionRefusedError):
        read_many(Down(), ["a", "b"])


async def test_a_sql_loader_is_cached_with_float_bool_and_datetime_keys(
    client: Any, prefix: str, tmp_path: Any
) -> None:
    """db.one()'s key= tells 1.0 from 1 with a marker memcached has no text for: every such
    key failed with InvalidKeyError. Now each has an entry of its own, as exact as key=."""
    import datetime as dt
    import sqlite3
    from decimal import Decimal

    from batchy_contrib.sql import sqlite

    path = str(tmp_path / "t.db")
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (k, v TEXT)")
        conn.executemany(
            "INSERT INTO t VALUES (?, ?)",
            [(1, "one"), (1.5, "one and a half"), ("2020-01-02 03:04:05", "when")],
        )
    by_k = sqlite.Database(path).one("t", "k")
    cached = memcache.cached(by_k, client, prefix=prefix)
    keys: list[Any] = [1, 1.0, True, 1.5, dt.datetime(2020, 1, 2, 3, 4, 5), -0.0, 0.0]
    plain = await load(by_k, keys)
    assert [r and r["v"] for r in plain] == [
        "one",
        "one",
        "one",
        "one and a half",
        "when",
        None,
        None,
    ]
    with record() as rec:
        assert await load(cached, keys) == plain
        assert await load(cached, keys) == plain
    assert rec.calls(by_k) == [keys]
    assert cached.stats.hits == len(keys)

    # The entries are as fine as key=: Decimals of one value but two texts stay apart.
    @batchy.batched(name="texts", key=lambda k: (object, repr(k)))
    async def texts(ks: list[Any]) -> list[str]:
        return [str(k) for k in ks]

    cached_texts = memcache.cached(texts, client, prefix=prefix + "texts:")
    for _ in range(2):
        assert await load(cached_texts, [Decimal("1.0"), Decimal("1")]) == ["1.0", "1"]
    assert cached_texts.memcache_key(Decimal("1.0")) != cached_texts.memcache_key(Decimal("1"))
