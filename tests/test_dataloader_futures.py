"""What ``DataLoader.load()`` returns behaves as an ``asyncio.Future``.

Code written for aiodataloader cancels loads, reads them with ``done()`` /
``result()`` / ``exception()``, adds done callbacks and resolves them from
outside with ``set_result()`` / ``set_exception()``. Each load is a future of
its own: cancelling or resolving it never affects the other loads of its key,
the cache or the batch, and the batch skips it when it returns.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import batchy
from batchy import UsageError
from batchy.dataloader import DataLoader, InvalidStateError, LoadFuture
from batchy.testing import record


def make(**options: Any) -> tuple[DataLoader[Any, Any], list[list[Any]]]:
    calls: list[list[Any]] = []

    async def load(keys: list[Any]) -> list[Any]:
        calls.append(list(keys))
        return [k * 10 for k in keys]

    return DataLoader(load, **options), calls


class Gate:
    """Lets a test act while a batch is in flight: ``started`` is set when the batch
    function is called, which then waits for ``release``."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def in_flight(self) -> None:
        await asyncio.wait_for(self.started.wait(), 5)


def gated(**options: Any) -> tuple[DataLoader[Any, Any], list[list[Any]], Gate]:
    """A loader whose batch function waits for the gate to open before it returns."""
    calls: list[list[Any]] = []
    gate = Gate()

    async def load(keys: list[Any]) -> list[Any]:
        calls.append(list(keys))
        gate.started.set()
        await gate.release.wait()
        return [k * 10 for k in keys]

    return DataLoader(load, **options), calls, gate


def loop_errors() -> list[dict[str, Any]]:
    """What the running loop would report as "Exception in callback ..." (collected instead)."""
    errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: errors.append(context))
    return errors


def logged_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


# -- cancelling ---------------------------------------------------------------------


async def test_cancelling_one_load_leaves_the_other_load_of_the_key() -> None:
    loader, calls = make()
    a = loader.load(1)
    b = loader.load(1)
    assert a is not b
    assert a.cancel() is True
    assert await b == 10
    assert calls == [[1]]
    assert a.cancelled() and not b.cancelled()
    with pytest.raises(asyncio.CancelledError):
        await a
    assert await loader.load(1) == 10  # the cache holds the batch function's value
    assert calls == [[1]]


async def test_cancelling_one_of_many_loads_of_a_key_without_cache() -> None:
    loader, calls = make(cache=False)
    a, b, c = loader.load(1), loader.load(1), loader.load(1)
    assert b.cancel() is True
    assert await asyncio.gather(a, c) == [10, 10]
    assert calls == [[1]]
    assert b.cancelled()


async def test_cancelled_load_is_skipped_when_its_batch_resolves(
    caplog: pytest.LogCaptureFixture,
) -> None:
    errors = loop_errors()
    loader, calls, gate = gated()
    one, two, three = loader.load(1), loader.load(2), loader.load(3)
    waiting = asyncio.ensure_future(asyncio.gather(one, three))
    await gate.in_flight()
    assert calls == [[1, 2, 3]]  # the batch is in flight
    assert two.cancel("request aborted") is True
    gate.release.set()
    assert await waiting == [10, 30]
    await settle()
    assert two.cancelled()
    with pytest.raises(asyncio.CancelledError, match="request aborted"):
        two.result()
    assert errors == []
    assert logged_errors(caplog) == []
    assert await loader.load(2) == 20  # cached by the batch, not by the cancelled load
    assert calls == [[1, 2, 3]]


async def test_load_cancelled_before_its_batch_is_sent(caplog: pytest.LogCaptureFixture) -> None:
    errors = loop_errors()
    loader, calls = make()
    one, two = loader.load(1), loader.load(2)
    assert one.cancel() is True
    assert await two == 20
    await settle()
    assert calls == [[1, 2]]  # the key stays in its batch, for the cache
    assert one.cancelled()
    assert errors == [] and logged_errors(caplog) == []


