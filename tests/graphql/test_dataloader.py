"""batchy.DataLoader: the contract of graphql/dataloader and aiodataloader, and batchy's rounds.

Written from the documented behaviour of those libraries: one batch per tick of
loads, one value per key in key order, per-key Exception values, a failed batch
failing and un-caching every key, prime / clear / clear_all, max_batch_size,
batch=False, cache=False, cache_key_fn and custom cache maps.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import batchy
from batchy import LoaderError, UsageError
from batchy.dataloader import DataLoader, InvalidKeyError
from batchy.testing import record


def make(**options: Any) -> tuple[DataLoader[Any, Any], list[list[Any]]]:
    calls: list[list[Any]] = []

    async def load(keys: list[Any]) -> list[Any]:
        calls.append(list(keys))
        return [k * 10 if isinstance(k, int) else k for k in keys]

    return DataLoader(load, **options), calls


# -- batching -----------------------------------------------------------------------


async def test_loads_of_one_tick_make_one_call() -> None:
    loader, calls = make()
    a, b = await asyncio.gather(loader.load(1), loader.load(2))
    assert (a, b) == (10, 20)
    assert calls == [[1, 2]]


async def test_load_many_is_one_batch_in_key_order() -> None:
    loader, calls = make()
    assert await loader.load_many([3, 1, 2]) == [30, 10, 20]
    assert calls == [[3, 1, 2]]


async def test_load_many_with_load_share_a_batch() -> None:
    loader, calls = make()
    many, one = await asyncio.gather(loader.load_many([1, 2]), loader.load(3))
    assert (many, one) == ([10, 20], 30)
    assert calls == [[1, 2, 3]]


async def test_max_batch_size_splits_calls() -> None:
    loader, calls = make(max_batch_size=2)
    assert await loader.load_many([1, 2, 3]) == [10, 20, 30]
    assert calls == [[1, 2], [3]]


async def test_batch_false_sends_every_key_alone() -> None:
    loader, calls = make(batch=False)
    assert await loader.load_many([1, 2]) == [10, 20]
    assert calls == [[1], [2]]


async def test_sync_batch_function_works() -> None:
    loader = DataLoader(lambda keys: [k + 1 for k in keys])
    assert await loader.load_many([1, 2]) == [2, 3]


async def test_subclass_with_batch_load_fn() -> None:
    class Users(DataLoader[int, str]):
        async def batch_load_fn(self, keys: list[int]) -> list[str]:  # type: ignore[override]
            return [f"user {k}" for k in keys]

    assert await Users().load(7) == "user 7"


# -- caching ------------------------------------------------------------------------


async def test_cached_key_is_not_loaded_again() -> None:
    loader, calls = make()
    assert await loader.load(1) == 10
    assert await loader.load(1) == 10
    assert await loader.load_many([1, 2]) == [10, 20]
    assert calls == [[1], [2]]


async def test_duplicate_keys_are_sent_once_even_without_cache() -> None:
    loader, calls = make(cache=False)
    assert await loader.load_many([1, 1, 2]) == [10, 10, 20]
    assert await loader.load(1) == 10  # no cache: asked again
    assert calls == [[1, 2], [1]]


async def test_clear_and_clear_all_forget_keys() -> None:
    loader, calls = make()
    await loader.load_many([1, 2])
    assert loader.clear(1) is loader
    await loader.load_many([1, 2])
    assert loader.clear_all() is loader
    await loader.load_many([1, 2])
    assert calls == [[1, 2], [1], [1, 2]]


async def test_clear_many() -> None:
    loader, calls = make()
    await loader.load_many([1, 2, 3])
    loader.clear_many([1, 3])
    await loader.load_many([1, 2, 3])
    assert calls == [[1, 2, 3], [1, 3]]


async def test_prime_fills_the_cache_unless_present() -> None:
    loader, calls = make()
    assert loader.prime(1, "primed") is loader
    loader.prime(1, "ignored")
    assert await loader.load(1) == "primed"
    loader.prime(1, "forced", force=True)
    assert await loader.load(1) == "forced"
    loader.prime_many({2: "two", 3: "three"})
    assert await loader.load_many([2, 3]) == ["two", "three"]
    assert calls == []


async def test_prime_with_an_exception_fails_the_key() -> None:
    loader, calls = make()
    loader.prime(1, ValueError("gone"))
    with pytest.raises(ValueError, match="gone"):
        await loader.load(1)
    assert calls == []


async def test_cache_key_fn_maps_keys() -> None:
    calls: list[list[Any]] = []

    async def load(keys: list[dict[str, int]]) -> list[int]:
        calls.append(keys)
        return [k["id"] for k in keys]

    loader = DataLoader(load, cache_key_fn=lambda k: k["id"])
    assert await loader.load_many([{"id": 1}, {"id": 1}, {"id": 2}]) == [1, 1, 2]
    assert await loader.load({"id": 2}) == 2
    assert calls == [[{"id": 1}, {"id": 2}]]
    # aiodataloader's name for the same option
    loader2 = DataLoader(load, get_cache_key=lambda k: k["id"])
    assert await loader2.load({"id": 5}) == 5


async def test_cache_map_dict_is_used() -> None:
    cache: dict[Any, Any] = {}
    loader, calls = make(cache_map=cache)
    await loader.load(1)
    assert list(cache) == [1]
    cache.clear()
    await loader.load(1)
    assert calls == [[1], [1]]


async def test_cache_map_with_get_set_delete_clear() -> None:
    class Cache:
        def __init__(self) -> None:
            self.data: dict[Any, Any] = {}
            self.log: list[str] = []

        def get(self, key: Any) -> Any:
            self.log.append(f"get {key}")
            return self.data.get(key)

        def set(self, key: Any, value: Any) -> None:
            self.log.append(f"set {key}")
            self.data[key] = value

        def delete(self, key: Any) -> None:
            self.log.append(f"delete {key}")
            self.data.pop(key, None)

        def clear(self) -> None:
            self.data.clear()

    cache = Cache()
    loader, _ = make(cache_map=cache)
    assert await loader.load(1) == 10
    assert await loader.load(1) == 10
    loader.clear(1)
    assert cache.log == ["get 1", "set 1", "get 1", "delete 1"]


# -- errors -------------------------------------------------------------------------


async def test_exception_value_fails_only_its_key_and_stays_cached() -> None:
    calls: list[list[int]] = []

    async def load(keys: list[int]) -> list[Any]:
        calls.append(keys)
        return [ValueError(f"no {k}") if k == 2 else k for k in keys]

    loader = DataLoader(load)
    one, two = await asyncio.gather(loader.load(1), loader.load(2), return_exceptions=True)
    assert one == 1
    assert isinstance(two, ValueError) and str(two) == "no 2"
    with pytest.raises(ValueError):
        await loader.load(2)  # cached, as in graphql/dataloader
    assert calls == [[1, 2]]
    loader.clear(2)
    with pytest.raises(ValueError):
        await loader.load(2)
    assert calls == [[1, 2], [2]]


async def test_raising_batch_fails_every_key_and_clears_them() -> None:
    calls: list[list[int]] = []

    class DbDown(Exception):
        pass

    async def load(keys: list[int]) -> list[int]:
        calls.append(keys)
        if len(calls) == 1:
            raise DbDown("connection refused")
        return keys

    loader = DataLoader(load)
    results = await asyncio.gather(loader.load(1), loader.load(2), return_exceptions=True)
    assert all(isinstance(r, DbDown) for r in results)  # the original error, as aiodataloader
    assert await loader.load_many([1, 2]) == [1, 2]  # not cached: a retry succeeds
    assert calls == [[1, 2], [1, 2]]


async def test_wrong_length_fails_the_batch_with_a_clear_message() -> None:
    calls: list[list[int]] = []

    async def load(keys: list[int]) -> list[int]:
        calls.append(keys)
        return keys[:1] if len(calls) == 1 else keys

    loader = DataLoader(load, name="users")
    with pytest.raises(LoaderError) as info:
        await loader.load_many([1, 2])
    message = str(info.value)
    assert "DataLoader 'users'" in message
    assert "returned 1 values for 2 keys" in message
    assert "Keys:\n[1, 2]" in message and "Values:\n[1]" in message
    assert "put None (or an Exception)" in message
    assert info.value.keys == [1, 2]
    assert await loader.load_many([1, 2]) == [1, 2]  # cleared: the retry works


@pytest.mark.parametrize("bad", [None, {"a": 1}, "ab", 5])
async def test_non_list_result_fails_the_batch(bad: Any) -> None:
    loader = DataLoader(lambda keys: bad, name="posts")
    with pytest.raises(LoaderError) as info:
        await loader.load(1)
    message = str(info.value)
    assert "DataLoader 'posts'" in message and "must return a list" in message
    assert repr(bad)[:10] in message and "[by_key.get(k) for k in keys]" in message


async def test_load_none_is_an_error() -> None:
    loader, _ = make(name="users")
    with pytest.raises(InvalidKeyError) as info:
        loader.load(None)
    assert isinstance(info.value, TypeError)
    assert "DataLoader 'users'" in str(info.value) and "got None" in str(info.value)


@pytest.mark.parametrize("bad", [5, "abc"])
async def test_load_many_needs_an_iterable_of_keys(bad: Any) -> None:
    loader, _ = make(name="users")
    with pytest.raises(InvalidKeyError, match=r"load_many\(\) must be called with an iterable"):
        loader.load_many(bad)


def test_constructor_errors() -> None:
    with pytest.raises(UsageError, match="DataLoader needs a batch function"):
        DataLoader()
    with pytest.raises(UsageError, match="max_batch_size= must be a positive int or None, got 0"):
        DataLoader(lambda keys: keys, max_batch_size=0)
    with pytest.raises(UsageError, match="cache_map= must be a dict-like object"):
        DataLoader(lambda keys: keys, cache_map=[1, 2])


# -- batchy rounds ------------------------------------------------------------------


async def test_uneven_loads_join_one_batch() -> None:
    # call_soon-based DataLoaders send a second batch for loads made two loop
    # hops later; batchy waits until the loop has nothing left to run.
    loader, calls = make()

    async def hops(n: int, key: int) -> Any:
        for _ in range(n):
            await asyncio.sleep(0)
        return await loader.load(key)

    assert await asyncio.gather(hops(0, 1), hops(2, 2), hops(5, 3)) == [10, 20, 30]
    assert calls == [[1, 2, 3]]


def test_loads_join_batchy_rounds_in_handlers() -> None:
    loader, calls = make(name="dl_users")

    @batchy.batched
    def posts(ids: list[int]) -> list[dict[str, int]]:
        return [{"id": i, "author": i + 100} for i in ids]

    @batchy.task
    def post_view(pid: int) -> Any:
        post = yield posts(pid)
        author = yield loader.load(post["author"])
        return author

    @batchy.task
    async def post_view_async(pid: int) -> Any:
        post = await posts(pid)
        return await loader.load(post["author"])

    with record() as rec:
        out = batchy.run(batchy.gather(post_view(1), post_view_async(2), post_view(1)))
    assert out == [1010, 1020, 1010]
    assert rec.rounds == 2
    assert rec.calls(loader.name) == [[101, 102]]
    assert calls == [[101, 102]]
