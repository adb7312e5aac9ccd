"""Nothing hangs: every error reaches the futures it concerns, and only those.

Each test here hung (or failed the wrong futures) on the engine before it was
made robust; each runs under a hard bound so that a regression fails instead of
blocking the suite.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import batchy


def bounded(fn: Callable[[], Any], seconds: float = 5.0) -> Any:
    """Call ``fn`` in a thread; fail the test if it does not end within ``seconds``."""
    out: list[Any] = []
    err: list[BaseException] = []

    def target() -> None:
        try:
            out.append(fn())
        except BaseException as error:
            err.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"did not end within {seconds} s (a hang)")
    if err:
        raise err[0]
    return out[0]


def counting(calls: list[list[Any]], name: str = "double") -> batchy.Loader[Any, Any]:
    def double(keys: list[Any]) -> list[Any]:
        calls.append(keys)
        return [k * 2 for k in keys]

    return batchy.batched(name=name)(double)


class BadRepr:
    """A value whose repr and str raise, like a detached ORM row."""

    def __repr__(self) -> str:
        raise RuntimeError("detached instance")

    __str__ = __repr__


class BadHash:
    def __init__(self, boom: str) -> None:
        self.boom = boom

    def __hash__(self) -> int:
        if self.boom == "hash":
            raise RuntimeError("no hash for you")
        return 1

    def __eq__(self, other: object) -> bool:
        if "eq" in (self.boom, getattr(other, "boom", None)):
            raise RuntimeError("no eq for you")
        return self is other


# -- §1 errors reach the futures they concern ----------------------------------------


@pytest.mark.parametrize("bad", [{"a": 1}, [1, 2]], ids=["dict", "list"])
def test_unhashable_key_fails_only_the_caller_and_the_round_goes_on(bad: Any) -> None:
    calls: list[list[Any]] = []
    double = counting(calls)
    other_calls: list[list[Any]] = []
    other = counting(other_calls, "other")

    @batchy.task
    def careless() -> Any:
        try:
            double(bad)
        except batchy.UsageError as error:
            return str(error)
        yield
        return "no error"

    @batchy.task
    def fine(k: int) -> Any:
        return (yield other(k))

    message, value = bounded(lambda: batchy.run(batchy.gather(careless(), fine(1))))
    assert "loader 'double'" in message and "cannot be hashed" in message and "key=" in message
    assert value == 2
    assert calls == []  # the empty batch was never flushed
    assert other_calls == [[1]]


def test_an_unhashable_key_is_also_a_type_error() -> None:
    double = counting([])

    async def main() -> None:
        with pytest.raises(TypeError):
            double([1])

    bounded(lambda: asyncio.run(main()))


def test_key_function_mapping_keyed_by_cache_key() -> None:
    calls: list[list[Any]] = []

    @batchy.batched(key=tuple)
    def total(keys: list[list[int]]) -> dict[Any, int]:
        calls.append(keys)
        return {tuple(k): sum(k) for k in keys}

    @batchy.task
    def handler() -> Any:
        return (yield [total([1, 2]), total([3, 4])])

    assert bounded(lambda: batchy.run(handler())) == [3, 7]
    assert calls == [[[1, 2], [3, 4]]]


class Custom(BaseException):
    pass


@pytest.mark.parametrize(
    "error",
    [asyncio.CancelledError, GeneratorExit, Custom],
    ids=["CancelledError", "GeneratorExit", "custom"],
)
def test_plain_loader_raising_a_base_exception_fails_its_keys_only(
    error: type[BaseException],
) -> None:
    @batchy.batched
    def broken(keys: list[int]) -> list[int]:
        raise error()

    other_calls: list[list[Any]] = []
    other = counting(other_calls, "other")

    @batchy.task
    def handler() -> Any:
        try:
            yield broken(1)
        except BaseException as caught:
            return type(caught)

    @batchy.task
    def fine() -> Any:
        return (yield other(5))

    got, value = bounded(lambda: batchy.run(batchy.gather(handler(), fine())))
    assert got in (error, batchy.LoaderError)
    assert value == 10
    assert other_calls == [[5]]


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
def test_keyboard_interrupt_and_system_exit_from_a_loader_reach_the_caller(
    error: type[BaseException],
) -> None:
    @batchy.batched
    def broken(keys: list[int]) -> list[int]:
        raise error()

    @batchy.task
    def handler() -> Any:
        return (yield broken(1))

    with pytest.raises(error):
        bounded(lambda: batchy.run(handler()))


@pytest.mark.parametrize("boom", ["hash", "eq"])
def test_a_key_whose_hash_or_eq_raises_fails_only_its_caller(boom: str) -> None:
    calls: list[list[Any]] = []

    @batchy.batched(name="ident")
    def ident(keys: list[Any]) -> list[Any]:
        calls.append(keys)
        return ["v" for _ in keys]

    first = BadHash("none")

    @batchy.task
    def handler() -> Any:
        a = ident(first)
        try:
            ident(BadHash(boom))  # same hash as ``first``: eq is called
        except batchy.UsageError as error:
            return (yield a), str(error)
        return (yield a), "no error"

    value, message = bounded(lambda: batchy.run(handler()))
    assert value == "v"
    assert "loader 'ident'" in message and f"no {boom} for you" in message
    assert calls == [[first]]


def test_messages_survive_keys_values_and_errors_whose_repr_raises() -> None:
    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("str failed")

    @batchy.batched
    def wrong_length(keys: list[Any]) -> list[Any]:
        return [BadRepr()]  # one value for two keys

    @batchy.batched
    def raises(keys: list[Any]) -> list[Any]:
        raise Broken()

    @batchy.batched
    def by_dict(keys: list[Any]) -> dict[Any, Any]:
        return {BadRepr(): 1}

    @batchy.task
    def catch(fut: Any) -> Any:
        try:
            yield fut
        except batchy.BatchyError as error:
            return str(error)

    with pytest.raises(batchy.YieldError, match="BadRepr object"):
        batchy.gather(BadRepr())  # type: ignore[arg-type]

    @batchy.task
    def root() -> Any:
        k1, k2 = BadRepr(), BadRepr()
        return (
            yield [
                catch(wrong_length(k1)),
                catch(wrong_length(k2)),
                catch(raises(BadRepr())),
                catch(by_dict(BadRepr())),
            ]
        )

    msgs = bounded(lambda: batchy.run(root()))
    assert "returned 1 values for 2 keys" in msgs[0]
    assert "repr() failed with RuntimeError" in msgs[0]
    assert "raised Broken" in msgs[2]
    assert "no entry for key" in msgs[3]


def test_yielding_a_value_whose_repr_raises_is_a_yield_error() -> None:
    @batchy.task
    def handler() -> Any:
        try:
            yield BadRepr()
        except batchy.YieldError as error:
            return str(error)

    assert "BadRepr" in bounded(lambda: batchy.run(handler()))


def test_a_task_finished_in_an_earlier_run_gives_its_value_or_error() -> None:
    @batchy.task
    def one() -> Any:
        return 1
        yield

    @batchy.task
    def bad() -> Any:
        raise ValueError("bad")
        yield

    done, failed = one(), bad()
    assert batchy.run(done) == 1
    with pytest.raises(ValueError):
        batchy.run(failed)

    @batchy.task
    def later() -> Any:
        a = yield done
        b = yield [done, done]
        try:
            yield failed
        except ValueError:
            return a, b, "caught"

    assert bounded(lambda: batchy.run(later())) == (1, [1, 1], "caught")
    assert bounded(lambda: batchy.run(done)) == 1
    assert bounded(lambda: batchy.run(batchy.gather(done, done))) == [1, 1]


def test_a_task_pending_on_another_loop_is_a_clear_error_at_the_yield() -> None:
    never: batchy.Future[Any] = batchy.Future()

    @batchy.task
    async def forever() -> Any:
        return await never

    t = forever()
    wrapper: list[asyncio.Future[Any]] = []

    async def start() -> None:
        wrapper.append(asyncio.ensure_future(t))  # type: ignore[arg-type]
        await asyncio.sleep(0.01)

    first = asyncio.new_event_loop()
    first.run_until_complete(start())  # t is left waiting on the first loop

    @batchy.task
    def other() -> Any:
        try:
            yield t
        except batchy.UsageError as error:
            return str(error)

    message = bounded(lambda: batchy.run(other()))
    assert "task " in message and "forever" in message and "another" in message
    wrapper[0].cancel()
    first.run_until_complete(asyncio.gather(*wrapper, return_exceptions=True))
    first.close()


# -- cycles ---------------------------------------------------------------------------


def test_a_task_that_yields_itself_is_a_cycle_error() -> None:
    me: list[Any] = []

    @batchy.task
    def selfish() -> Any:
        try:
            yield me[0]
        except batchy.CycleError as error:
            return str(error)

    me.append(selfish())
    message = bounded(lambda: batchy.run(me[0]))
    assert "cycle" in message and "selfish" in message


def test_an_async_task_awaiting_itself_is_a_cycle_error() -> None:
    me: list[Any] = []

    @batchy.task
    async def selfish() -> Any:
        await me[0]

    me.append(selfish())
    with pytest.raises(batchy.CycleError, match="selfish"):
        bounded(lambda: batchy.run(me[0]))


def test_two_tasks_yielding_each_other_is_a_cycle_error_naming_both() -> None:
    tasks: dict[str, Any] = {}

    @batchy.task
    def ping() -> Any:
        return (yield tasks["pong"])

    @batchy.task
    def pong() -> Any:
        return (yield tasks["ping"])

    tasks["ping"], tasks["pong"] = ping(), pong()
    with pytest.raises(batchy.CycleError) as info:
        bounded(lambda: batchy.run(tasks["ping"]))
    assert "ping" in str(info.value) and "pong" in str(info.value)
    assert isinstance(info.value, batchy.BatchyError)


def test_a_cycle_through_a_gather_is_found() -> None:
    tasks: dict[str, Any] = {}
    calls: list[list[Any]] = []
    double = counting(calls)

    @batchy.task
    def parent() -> Any:
        return (yield [double(1), tasks["child"]])

    @batchy.task
    def child() -> Any:
        yield double(2)
        return (yield tasks["parent"])

    tasks["parent"], tasks["child"] = parent(), child()
    with pytest.raises(batchy.CycleError, match="parent"):
        bounded(lambda: batchy.run(tasks["parent"]))


def test_a_shared_child_is_not_a_cycle() -> None:
    calls: list[list[Any]] = []
    double = counting(calls)

    @batchy.task
    def child() -> Any:
        return (yield double(1))

    @batchy.task
    def parent(c: Any) -> Any:
        return (yield c)

    c = child()
    assert bounded(lambda: batchy.run(batchy.gather(parent(c), parent(c), c))) == [2, 2, 2]


# -- nested yields --------------------------------------------------------------------


def test_yielding_a_self_referential_list_is_a_yield_error() -> None:
    @batchy.task
    def handler() -> Any:
        loop: list[Any] = []
        loop.append(loop)
        try:
            yield loop
        except batchy.YieldError as error:
            return str(error)

    assert "contains itself" in bounded(lambda: batchy.run(handler()))


@pytest.mark.parametrize("kind", [list, dict])
def test_yielding_a_deeply_nested_shape_is_a_yield_error(kind: type) -> None:
    double = counting([])

    @batchy.task
    def handler() -> Any:
        value: Any = double(1)
        for _ in range(1000):
            value = [value] if kind is list else {"k": value}
        try:
            yield value
        except batchy.YieldError as error:
            return str(error)

    assert "levels deep" in bounded(lambda: batchy.run(handler()))


def test_gather_of_a_deep_shape_is_a_yield_error() -> None:
    value: Any = batchy.resolved(1)
    for _ in range(1000):
        value = [value]
    with pytest.raises(batchy.YieldError, match="levels deep"):
        batchy.run(batchy.gather(value))


# -- §2 cancellation of shared work ---------------------------------------------------


def test_cancelling_one_parent_keeps_a_shared_child_for_the_other() -> None:
    calls: list[list[Any]] = []

    @batchy.batched
    async def slow(keys: list[int]) -> list[int]:
        calls.append(keys)
        await asyncio.sleep(0.05)
        return keys

    @batchy.task
    def child() -> Any:
        return (yield slow(1))

    @batchy.task
    def parent(c: Any) -> Any:
        return (yield c)

    async def main() -> Any:
        c = child()
        p1, p2 = parent(c), parent(c)
        f1 = asyncio.ensure_future(p1)  # type: ignore[arg-type]
        f2 = asyncio.ensure_future(p2)  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        p1.cancel()
        r1, r2 = await asyncio.gather(f1, f2, return_exceptions=True)
        return type(r1), r2, c.result()

    assert bounded(lambda: asyncio.run(main())) == (asyncio.CancelledError, 1, 1)
    assert calls == [[1]]


def test_a_cancelled_gather_keeps_leaves_another_parent_waits_on() -> None:
    @batchy.batched
    async def slow(keys: list[int]) -> list[int]:
        await asyncio.sleep(0.05)
        return keys

    @batchy.task
    def child(k: int) -> Any:
        return (yield slow(k))

    @batchy.task
    def gathering(a: Any, b: Any) -> Any:
        return (yield [a, b])

    @batchy.task
    def single(c: Any) -> Any:
        return (yield c)

    # own is cancelled (nobody else waits on it); shared goes on for ``single``
    async def main() -> Any:
        shared, own = child(1), child(2)
        g = gathering(shared, own)
        s = single(shared)
        fg = asyncio.ensure_future(g)  # type: ignore[arg-type]
        fs = asyncio.ensure_future(s)  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        g.cancel()
        rg, rs = await asyncio.gather(fg, fs, return_exceptions=True)
        return type(rg), rs, type(own.exception()), shared.result()

    assert bounded(lambda: asyncio.run(main())) == (
        asyncio.CancelledError,
        1,
        asyncio.CancelledError,
        1,
    )


def test_run_cancels_and_names_tasks_left_unfinished() -> None:
    cleaned: list[str] = []

    @batchy.task
    async def forever() -> Any:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append("forever")

    @batchy.task
    def starter() -> Any:
        watch: batchy.Watch[str] = batchy.Watch()
        watch.add(forever(), "left behind")  # started, never waited for
        return "done"
        yield

    with pytest.warns(RuntimeWarning, match=r"forever"):
        assert bounded(lambda: batchy.run(starter())) == "done"
    assert cleaned == ["forever"]


def test_run_looks_for_unfinished_tasks_past_a_half_made_one() -> None:
    # A batchy.Task() refused its argument after its object was made; a
    # traceback can keep that half-made task alive. The run's search of the
    # heap for unfinished tasks broke on it with AttributeError (no _sched).
    try:
        batchy.Task(object())  # type: ignore[arg-type]
    except batchy.UsageError as error:
        kept = error  # its traceback holds the half-made task
    assert kept.__traceback__ is not None
    test_run_cancels_and_names_tasks_left_unfinished()


def test_cleanup_that_yields_after_a_timeout_runs_to_its_end() -> None:
    calls: list[list[Any]] = []
    record = counting(calls, "record")
    steps: list[str] = []

    @batchy.batched
    async def slow(keys: list[int]) -> list[int]:
        await asyncio.sleep(10)
        return keys

    @batchy.task
    def handler() -> Any:
        try:
            yield slow(1)
        except asyncio.CancelledError:
            steps.append("cancelled")
            steps.append((yield record(1)))
            steps.append((yield record(2)))
            raise

    with pytest.raises(TimeoutError):
        bounded(lambda: batchy.run(asyncio.wait_for(handler(), 0.05)))  # type: ignore[arg-type]
    assert steps == ["cancelled", 2, 4]
    assert calls == [[1], [2]]


@pytest.mark.parametrize("kind", ["generator", "async"])
def test_a_task_cancelled_before_it_started_is_never_stepped(kind: str) -> None:
    calls: list[list[Any]] = []
    double = counting(calls)

    if kind == "async":

        @batchy.task
        async def child() -> Any:
            return await double(1)

    else:

        @batchy.task
        def child() -> Any:
            return (yield double(1))

    @batchy.task
    def parent() -> Any:
        c = child()
        c.cancel()
        alone, gathered = batchy.gather(c, return_exceptions=True), None
        first = yield alone
        try:
            gathered = yield c
        except asyncio.CancelledError as error:
            gathered = type(error)
        return [type(e) for e in first], gathered

    got = bounded(lambda: batchy.run(parent()))
    assert got == ([asyncio.CancelledError], asyncio.CancelledError)
    assert calls == []


@pytest.mark.parametrize("kind", ["generator", "async"])
def test_cancelling_a_task_whose_wait_just_ended_steps_it_once(kind: str) -> None:
    steps: list[str] = []
    box: dict[str, Any] = {}

    @batchy.batched
    def load(keys: list[int]) -> list[int]:
        return keys

    if kind == "async":

        @batchy.task
        async def victim() -> Any:
            try:
                return await load(1)
            except asyncio.CancelledError:
                steps.append("cancelled")
                raise

    else:

        @batchy.task
        def victim() -> Any:
            try:
                return (yield load(1))
            except asyncio.CancelledError:
                steps.append("cancelled")
                raise

    @batchy.task
    def killer() -> Any:
        yield load(2)  # same batch as the victim's key: woken right after it
        box["victim"].cancel()

    @batchy.task
    def root() -> Any:
        box["victim"] = victim()
        # The killer's key comes first in the batch: it runs, and cancels the
        # victim, while the victim is already queued to take its value.
        return (yield batchy.gather(killer(), box["victim"], return_exceptions=True))

    got = bounded(lambda: batchy.run(root()))
    assert [type(g) for g in got] == [type(None), asyncio.CancelledError]
    assert steps == ["cancelled"]
    # Stepped a second time, it used to end again: with None, or "cannot reuse
    # already awaited coroutine", overwriting the CancelledError its waiters saw.
    assert type(box["victim"].exception()) is asyncio.CancelledError


@pytest.mark.parametrize("style", ["async", "generator"])
def test_a_future_of_another_event_loop_fails_its_handler_rather_than_hanging(style: str) -> None:
    # A future kept from an earlier batchy.run (or another thread's loop) was
    # waited on for ever: nothing on this loop would ever wake it.
    kept: list[asyncio.Future[int]] = []

    async def keep() -> None:
        kept.append(asyncio.get_running_loop().create_future())

    batchy.run(keep())

    if style == "async":

        @batchy.task
        async def handler() -> int:
            return await kept[0]

    else:

        @batchy.task
        def handler() -> Any:
            value = yield kept[0]
            return value

    async def main() -> Any:
        return await asyncio.wait_for(handler(), 5)

    with pytest.raises(batchy.YieldError) as error:
        batchy.run(main())
    assert "waits on <Future pending>, which belongs to another event loop" in str(error.value)
    assert "asyncio.run_coroutine_threadsafe()" in str(error.value)


def test_coroutines_returned_as_values_fail_their_keys_and_are_closed() -> None:
    # `return [fetch(k) for k in keys]` (the gather forgotten) handed each key a
    # coroutine object as its value, and "never awaited" warned later, elsewhere.
    async def fetch(k: int) -> str:
        return f"user {k}"

    @batchy.batched(name="users")
    async def users(keys: list[int]) -> list[Any]:
        return [fetch(k) for k in keys]

    @batchy.batched(thread=True, name="users_in_a_thread")
    def users_in_a_thread(keys: list[int]) -> Any:
        async def fetch_many() -> list[str]:
            return [f"user {k}" for k in keys]

        return fetch_many()  # an async function's coroutine, made in a thread

    async def main() -> list[Any]:
        async with batchy.scope():
            return await batchy.gather(
                users(1), users(2), users_in_a_thread(3), return_exceptions=True
            )

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        one, two, threaded = batchy.run(main())
        gc.collect()
    assert [str(w.message) for w in caught] == []
    assert str(one) == (
        "loader 'users' returned a coroutine "
        "(test_coroutines_returned_as_values_fail_their_keys_and_are_closed.<locals>.fetch) as "
        "the value of key 1, not awaited; await them in the batch function: return await "
        "asyncio.gather(*(fetch(k) for k in keys))"
    )
    assert "as the value of key 2" in str(two)
    assert str(threaded).startswith("loader 'users_in_a_thread' runs in a thread (thread=True), ")
    assert str(threaded).endswith(
        "an async def batch function runs on the event loop; drop thread=True"
    )