@pytest.mark.parametrize("kind", ["async def", "a function returning a coroutine"])
def test_a_batch_whose_call_is_cancelled_before_it_starts_closes_the_batch_function(
    kind: str,
) -> None:
    # asyncio.run cancels the tasks left when its main coroutine returns: a batch
    # flushed in that last iteration has its call cancelled before its first
    # step. Its batch function's coroutine, made at the flush, then warned
    # "coroutine ... was never awaited". Here every task but main is cancelled
    # as it is made, which is that cancel, without counting loop iterations.
    async def fetch(keys: list[int]) -> list[int]:
        return keys

    def returns_a_coroutine(keys: list[int]) -> Any:
        return fetch(keys)

    def cancelled_at_once(loop: Any, coro: Any, **options: Any) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **options)
        if getattr(coro, "__name__", "") != "main":
            task.cancel()
        return task

    async def main() -> None:
        loader = DataLoader(fetch if kind == "async def" else returns_a_coroutine)
        loop = asyncio.get_running_loop()
        loop.set_task_factory(cancelled_at_once)
        with pytest.raises(asyncio.CancelledError):
            await loader.load(1)  # the load ends with the call: it does not hang
        assert not loader.load(1).done()  # the cancel was not cached: it asks again
        loop.set_task_factory(None)  # asyncio.run's own shutdown tasks must run

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(main())
        gc.collect()
    assert [str(w.message) for w in caught] == []


async def test_cancelling_an_asyncio_task_cancels_only_the_load_it_awaits() -> None:
    loader, calls, gate = gated()
    mine, theirs = loader.load(1), loader.load(1)
    waiting_mine = asyncio.ensure_future(mine)
    waiting_theirs = asyncio.ensure_future(theirs)
    await gate.in_flight()
    waiting_mine.cancel()
    await settle()
    assert mine.cancelled() and not theirs.done()  # as asyncio: the awaited future is cancelled
    gate.release.set()
    assert await waiting_theirs == 10
    with pytest.raises(asyncio.CancelledError):
        await waiting_mine
    assert calls == [[1]]


async def test_cancel_of_a_done_load_returns_false() -> None:
    loader, _ = make()
    load = loader.load(1)
    assert await load == 10
    assert load.cancel() is False
    assert not load.cancelled() and load.result() == 10
    cached = loader.load(1)
    assert cached.done() and cached.cancel() is False


async def test_cancelling_load_many_leaves_the_keys_alone() -> None:
    # A guard more than a new behaviour: load_many waits on the keys' shared
    # futures, so cancelling it must never cancel them (nor poison the cache).
    loader, calls = make()
    many = loader.load_many([1, 2])
    alone = loader.load(1)
    if many.cancel():
        with pytest.raises(asyncio.CancelledError):
            await many
    else:  # an engine whose gathers cancel only what they can: nothing here
        assert await many == [10, 20]
    assert await alone == 10
    assert await loader.load_many([1, 2]) == [10, 20]
    assert calls == [[1, 2]]


async def test_cancelling_a_load_while_its_key_wakes_its_loads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A done callback of the first load cancels the second load of the key while
    # the key's shared future is waking them: the second is then skipped.
    errors = loop_errors()
    loader, _ = make()
    first, second = loader.load(1), loader.load(1)
    seen: list[bool] = []
    first.add_done_callback(lambda fut: seen.append(second.cancel()))
    assert await first == 10
    await settle()
    assert seen == [True]
    assert second.cancelled()
    assert errors == [] and logged_errors(caplog) == []


# -- resolving from outside ---------------------------------------------------------


async def test_set_result_from_outside_before_the_batch_returns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    errors = loop_errors()
    loader, calls, gate = gated()
    one, two = loader.load(1), loader.load(2)
    waiting = asyncio.ensure_future(two)
    await gate.in_flight()
    assert calls == [[1, 2]]
    one.set_result("arrived another way")
    assert one.done() and one.result() == "arrived another way"
    gate.release.set()
    assert await waiting == 20
    assert await one == "arrived another way"
    await settle()
    assert one.result() == "arrived another way"  # the batch skipped it
    assert errors == [] and logged_errors(caplog) == []
    assert await loader.load(1) == 10  # the cache keeps the batch function's value


async def test_set_result_leaves_the_other_loads_of_the_key() -> None:
    loader, calls = make()
    a, b = loader.load(1), loader.load(1)
    a.set_result("mine")
    assert await asyncio.gather(a, b) == ["mine", 10]
    assert calls == [[1]]


