"""Loaders: options, return shapes, per-key and whole-batch failures, cache and eviction."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

import pytest

import batchy
from batchy.testing import record


def test_duplicate_keys_are_sent_once_even_without_cache() -> None:
    calls: list[list[int]] = []

    @batchy.batched(cache=False)
    def ident(keys: list[int]) -> list[int]:
        calls.append(keys)
        return keys

    @batchy.task
    def h() -> Any:
        a = yield [ident(1), ident(1), ident(2)]
        b = yield ident(1)  # no cache: asked again in a later round
        return a, b

    assert batchy.run(h()) == ([1, 1, 2], 1)
    assert calls == [[1, 2], [1]]


def test_cache_serves_repeated_keys_within_one_run_but_not_across_runs() -> None:
    calls: list[list[int]] = []

    @batchy.batched
    def ident(keys: list[int]) -> list[int]:
        calls.append(keys)
        return keys

    @batchy.task
    def h() -> Any:
        a = yield ident(1)
        b = yield [ident(1), ident(2)]
        return a, b

    assert batchy.run(h()) == (1, [1, 2])
    assert calls == [[1], [2]]
    batchy.run(h())
    assert calls == [[1], [2], [1], [2]]  # a new run is a new scope


def test_max_batch_size_splits_into_chunks_of_one_round() -> None:
    calls: list[list[int]] = []

    @batchy.batched(max_batch_size=3)
    async def ident(keys: list[int]) -> list[int]:
        calls.append(keys)
        return keys

    with record() as rec:
        assert batchy.run(ident.many(range(8))) == list(range(8))
    assert calls == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert rec.rounds == 1
    assert [b.round for b in rec.batches] == [1, 1, 1]


def test_chunks_run_concurrently_up_to_max_concurrency() -> None:
    in_flight = 0
    peak = 0

    @batchy.batched(max_batch_size=1, max_concurrency=2)
    async def slow(keys: list[int]) -> list[int]:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.005)
        in_flight -= 1
        return keys

    assert batchy.run(slow.many(range(6))) == list(range(6))
    assert peak == 2


@pytest.mark.parametrize("fails", [False, True])
def test_a_plain_function_with_max_concurrency_gets_every_chunk(fails: bool) -> None:
    # Chunks past max_concurrency were started by the callback of an asyncio
    # future; a plain function's chunk finishes inside the call, so only the
    # first max_concurrency chunks were ever sent and the run hung for ever.
    calls: list[list[int]] = []

    @batchy.batched(max_batch_size=2, max_concurrency=1)
    def tens(keys: list[int]) -> list[int]:
        calls.append(keys)
        if fails and keys[0] == 0:
            raise ValueError("the first chunk fails")
        return [k * 10 for k in keys]

    async def main() -> list[Any]:
        async with batchy.scope():
            return await asyncio.wait_for(
                batchy.gather(*(tens(k) for k in range(5)), return_exceptions=True), 5
            )

    got = asyncio.run(main())
    assert calls == [[0, 1], [2, 3], [4]]
    expected: list[Any] = [0, 10, 20, 30, 40]
    if fails:
        assert [type(v).__name__ for v in got[:2]] == ["LoaderError", "LoaderError"]
        got, expected = got[2:], expected[2:]
    assert got == expected


def test_a_loaders_cancellation_keeps_its_message() -> None:
    @batchy.batched
    async def fetch(keys: list[int]) -> list[int]:
        raise asyncio.CancelledError("pool closed while fetching")

    async def main() -> BaseException:
        try:
            await fetch(1)
        except asyncio.CancelledError as error:
            return error
        raise AssertionError("not cancelled")

    assert asyncio.run(main()).args == ("pool closed while fetching",)


def test_batches_of_one_round_run_in_parallel() -> None:
    # Each loader waits for the other to have started: this only finishes if
    # both batch calls are in flight at the same time.
    events: dict[str, asyncio.Event] = {}

    async def meet(me: str, other: str) -> None:
        events.setdefault(me, asyncio.Event()).set()
        await asyncio.wait_for(events.setdefault(other, asyncio.Event()).wait(), 5)

    @batchy.batched
    async def a(keys: list[int]) -> list[str]:
        await meet("a", "b")
        return ["a"] * len(keys)

    @batchy.batched
    async def b(keys: list[int]) -> list[str]:
        await meet("b", "a")
        return ["b"] * len(keys)

    assert batchy.run(batchy.gather(a(1), b(1))) == ["a", "b"]


def test_thread_option_lets_blocking_loaders_overlap() -> None:
    barrier = threading.Barrier(2, timeout=5)

    @batchy.batched(thread=True)
    def blocking_a(keys: list[int]) -> list[int]:
        barrier.wait()  # would time out if the two calls ran one after the other
        return keys

    @batchy.batched(thread=True)
    def blocking_b(keys: list[int]) -> list[int]:
        barrier.wait()
        return [-k for k in keys]

    assert batchy.run(batchy.gather(blocking_a(1), blocking_b(1))) == [1, -1]


def test_slow_batch_does_not_hold_back_dependants_of_a_fast_one() -> None:
    log: list[str] = []

    @batchy.batched
    async def fast(keys: list[int]) -> list[int]:
        log.append(f"fast {keys}")
        return keys

    gate: dict[str, asyncio.Event] = {}

    @batchy.batched
    async def slow(keys: list[int]) -> list[int]:
        log.append("slow started")
        # Finishes only once the fast branch has reached its second round.
        await asyncio.wait_for(gate.setdefault("go", asyncio.Event()).wait(), 5)
        log.append("slow finished")
        return keys

    @batchy.task
    def fast_branch() -> Any:
        a = yield fast(1)
        b = yield fast(a + 1)
        gate.setdefault("go", asyncio.Event()).set()
        return b

    assert batchy.run(batchy.gather(fast_branch(), slow(7))) == [2, 7]
    assert sorted(log[:2]) == ["fast [1]", "slow started"]  # round 1: both in flight
    assert log[2:] == ["fast [2]", "slow finished"]  # round 2 went out before slow ended


def test_mapping_results_and_default_for_missing_keys() -> None:
    @batchy.batched(default=None)
    def users(ids: list[int]) -> dict[int, str]:
        return {i: f"user {i}" for i in ids if i != 2}

    assert batchy.run(users.many([1, 2, 3])) == ["user 1", None, "user 3"]


def test_missing_key_without_default_fails_only_that_key() -> None:
    @batchy.batched
    def users(ids: list[int]) -> dict[int, str]:
        return {i: f"user {i}" for i in ids if i != 2}

    @batchy.task
    def h() -> Any:
        results = yield batchy.gather(users(1), users(2), return_exceptions=True)
        return results

    ok, missing = batchy.run(h())
    assert ok == "user 1"
    assert isinstance(missing, batchy.MissingKeyError)
    assert isinstance(missing, KeyError)
    assert missing.loader.endswith("users") and missing.key == 2
    assert str(missing) == (
        f"loader {missing.loader!r} returned a dict with no entry for key 2 (it has keys [1]); "
        "return a value for every key, or give the loader a default: @batched(default=None)."
    )


def test_exception_values_fail_only_their_key_and_are_not_cached() -> None:
    calls: list[list[int]] = []

    @batchy.batched
    def flaky(keys: list[int]) -> list[Any]:
        calls.append(keys)
        return [LookupError(k) if k == 2 and len(calls) == 1 else k for k in keys]

    @batchy.task
    def h() -> Any:
        first = yield batchy.gather(flaky(1), flaky(2), return_exceptions=True)
        retry = yield [flaky(1), flaky(2)]
        return first, retry

    first, retry = batchy.run(h())
    assert first[0] == 1 and isinstance(first[1], LookupError)
    assert retry == [1, 2]
    assert calls == [[1, 2], [2]]  # 1 came from the cache, 2 was evicted and asked again


def test_wrong_length_fails_every_key_and_evicts_them() -> None:
    calls: list[list[int]] = []

    @batchy.batched(name="users")
    def short(keys: list[int]) -> list[int]:
        calls.append(keys)
        return keys[:-1] if len(calls) == 1 else keys

    @batchy.task
    def h() -> Any:
        try:
            yield [short(1), short(2)]
        except batchy.LoaderError as e:
            error = e
        again = yield [short(1), short(2)]
        return error, again

    error, again = batchy.run(h())
    assert str(error) == (
        "loader 'users' returned 1 values for 2 keys. A batch function must return one value "
        "per key, in the order of the keys (or a dict keyed by key). Keys: [1, 2]; returned: "
        "[1]. For keys with no data, put None (or an exception) in their place."
    )
    assert error.loader == "users" and error.keys == [1, 2]
    assert again == [1, 2]
    assert calls == [[1, 2], [1, 2]]


def test_a_failed_batch_is_evicted_from_every_scope_that_asked() -> None:
    # Two requests in one round ask for the same key: one batch call, one shared
    # future, two scope caches. A failure must leave neither cache holding it.
    calls: list[list[int]] = []

    @batchy.batched(name="users")
    def users(keys: list[int]) -> list[int]:
        calls.append(keys)
        if len(calls) == 1:
            raise ConnectionError("server went away")
        return keys

    @batchy.task
    def request() -> Any:
        try:
            yield users(1)
        except batchy.LoaderError:
            pass
        return (yield users(1))

    async def main() -> list[Any]:
        async def in_scope() -> Any:
            async with batchy.scope():
                return await request()

        return list(await asyncio.gather(in_scope(), in_scope()))

    assert asyncio.run(main()) == [1, 1]
    assert calls == [[1], [1]]


def test_non_sequence_result_is_a_clear_error() -> None:
    @batchy.batched(name="users")
    def broken(keys: list[int]) -> Any:
        return None

    with pytest.raises(batchy.LoaderError) as info:
        batchy.run(broken(1))
    assert str(info.value) == (
        "loader 'users' returned None (NoneType) for keys [1]; a batch function must return "
        "a list with one value per key, in the order of the keys, or a dict mapping each key "
        "to its value. Did you forget a return statement?"
    )


def test_a_raising_batch_function_fails_every_waiter_with_the_cause() -> None:
    calls: list[list[int]] = []

    @batchy.batched(name="db")
    async def db(keys: list[int]) -> list[int]:
        calls.append(keys)
        if len(calls) == 1:
            raise ConnectionError("server gone")
        return keys

    @batchy.task
    def h() -> Any:
        errors = yield batchy.gather(db(1), db(2), return_exceptions=True)
        again = yield db.many([1, 2])
        return errors, again

    errors, again = batchy.run(h())
    assert errors[0] is errors[1]
    assert (
        str(errors[0])
        == "loader 'db' raised ConnectionError: server gone while loading keys [1, 2]"
    )
    assert isinstance(errors[0].__cause__, ConnectionError)
    assert again == [1, 2]


def test_key_function_for_unhashable_keys() -> None:
    calls: list[list[Any]] = []

    @batchy.batched(key=tuple)
    def by_pair(keys: list[list[int]]) -> list[int]:
        calls.append(keys)
        return [a + b for a, b in keys]

    assert batchy.run(batchy.gather(by_pair([1, 2]), by_pair([1, 2]), by_pair([3, 4]))) == [3, 3, 7]
    assert calls == [[[1, 2], [3, 4]]]


def test_unhashable_key_names_loader_and_key() -> None:
    @batchy.batched(name="by_list")
    def by_list(keys: list[Any]) -> list[Any]:
        return keys

    @batchy.task
    def h() -> Any:
        yield by_list([1, 2])

    with pytest.raises(batchy.UsageError) as info:
        batchy.run(h())
    assert str(info.value) == (
        "loader 'by_list' got key [1, 2] (list), which cannot be hashed; pass key= to @batched "
        "to turn keys into hashable cache keys (for example key=tuple for lists)"
    )


def test_prime_and_clear_work_on_the_current_scope() -> None:
    calls: list[list[int]] = []

    @batchy.batched
    def ident(keys: list[int]) -> list[int]:
        calls.append(keys)
        return keys

    @batchy.task
    def h() -> Any:
        ident.prime(1, 100)
        a = yield ident(1)
        ident.clear(1)
        b = yield ident(1)
        ident.clear()
        c = yield ident(1)
        return a, b, c

    assert batchy.run(h()) == (100, 1, 1)
    assert calls == [[1], [1]]


def test_prime_outside_a_scope_is_a_clear_error() -> None:
    @batchy.batched(name="ident")
    def ident(keys: list[int]) -> list[int]:
        return keys

    with pytest.raises(batchy.UsageError) as info:
        ident.prime(1, 1)
    assert str(info.value) == (
        "ident.prime() needs a scope: call it inside a handler, batchy.run(...) or "
        "'with batchy.scope():'"
    )


def test_loader_called_before_any_loop_joins_the_batch_when_run() -> None:
    calls: list[list[int]] = []

    @batchy.batched
    def ident(keys: list[int]) -> list[int]:
        calls.append(keys)
        return keys

    fut = ident.many([1, 2, 2])
    assert batchy.run(fut) == [1, 2, 2]
    assert calls == [[1, 2]]


def test_bad_options_are_refused() -> None:
    with pytest.raises(batchy.UsageError) as info:

        @batchy.batched(max_batch_size=0, name="users")
        def users(keys: list[int]) -> list[int]:
            return keys

    assert (
        str(info.value)
        == "@batched max_batch_size= for loader 'users' must be a positive int or None, got 0"
    )
    with pytest.raises(batchy.UsageError, match="is async def and cannot run in a thread"):

        @batchy.batched(thread=True)
        async def a(keys: list[int]) -> list[int]:
            return keys

    with pytest.raises(batchy.UsageError, match="expects a function taking a list of keys, got 3"):
        batchy.batched(3)  # type: ignore[call-overload]


def test_loaders_from_plain_asyncio_code_join_one_round_despite_loop_hops() -> None:
    calls: list[list[int]] = []

    @batchy.batched
    def ident(keys: list[int]) -> list[int]:
        calls.append(keys)
        return keys

    async def resolver(k: int, hops: int) -> int:
        for _ in range(hops):
            await asyncio.sleep(0)
        return await ident(k)

    async def main() -> list[int]:
        return await asyncio.gather(*(resolver(k, hops=k % 4) for k in range(8)))

    assert asyncio.run(main()) == list(range(8))
    assert calls == [[0, 4, 1, 5, 2, 6, 3, 7]]  # one call, keys in arrival order


def test_long_lived_loop_keeps_batching_new_arrivals() -> None:
    calls: list[list[int]] = []

    @batchy.batched
    async def ident(keys: list[int]) -> list[int]:
        calls.append(keys)
        return keys

    async def main() -> None:
        for wave in range(3):
            got = await asyncio.gather(*(ident(wave * 10 + i) for i in range(3)))
            assert got == [wave * 10 + i for i in range(3)]
            await asyncio.sleep(0.001)

    asyncio.run(main())
    assert calls == [[0, 1, 2], [10, 11, 12], [20, 21, 22]]


def test_an_attribute_read_off_a_load_made_before_the_loop_says_to_wait_on_it() -> None:
    @batchy.batched
    def users_by_id(ids: list[int]) -> list[dict[str, Any]]:
        return [{"name": f"u{i}"} for i in ids]

    load = users_by_id(1)
    assert repr(load).startswith("<batchy load ")
    assert repr(load).endswith(".users_by_id(1) pending>")
    with pytest.raises(batchy.UsageError) as caught:
        load.name  # type: ignore[attr-defined]
    message = str(caught.value)
    assert message.startswith("'name' was read off the load ")
    assert "users_by_id(1), a batchy future, not off its value" in message
    assert "executor_class=BatchyExecutionContext" in message
    # Probes of private and dunder names (asyncio, inspect, copy) still see nothing there.
    assert not hasattr(load, "_asyncio_future_blocking")
    assert not hasattr(load, "__aiter__")
    assert not asyncio.isfuture(load)
    assert inspect.isawaitable(load)
    assert batchy.run(load) == {"name": "u1"}
    assert load.result() == {"name": "u1"}