async def test_set_exception_from_outside_before_the_batch_returns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    errors = loop_errors()
    loader, calls, gate = gated()
    one, two = loader.load(1), loader.load(2)
    waiting = asyncio.ensure_future(two)
    await gate.in_flight()
    one.set_exception(ConnectionAbortedError("client went away"))
    gate.release.set()
    assert await waiting == 20
    with pytest.raises(ConnectionAbortedError, match="client went away"):
        await one
    await settle()
    assert isinstance(one.exception(), ConnectionAbortedError)
    assert not one.cancelled()
    assert errors == [] and logged_errors(caplog) == []
    assert await loader.load(1) == 10  # the error is not cached
    assert calls == [[1, 2]]


async def test_a_failing_batch_skips_loads_resolved_from_outside() -> None:
    calls: list[list[int]] = []

    async def load(keys: list[int]) -> list[int]:
        calls.append(keys)
        raise RuntimeError("db down")

    loader = DataLoader(load)
    one, two, three = loader.load(1), loader.load(2), loader.load(3)
    one.set_result("kept")
    assert two.cancel()
    with pytest.raises(RuntimeError, match="db down"):
        await three
    assert one.result() == "kept"
    assert two.cancelled()
    assert calls == [[1, 2, 3]]


async def test_set_result_twice_raises_invalid_state_error_naming_the_loader() -> None:
    loader, _ = make(name="users")
    load = loader.load(7)
    load.set_result("first")
    with pytest.raises(asyncio.InvalidStateError) as info:
        load.set_result("second")
    assert isinstance(info.value, InvalidStateError) and isinstance(info.value, UsageError)
    message = str(info.value)
    assert "DataLoader 'users'" in message and "key 7" in message and "already done" in message
    with pytest.raises(InvalidStateError, match="set_exception"):
        load.set_exception(ValueError("late"))
    assert load.result() == "first"
    assert "users" in repr(load) and "done" in repr(load)
    assert await loader.load(7) == 70  # the batch still loaded the key, for the cache


async def test_resolving_a_load_the_batch_resolved_raises_invalid_state_error() -> None:
    loader, _ = make(name="users")
    load = loader.load(3)
    assert await load == 30
    with pytest.raises(InvalidStateError, match=r"DataLoader 'users'.*key 3.*already done"):
        load.set_result(0)
    cancelled = loader.load(4)
    cancelled.cancel()
    with pytest.raises(InvalidStateError, match="already cancelled"):
        cancelled.set_result(0)
    assert await loader.load(4) == 40


# -- the asyncio.Future API, side by side with asyncio.Future ------------------------


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """What a call gives: its value, or the kind of error (and its args) it raises."""
    try:
        return ("value", call())
    except asyncio.CancelledError as error:
        return ("CancelledError", error.args)
    except asyncio.InvalidStateError:
        return ("InvalidStateError", None)
    except Exception as error:
        return (type(error).__name__, error.args)


def _observe(fut: Any) -> list[Any]:
    exc = _outcome(fut.exception)
    if exc[0] == "value" and exc[1] is not None:
        error = exc[1]
        exc = ("value", (type(error).__name__, error.args, type(error.__cause__).__name__))
    return [fut.done(), fut.cancelled(), _outcome(fut.result), exc]


def _cancel_with_message(fut: Any) -> list[Any]:
    return [fut.cancel("why"), fut.cancel("again")]


def _cancel(fut: Any) -> list[Any]:
    return [fut.cancel()]


def _set_result(fut: Any) -> list[Any]:
    fut.set_result(5)
    return [_outcome(lambda: fut.set_result(6)), _outcome(lambda: fut.set_exception(KeyError))]


def _set_exception_instance(fut: Any) -> list[Any]:
    fut.set_exception(ValueError("bad"))
    return [fut.cancel(), _outcome(lambda: fut.set_result(1))]


def _set_exception_class(fut: Any) -> list[Any]:
    fut.set_exception(KeyError)
    return []


def _set_stop_iteration(fut: Any) -> list[Any]:
    return [_outcome(lambda: fut.set_exception(StopIteration())), fut.done()]


class _StopSubclass(StopIteration):
    pass


def _set_stop_iteration_subclass(fut: Any) -> list[Any]:
    return [_outcome(lambda: fut.set_exception(_StopSubclass())), fut.done()]


def _nothing(fut: Any) -> list[Any]:
    return []


@pytest.mark.parametrize(
    "act",
    [
        _nothing,
        _cancel,
        _cancel_with_message,
        _set_result,
        _set_exception_instance,
        _set_exception_class,
        _set_stop_iteration,
        _set_stop_iteration_subclass,
    ],
)
async def test_load_reads_like_an_asyncio_future(act: Callable[[Any], list[Any]]) -> None:
    loader, _ = make()
    observed = []
    for fut in (asyncio.get_running_loop().create_future(), loader.load(1)):
        before = _observe(fut)
        acted = act(fut)
        observed.append((before, acted, _observe(fut)))
    asyncio_future, load = observed
    assert load == asyncio_future
    assert await loader.load(1) == 10  # whatever happened to one load, the key loads


async def test_done_callbacks_like_an_asyncio_future() -> None:
    loader, _ = make()
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="outer")
    observed = []
    for fut in (asyncio.get_running_loop().create_future(), loader.load(1)):
        seen: list[Any] = []

        def first(f: Any, seen: list[Any] = seen) -> None:
            seen.append(("first", f.result()))

        def second(f: Any, seen: list[Any] = seen) -> None:
            seen.append(("second", var.get()))

        fut.add_done_callback(first)
        fut.add_done_callback(first)
        context = contextvars.copy_context()
        context.run(var.set, "inner")
        fut.add_done_callback(second, context=context)
        removed = [fut.remove_done_callback(first), fut.remove_done_callback(first)]
        fut.add_done_callback(first)
        fut.set_result("v")
        await settle()
        fut.add_done_callback(second)  # already done: called (asyncio: soon; here: at once)
        await settle()
        observed.append((removed, seen, fut.remove_done_callback(first)))
    asyncio_future, load = observed
    assert load == asyncio_future
    assert load == ([2, 0], [("second", "inner"), ("first", "v"), ("second", "outer")], 0)
    assert await loader.load(1) == 10


async def test_a_failing_done_callback_is_logged_and_the_others_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loader, _ = make()
    load = loader.load(1)
    seen: list[int] = []

    def broken(fut: Any) -> None:
        raise RuntimeError("callback bug")

    load.add_done_callback(broken)
    load.add_done_callback(lambda fut: seen.append(fut.result()))
    assert await load == 10
    assert seen == [10]
    load.add_done_callback(broken)  # already done: called now, and still not raised
    assert len([m for m in logged_errors(caplog) if "done callback" in m]) == 2


async def test_get_loop_is_the_running_loop() -> None:
    loader, _ = make()
    load = loader.load(1)
    assert load.get_loop() is asyncio.get_running_loop()
    assert await load == 10


async def test_each_load_is_a_load_future() -> None:
    loader, _ = make()
    load = loader.load(1)
    assert isinstance(load, LoadFuture) and isinstance(load, batchy.Future)
    assert load is not loader.load(1)  # one future per load, not one per key
    assert "pending" in repr(load)
    await load
    assert isinstance(loader.load(1), LoadFuture)  # from the cache too
    made = LoadFuture(loader, 2, batchy.resolved(20))
    assert made.done() and made.result() == 20


# -- inside batchy handlers, and before any loop -------------------------------------


def test_loads_cancelled_or_resolved_inside_handlers() -> None:
    loader, calls = make(name="dl")

    @batchy.task
    def gen_view(k: int) -> Any:
        kept, dropped, answered = loader.load(k), loader.load(k), loader.load(k + 1)
        assert dropped.cancel() is True
        answered.set_result("from outside")
        value = yield kept
        try:
            yield dropped
        except asyncio.CancelledError:
            cancelled = True
        else:
            cancelled = False
        other = yield answered
        return value, cancelled, other

    @batchy.task
    async def async_view(k: int) -> Any:
        load = loader.load(k)
        sibling = loader.load(k)
        sibling.cancel()
        return await load, sibling.cancelled()

    with record() as rec:
        out = batchy.run(batchy.gather(gen_view(1), async_view(1), async_view(5)))
    assert out == [(10, True, "from outside"), (10, True), (50, True)]
    assert rec.calls("dl") == [[1, 2, 5]]
    assert calls == [[1, 2, 5]]


def test_cancelling_a_handler_cancels_only_the_load_it_waits_on() -> None:
    loader, calls = make()
    loads: list[Any] = []

    @batchy.task
    def waits(k: int) -> Any:
        load = loader.load(k)
        loads.append(load)
        return (yield load)

    async def main() -> Any:
        victim, survivor = waits(1), waits(1)
        both = asyncio.ensure_future(batchy.gather(survivor, victim, return_exceptions=True))
        while len(loads) < 2:  # both handlers wait on their load
            await asyncio.sleep(0)
        assert victim.cancel() is True
        return await both

    survivor_value, victim_error = asyncio.run(main())
    assert survivor_value == 10
    assert isinstance(victim_error, asyncio.CancelledError)
    assert [load.cancelled() for load in loads] == [False, True]
    assert calls == [[1]]


def test_cancelling_a_parallel_yield_cancels_its_loads_only() -> None:
    loader, calls = make()
    held: list[Any] = []

    @batchy.task
    def pair() -> Any:
        loads = [loader.load(1), loader.load(2)]
        held.extend(loads)
        return (yield loads)

    @batchy.task
    def single() -> Any:
        return (yield loader.load(1))

    async def main() -> Any:
        victim, survivor = pair(), single()
        both = asyncio.ensure_future(batchy.gather(survivor, victim, return_exceptions=True))
        while len(held) < 2:
            await asyncio.sleep(0)
        assert victim.cancel() is True
        return await both

    survivor_value, victim_error = asyncio.run(main())
    assert survivor_value == 10
    assert isinstance(victim_error, asyncio.CancelledError)
    assert [load.cancelled() for load in held] == [True, True]
    assert calls == [[1, 2]]


def test_loads_made_before_the_loop_runs() -> None:
    loader, calls = make()
    dropped, kept, answered = loader.load(1), loader.load(1), loader.load(2)
    assert dropped.cancel() is True
    answered.set_result("outside")
    assert batchy.run(batchy.gather(kept, answered)) == [10, "outside"]
    assert dropped.cancelled()
    assert calls == [[1]]


@pytest.mark.parametrize("how", ["cancelled", "lazy"])
async def test_a_batch_that_fails_otherwise_than_by_raising_is_not_kept_in_the_cache(
    how: str,
) -> None:
    # Only an Exception raised by the batch function itself cleared its keys: a
    # CancelledError (a driver's own cancel), or a generator of values that fails
    # as it is read, stayed in the cache, and every retry got the same error
    # without calling the function again.
    rows = {1: "ann"}
    calls: list[list[int]] = []

    async def load(ids: list[int]) -> Any:
        calls.append(ids)
        if len(calls) == 1 and how == "cancelled":
            raise asyncio.CancelledError("db connection reset")
        return (rows[i] for i in ids)

    loader: DataLoader[int, str] = DataLoader(load)
    with pytest.raises(asyncio.CancelledError if how == "cancelled" else KeyError):
        await loader.load(1 if how == "cancelled" else 2)
    rows[2] = "bob"
    assert await loader.load(1 if how == "cancelled" else 2) == rows[1 if how == "cancelled" else 2]
    assert len(calls) == 2


@pytest.mark.parametrize("cache", [True, False])
@pytest.mark.parametrize("how", ["load", "load_many"])
async def test_a_key_that_cannot_be_hashed_names_the_dataloader_and_cache_key_fn(
    cache: bool, how: str
) -> None:
    # With the cache on: a bare "TypeError: unhashable type: 'list'" from the
    # cache's dict; with it off, a hint naming @batched's key=, not cache_key_fn=.
    async def users(ids: list[Any]) -> list[Any]:
        return ids

    loader: DataLoader[Any, Any] = DataLoader(users, cache=cache, name="users")
    with pytest.raises(batchy.InvalidKeyError) as error:
        if how == "load":
            loader.load([1, 2])
        else:
            loader.load_many([[1, 2]])
    shown = str(error.value)
    assert shown.startswith("DataLoader 'users' got key [1, 2] (list), which cannot be hashed")
    assert shown.endswith(
        "; pass cache_key_fn= to turn keys into hashable cache keys (for example "
        "cache_key_fn=tuple for lists, or json.dumps with sort_keys=True for dicts)"
    )
    keyed: DataLoader[Any, Any] = DataLoader(users, cache=cache, cache_key_fn=tuple)
    assert await keyed.load([1, 2]) == [1, 2]
