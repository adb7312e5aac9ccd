"""Handlers: generators and coroutines, what they may yield, and how errors travel."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import batchy
from batchy.testing import record


def make_loader(calls: list[list[Any]], fail: set[Any] = frozenset()) -> batchy.Loader[Any, Any]:
    @batchy.batched
    def double(keys: list[Any]) -> list[Any]:
        calls.append(keys)
        return [ValueError(f"bad {k}") if k in fail else k * 2 for k in keys]

    return double


def test_yield_shapes_give_results_in_the_same_shape() -> None:
    calls: list[list[Any]] = []
    double = make_loader(calls)

    @batchy.task
    def handler() -> Any:
        one = yield double(1)
        pair = yield double(2), double(3)
        listed = yield [double(4), [double(5), double(6)]]
        mapped = yield {"a": double(7), "b": (double(8),)}
        empty = yield []
        return one, pair, listed, mapped, empty

    assert batchy.run(handler()) == (2, (4, 6), [8, [10, 12]], {"a": 14, "b": (16,)}, [])
    assert calls == [[1], [2, 3], [4, 5, 6], [7, 8]]


def test_generator_and_async_handlers_nest_freely() -> None:
    calls: list[list[Any]] = []
    double = make_loader(calls)

    @batchy.task
    async def leaf(k: int) -> int:
        return await double(k) + 1

    @batchy.task
    def middle(k: int) -> Any:
        a, b = yield leaf(k), double(k + 100)
        return a + b

    @batchy.task
    async def top() -> list[int]:
        return await batchy.gather(middle(1), middle(2))

    assert batchy.run(top()) == [2 + 1 + 202, 4 + 1 + 204]
    assert calls == [[101, 102, 1, 2]]  # started tasks run after the current ones


def test_generator_may_yield_asyncio_awaitables_that_run_concurrently() -> None:
    calls: list[list[Any]] = []
    double = make_loader(calls)

    async def http_call(x: int) -> int:
        await asyncio.sleep(0.01)
        return x

    @batchy.task
    def handler() -> Any:
        a, b, c = yield http_call(1), http_call(2), double(3)
        fut = asyncio.ensure_future(http_call(4))
        d = yield fut
        return a, b, c, d

    assert batchy.run(handler()) == (1, 2, 6, 4)
    assert calls == [[3]]


def test_async_handler_can_await_asyncio_code() -> None:
    @batchy.task
    async def handler() -> int:
        await asyncio.sleep(0)
        await asyncio.sleep(0.001)
        return 5

    assert batchy.run(handler()) == 5


def test_error_is_thrown_into_the_parent_at_its_yield() -> None:
    calls: list[list[Any]] = []
    double = make_loader(calls, fail={2})

    @batchy.task
    def child(k: int) -> Any:
        value = yield double(k)
        return value

    @batchy.task
    def parent() -> Any:
        try:
            yield child(2)
        except ValueError as e:
            caught = str(e)
        ok = yield child(1)
        return caught, ok

    assert batchy.run(parent()) == ("bad 2", 2)
    assert calls == [[2], [1]]


def test_async_parent_catches_child_error() -> None:
    @batchy.task
    async def child() -> None:
        raise KeyError("gone")

    @batchy.task
    async def parent() -> str:
        try:
            await child()
        except KeyError:
            return "caught"
        return "not caught"

    assert batchy.run(parent()) == "caught"


def test_parallel_yield_runs_every_sibling_and_raises_the_first_error() -> None:
    finished: list[int] = []

    @batchy.task
    def child(k: int) -> Any:
        yield batchy.resolved(None)
        finished.append(k)
        if k % 2:
            raise ValueError(f"child {k} failed")
        return k

    @batchy.task
    def parent() -> Any:
        yield [child(k) for k in range(6)]

    with pytest.raises(ValueError, match="child 1 failed") as info:
        batchy.run(parent())
    assert sorted(finished) == list(range(6))
    assert info.value.__notes__ == [
        "batchy: 2 other error(s) in the same parallel yield: ValueError('child 3 failed'), "
        "ValueError('child 5 failed') (gather with raise_group=True to get them all)"
    ]


def test_raise_group_gives_every_error() -> None:
    @batchy.task
    def child(k: int) -> Any:
        yield batchy.resolved(None)
        raise ValueError(k)

    with pytest.raises(ExceptionGroup) as info:
        batchy.run(batchy.gather(child(1), child(2), raise_group=True))
    assert [e.args[0] for e in info.value.exceptions] == [1, 2]


def test_return_exceptions_puts_errors_in_the_results() -> None:
    @batchy.task
    def child(k: int) -> Any:
        yield batchy.resolved(None)
        if k == 2:
            raise ValueError(k)
        return k

    result = batchy.run(batchy.gather(child(1), child(2), return_exceptions=True))
    assert result[0] == 1
    assert isinstance(result[1], ValueError)


def test_yielding_a_plain_value_names_handler_file_line_and_value() -> None:
    @batchy.task
    def handler() -> Any:
        yield 42

    with pytest.raises(batchy.YieldError) as info:
        batchy.run(handler())
    message = str(info.value)
    assert message.startswith(
        "handler test_yielding_a_plain_value_names_handler_file_line_and_value.<locals>.handler ("
    )
    assert "test_task.py:" in message
    assert "yielded 42 (int)" in message
    assert "To use a plain value, assign it instead of yielding it." in message
    assert isinstance(info.value, TypeError)


def test_yielding_a_function_suggests_calling_it() -> None:
    calls: list[list[Any]] = []
    double = make_loader(calls)

    @batchy.task
    def handler() -> Any:
        yield [double(1), double]

    with pytest.raises(
        batchy.YieldError,
        match=r"inside \[<Future pending>, <batchy.Loader .*double>\].*Did you forget to call it\?",
    ):
        batchy.run(handler())


def test_bare_yield_is_an_error_in_generators() -> None:
    @batchy.task
    def handler() -> Any:
        yield

    with pytest.raises(batchy.YieldError, match="A bare 'yield' waits for nothing"):
        batchy.run(handler())


def test_yield_error_can_be_caught_by_the_handler() -> None:
    @batchy.task
    def handler() -> Any:
        try:
            yield object()
        except TypeError:
            return "recovered"
        return "no"

    assert batchy.run(handler()) == "recovered"


def test_task_decorator_rejects_plain_functions() -> None:
    def plain() -> int:
        return 1

    with pytest.raises(batchy.UsageError) as info:
        batchy.task(plain)  # type: ignore[call-overload]
    assert str(info.value) == (
        "@batchy.task expects a generator function (one that yields) or an async def; "
        "'test_task_decorator_rejects_plain_functions.<locals>.plain' is neither. Yield the "
        "futures it waits on, or make it async def and await them."
    )


def test_tasks_as_methods_bind_self() -> None:
    class Views:
        factor = 3

        @batchy.task
        def scaled(self, x: int) -> Any:
            yield batchy.resolved(None)
            return x * self.factor

    assert batchy.run(Views().scaled(2)) == 6


def test_task_repr_and_name() -> None:
    @batchy.task
    def named() -> Any:
        yield batchy.resolved(1)

    t = named()
    assert t.name.endswith("named")
    assert repr(t).startswith("<batchy.Task ") and repr(t).endswith("named pending>")
    batchy.run(t)
    assert repr(t).endswith("named done>")


def test_result_before_done_is_a_clear_error() -> None:
    @batchy.task
    def h() -> Any:
        yield batchy.resolved(1)

    t = h()
    with pytest.raises(batchy.UsageError, match="has no result yet; yield or await it"):
        t.result()
    t.cancel()  # never run: cancelled, so it is not reported as never awaited


def test_failed_tasks_reach_hooks() -> None:
    @batchy.task
    def boom() -> Any:
        yield batchy.resolved(None)
        raise RuntimeError("boom")

    with record() as rec, pytest.raises(RuntimeError):
        batchy.run(boom())
    assert [(t.name.rsplit(".", 1)[-1], str(e)) for t, e in rec.failures] == [("boom", "boom")]


def test_deep_chains_do_not_overflow_the_stack() -> None:
    @batchy.task
    def chain(n: int) -> Any:
        if n == 0:
            return 0
        value = yield chain(n - 1)
        return value + 1

    assert batchy.run(chain(3000)) == 3000


def test_run_inside_a_running_loop_is_refused() -> None:
    @batchy.task
    def h() -> Any:
        yield batchy.resolved(1)

    async def main() -> None:
        t = h()
        with pytest.raises(batchy.UsageError, match="'await' the task"):
            batchy.run(t)
        assert await t is None

    asyncio.run(main())


def test_run_refuses_non_awaitables() -> None:
    with pytest.raises(batchy.UsageError, match=r"got 3 \(int\). Did you call a plain function"):
        batchy.run(3)  # type: ignore[arg-type]


def test_gather_refuses_plain_values() -> None:
    with pytest.raises(batchy.YieldError, match=r"batchy.gather\(\) got 'x' \(str\)"):
        batchy.gather("x")  # type: ignore[arg-type]


def test_cancel_throws_into_the_handler_where_it_waits() -> None:
    log: list[str] = []

    @batchy.task
    async def slow() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            log.append("cleaned up")
            raise
        return "never"

    @batchy.task
    def parent() -> Any:
        child = slow()
        timer = asyncio.get_running_loop().call_later(0.01, child.cancel)
        try:
            yield child
        except asyncio.CancelledError:
            return "child cancelled"
        finally:
            timer.cancel()

    assert batchy.run(parent()) == "child cancelled"
    assert log == ["cleaned up"]


def test_asyncio_timeouts_cancel_batchy_tasks() -> None:
    finished: list[str] = []

    @batchy.task
    def waits_forever() -> Any:
        yield asyncio.sleep(10)
        finished.append("no")

    async def main() -> None:
        task = waits_forever()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(task, 0.01)
        for _ in range(10):  # cancellation is a request: it lands within a few iterations
            if task.done():
                break
            await asyncio.sleep(0)
        assert task.done()
        assert isinstance(task.exception(), asyncio.CancelledError)

    asyncio.run(main())
    assert finished == []


def test_cancel_before_start_and_after_finish() -> None:
    @batchy.task
    def h() -> Any:
        yield batchy.resolved(1)
        return 1

    t = h()
    assert t.cancel("not needed") is True
    assert isinstance(t.exception(), asyncio.CancelledError)
    done = h()
    assert batchy.run(done) == 1
    assert done.cancel() is False


def test_a_duplicated_failure_is_not_listed_as_another_error() -> None:
    @batchy.batched
    def flaky(keys: list[int]) -> list[Any]:
        return [ValueError(f"no {k}") for k in keys]

    @batchy.task
    def h() -> Any:
        yield [flaky(2), flaky(2)]

    with pytest.raises(ValueError, match="no 2") as info:
        batchy.run(h())
    assert getattr(info.value, "__notes__", []) == []


def test_errors_show_their_public_path() -> None:
    assert batchy.LoaderError.__module__ == "batchy"
    assert repr(batchy.UsageError("x")) == "UsageError('x')"


def test_task_from_a_handler_object_and_failed_futures() -> None:
    def plain_gen() -> Any:
        value = yield batchy.failed(LookupError("gone"))
        return value

    task = batchy.Task(plain_gen())
    assert task.name.endswith("plain_gen")
    with pytest.raises(LookupError, match="gone"):
        batchy.run(task)

    async def coro() -> int:
        return await batchy.resolved(4)

    assert batchy.run(batchy.Task(coro())) == 4
    with pytest.raises(batchy.UsageError) as info:
        batchy.Task(3)  # type: ignore[arg-type]
    assert str(info.value) == (
        "batchy.Task() takes a generator or coroutine object, got 3 (int); "
        "call the handler function first"
    )


def test_run_does_not_repr_the_result() -> None:
    class NoRepr:
        def __repr__(self) -> str:
            raise AssertionError("repr called")

    @batchy.task
    def h() -> Any:
        yield batchy.resolved(None)
        return NoRepr()

    assert isinstance(batchy.run(h()), NoRepr)


def test_calling_a_task_function_keeps_the_handler_signature() -> None:
    @batchy.task
    def every_kind(a: int, /, b: int = 2, *rest: int, c: int, d: int = 4, **more: int) -> Any:
        yield batchy.resolved(None)
        return a, b, rest, c, d, more

    assert batchy.run(every_kind(1, c=3)) == (1, 2, (), 3, 4, {})
    assert batchy.run(every_kind(1, 5, 6, 7, c=3, d=8, e=9)) == (1, 5, (6, 7), 3, 8, {"e": 9})
    assert isinstance(every_kind, batchy.TaskFunction)
    with pytest.raises(
        TypeError, match=r"every_kind\(\) missing 1 required keyword-only argument: 'c'"
    ):
        every_kind(1)
    with pytest.raises(
        TypeError, match=r"every_kind\(\) missing 1 required positional argument: .a."
    ):
        every_kind(a=1, c=3)  # type: ignore[call-arg]


def test_async_handlers_are_asyncio_current_task_so_timeouts_and_taskgroups_work() -> None:
    calls: list[list[Any]] = []
    double = make_loader(calls)

    @batchy.task
    async def handler() -> Any:
        me = asyncio.current_task()
        try:
            async with asyncio.timeout(0.01):
                await asyncio.sleep(5)
        except TimeoutError:
            timed_out = True
        async with asyncio.TaskGroup() as group:
            a = group.create_task(asyncio.sleep(0, "a"))
            b = group.create_task(asyncio.sleep(0, "b"))
        value = await double(21)  # still batched after all that
        return me, timed_out, a.result() + b.result(), value, me.cancelling()

    task = handler()
    me, timed_out, ab, value, cancelling = batchy.run(task)
    assert me is task
    assert (timed_out, ab, value, cancelling) == (True, "ab", 42, 0)
    assert calls == [[21]]


def test_a_timeout_around_a_loader_wait_cancels_only_the_handler() -> None:
    @batchy.batched
    async def slow(keys: list[int]) -> list[int]:
        await asyncio.sleep(0.2)
        return keys

    @batchy.task
    async def handler() -> str:
        try:
            async with asyncio.timeout(0.01):
                await slow(1)
        except TimeoutError:
            return "timed out"
        return "loaded"

    assert batchy.run(batchy.gather(handler(), slow(2))) == ["timed out", 2]


# -- a parallel yield of loader futures: the task waits on them directly -----------------


def test_parallel_yield_of_keys_keeps_its_shape_and_waits_for_every_key() -> None:
    calls: list[list[Any]] = []
    double = make_loader(calls)

    @batchy.task
    def handler(k: int) -> Any:
        cached = yield double(k)
        pair = yield double(k), double(k + 1)  # one key cached, one not
        listed = yield [double(k + 2), double(k + 2)]  # the same future twice
        both_cached = yield double(k), double(k + 1)
        return cached, pair, listed, both_cached

    assert batchy.run(handler(1)) == (2, (2, 4), [6, 6], (2, 4))
    assert calls == [[1], [2], [3]]


def test_parallel_yield_of_keys_raises_the_first_error_after_every_key_ended() -> None:
    calls: list[list[Any]] = []
    double = make_loader(calls, fail={1, 2})

    @batchy.task
    def handler() -> Any:
        try:
            yield double(3), double(2), double(1), double(4)
        except ValueError as error:
            return str(error), error.__notes__, double(4).done()

    message, notes, fourth_done = batchy.run(handler())
    assert message == "bad 2"
    assert fourth_done
    assert len(notes) == 1 and "1 other error(s)" in notes[0] and "bad 1" in notes[0]
    assert calls == [[3, 2, 1, 4]]


def test_cancelling_a_handler_waiting_on_keys_spares_other_handlers_of_those_keys() -> None:
    calls: list[list[Any]] = []
    double = make_loader(calls)
    steps: list[str] = []

    @batchy.task
    def victim() -> Any:
        try:
            yield double(1), double(2)
        except asyncio.CancelledError:
            steps.append("victim cancelled")
            value = yield double(3)  # cleanup may still load
            return ("cleaned up", value)
        return "not cancelled"

    @batchy.task
    def other() -> Any:
        return (yield double(2), double(1))

    @batchy.task
    def root() -> Any:
        v, o = victim(), other()
        started = yield [v, o, canceller(v)]
        return started

    @batchy.task
    async def canceller(t: batchy.Task[Any]) -> None:
        t.cancel()

    assert batchy.run(root()) == [("cleaned up", 6), (4, 2), None]
    assert steps == ["victim cancelled"]
    assert calls == [[1, 2, 3]]  # the cleanup's key joined the round's batch


def test_cancel_after_the_keys_arrived_steps_the_handler_once() -> None:
    calls: list[list[Any]] = []
    double = make_loader(calls)
    resumed: list[str] = []

    @batchy.task
    def victim() -> Any:
        try:
            yield double(1), double(2)
            resumed.append("value")
        except asyncio.CancelledError:
            resumed.append("cancelled")
        return len(resumed)

    @batchy.task
    def sibling(v: batchy.Task[Any]) -> Any:
        yield double(2)
        v.cancel()  # the keys are resolved: victim is queued, not waiting
        return None

    @batchy.task
    def root() -> Any:
        v = victim()
        # sibling waits on key 2 before victim does, so it runs first when it arrives
        return (yield sibling(v), v)

    assert batchy.run(root()) == (None, 1)
    assert resumed == ["cancelled"]


def test_a_cycle_check_walks_past_a_handler_waiting_on_keys() -> None:
    calls: list[list[Any]] = []
    double = make_loader(calls)

    @batchy.task
    def waiting() -> Any:
        return (yield double(1), double(2))

    @batchy.task
    def root() -> Any:
        w = waiting()
        first = yield [w, late(w)]
        return first

    @batchy.task
    def late(w: batchy.Task[Any]) -> Any:
        return (yield w)  # w is running and waits on keys: no cycle, no crash

    assert batchy.run(root()) == [(2, 4), (2, 4)]


# -- Task.start_eagerly: a task stepped at once, up to its first wait ----------------


def test_an_eager_task_that_never_waits_is_done_before_start_eagerly_returns() -> None:
    seen: list[Any] = []

    async def at_once(k: int) -> int:
        seen.append(("ran", asyncio.current_task() is not None))
        return k + 1

    @batchy.task
    def handler() -> Any:
        task = batchy.Task(at_once(1))
        task.start_eagerly()
        seen.append(("after", task.done()))
        return task.result(), (yield task)

    assert batchy.run(handler()) == (2, 2)
    # It ran inside start_eagerly, as asyncio's current task, and was done after it.
    assert seen == [("ran", True), ("after", True)]


def test_an_eager_task_that_waits_goes_on_as_any_task_and_batches_with_the_others() -> None:
    calls: list[list[Any]] = []
    double = make_loader(calls)
    order: list[str] = []

    async def waits(k: int) -> int:
        order.append(f"before {k}")
        value = await double(k)
        order.append(f"after {k}")
        return value

    @batchy.task
    def handler() -> Any:
        first = batchy.Task(waits(1))
        first.start_eagerly()
        order.append("handler goes on")
        second = double(2)
        return (yield first, second)

    assert batchy.run(handler()) == (2, 4)
    assert order == ["before 1", "handler goes on", "after 1"]
    assert calls == [[1, 2]]  # its key and the handler's went in one batch


def test_an_eager_task_that_fails_at_once_holds_its_error_and_the_handler_goes_on() -> None:
    async def broken() -> None:
        raise KeyError("nope")

    @batchy.task
    def handler() -> Any:
        task = batchy.Task(broken())
        task.start_eagerly()
        assert task.done()
        try:
            yield task
        except KeyError as error:
            return f"caught {error}"
        return "no error"

    assert batchy.run(handler()) == "caught 'nope'"


def test_an_eager_task_sees_the_context_variables_of_its_starter() -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    async def reads() -> str:
        return var.get()

    @batchy.task
    def handler() -> Any:
        var.set("handler's")
        task = batchy.Task(reads())
        task.start_eagerly()
        return (yield task)

    assert batchy.run(handler()) == "handler's"


def test_an_eager_task_waiting_can_be_cancelled_and_is_closed() -> None:
    closed: list[str] = []

    async def sleeps() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            closed.append("cleaned up")

    @batchy.task
    def handler() -> Any:
        task = batchy.Task(sleeps())
        task.start_eagerly()
        task.cancel()
        try:
            yield task
        except asyncio.CancelledError:
            return "cancelled"
        return "ran"

    assert batchy.run(handler()) == "cancelled"
    assert closed == ["cleaned up"]


@pytest.mark.parametrize("where", ["outside", "twice"])
def test_start_eagerly_outside_a_handler_or_twice_is_refused_by_name(where: str) -> None:
    async def nothing() -> None:
        return None

    if where == "outside":
        task = batchy.Task(nothing())
        with pytest.raises(batchy.UsageError) as info:
            task.start_eagerly()
        task.cancel()  # closes the coroutine it never ran
    else:

        @batchy.task
        def handler() -> Any:
            task = batchy.Task(nothing())
            task.start_eagerly()
            task.start_eagerly()
            yield task

        with pytest.raises(batchy.UsageError) as info:
            batchy.run(handler())
    assert str(info.value) == (
        "Task.start_eagerly() on task test_start_eagerly_outside_a_handler_or_twice_is_refused_"
        "by_name.<locals>.nothing: call it once, on a task not started yet, from inside a "
        "running batchy handler"
    )


def test_an_eager_async_task_is_asyncios_current_task_even_under_an_async_parent() -> None:
    # The child's timeout must cancel the child, not the async def parent that
    # started it (which was asyncio's current task when it did).
    seen: list[str] = []

    async def child() -> str:
        try:
            async with asyncio.timeout(0.01):
                await asyncio.sleep(5)
        except TimeoutError:
            return "child timed out"
        return "child slept"

    @batchy.task
    async def parent() -> Any:
        task = batchy.Task(child())
        task.start_eagerly()
        try:
            await asyncio.sleep(0.05)
            seen.append("parent slept undisturbed")
        except asyncio.CancelledError:
            seen.append("parent cancelled by the child's timeout")
        return await task

    assert batchy.run(parent()) == "child timed out"
    assert seen == ["parent slept undisturbed"]


@pytest.mark.timeout(60)
def test_an_eager_start_that_hits_the_recursion_limit_never_leaves_a_task_stuck() -> None:
    # At every distance from the stack's limit, the task either runs or fails:
    # waiting for it always ends (a step broken before the handler went on is
    # stepped again by the scheduler, from its own shallow stack).
    import sys

    async def child() -> int:
        return 1

    def dig(depth: int, task: batchy.Task[int]) -> None:
        if depth:
            dig(depth - 1, task)
        else:
            task.start_eagerly()

    outcomes = set()
    for offset in range(10, 70):

        @batchy.task
        def handler(offset: int = offset) -> Any:
            task = batchy.Task(child())
            started = True
            try:
                dig(sys.getrecursionlimit() - offset, task)
            except RecursionError:
                started = task.scope is not None
            if not started:
                task.cancel()  # it never started: close its coroutine
                return "not started"
            try:
                return (yield task)
            except (RecursionError, RuntimeError) as error:
                return type(error).__name__

        outcomes.add(batchy.run(handler()))
    assert 1 in outcomes and "not started" in outcomes
    assert outcomes <= {1, "not started", "RecursionError", "RuntimeError"}


# -- Task.start: a task begun from asyncio code without waiting on it ----------------


async def test_a_started_task_runs_without_being_awaited_and_batches_with_the_others() -> None:
    calls: list[list[Any]] = []
    double = make_loader(calls)
    ended: list[Any] = []

    async def load(k: int) -> int:
        return await double(k)

    tasks = [batchy.Task(load(k)).start() for k in (1, 2, 3)]
    for task in tasks:
        task.add_done_callback(lambda t: ended.append(t.result()))
    assert not any(t.done() for t in tasks)  # begun from the scheduler's next step
    await asyncio.sleep(0.01)  # nobody awaits them: they run anyway
    assert ended == [2, 4, 6]
    assert calls == [[1, 2, 3]]  # one round for the three


async def test_a_started_task_runs_in_the_scope_it_is_given() -> None:
    calls: list[list[Any]] = []
    double = make_loader(calls)
    mine = batchy.scope("mine")

    async def load() -> batchy.Scope | None:
        await double(1)
        return batchy.current_scope()

    given = batchy.Task(load()).start(mine)
    assert await given is mine
    assert list(mine.stats.calls.values()) == [1]
    async with batchy.scope("entered") as entered:
        current = batchy.Task(load()).start()
    assert await current is entered  # no scope given: the current one


async def test_a_started_task_can_be_cancelled_and_its_callback_sees_it() -> None:
    seen: list[str] = []

    async def sleeps() -> None:
        await asyncio.sleep(10)

    task = batchy.Task(sleeps()).start()
    task.add_done_callback(lambda t: seen.append(type(t.exception()).__name__))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.sleep(0.01)
    assert seen == ["CancelledError"]


@pytest.mark.parametrize("where", ["no loop", "twice", "cancelled"])
def test_start_without_a_loop_or_twice_is_refused_by_name(where: str) -> None:
    async def nothing() -> None:
        return None

    task = batchy.Task(nothing())
    if where == "no loop":
        with pytest.raises(batchy.UsageError) as info:
            task.start()
        task.cancel()  # closes the coroutine it never ran
        expected = "no event loop is running here; call it from async code, or run the task "
        expected += "with batchy.run(...)"
    elif where == "cancelled":
        task.cancel()
        with pytest.raises(batchy.UsageError) as info:
            task.start()
        expected = "the task was cancelled; start a task once, then await it or add a "
        expected += "done callback"
    else:

        async def twice() -> None:
            task.start()
            await task
            task.start()

        with pytest.raises(batchy.UsageError) as info:
            asyncio.run(twice())
        expected = "the task was started already; start a task once, then await it or add "
        expected += "a done callback"
    name = "test_start_without_a_loop_or_twice_is_refused_by_name.<locals>.nothing"
    assert str(info.value) == f"Task.start() on task {name}: {expected}"


async def test_a_task_started_by_a_handler_gets_a_copy_of_its_context() -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[str] = []

    async def child() -> None:
        seen.append(f"child sees {var.get()}")
        var.set("set by the child")

    async def parent() -> None:
        var.set("parent's")
        started = batchy.Task(child()).start()
        var.set("parent's, after the start")
        await started
        seen.append(f"parent sees {var.get()}")

    await batchy.Task(parent())
    # As asyncio.create_task: the child saw the context as it was at its start,
    # and what it set stayed its own.
    assert seen == ["child sees parent's", "parent sees parent's, after the start"]


# -- a cancel requested while the task runs its own step ---------------------------------
#
# While a handler runs, its task waits on nothing: the step cleared that. A cancel
# requested then (the handler cancelling its own task, a callback or an eager child
# run inside the step) must land where the handler next waits, as asyncio.Task's
# ``_must_cancel`` does, not after that wait ends (which may be never).


def _bounded(aw: Any, seconds: float = 2.0) -> Any:
    """``batchy.run(aw)`` under a time bound: a cancel that never lands fails, not hangs."""

    async def main() -> Any:
        return await asyncio.wait_for(aw, seconds)

    return batchy.run(main())


WAITS = ["asyncio future", "batchy future", "loader keys", "child", "shared child", "gather"]


class _Waits:
    """Things to wait on that never end by themselves (until ``release`` is set)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls: list[list[int]] = []
        self.child_outcome: list[str] = []

        @batchy.batched
        async def stuck(keys: list[int]) -> list[int]:
            self.calls.append(keys)
            await self.release.wait()
            return keys

        self.stuck = stuck

    @batchy.task
    async def forever(self) -> str:
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.child_outcome.append("child cancelled")
            raise
        self.child_outcome.append("child released")
        return "child's value"

    def make(self, what: str) -> Any:
        if what == "asyncio future":
            return asyncio.get_running_loop().create_future()
        if what == "batchy future":
            return batchy.Future()  # a plain future cannot be cancelled: the task stops waiting
        if what == "loader keys":
            return self.stuck(1), self.stuck(2)
        # Children are started first, so they are waiting (not just queued) when cancelled.
        if what == "gather":
            return batchy.gather(self.forever().start(), batchy.Future())
        return self.forever().start()


@pytest.mark.parametrize("what", WAITS)
@pytest.mark.parametrize("kind", ["async", "generator"])
def test_a_handler_that_cancels_its_own_task_gets_the_error_where_it_next_waits(
    kind: str, what: str
) -> None:
    waits = _Waits()
    me: list[batchy.Task[Any]] = []

    @batchy.task
    async def async_handler(wait: Any) -> str:
        task = asyncio.current_task()
        assert task is me[0]
        task.cancel()
        try:
            await (batchy.gather(*wait) if isinstance(wait, tuple) else wait)
        except asyncio.CancelledError:
            waits.release.set()
            return "cancelled where it waited"
        return "waited"

    @batchy.task
    def gen_handler(wait: Any) -> Any:
        me[0].cancel()
        try:
            yield wait
        except asyncio.CancelledError:
            waits.release.set()
            return "cancelled where it waited"
        return "waited"

    @batchy.task
    def other(child: batchy.Task[str]) -> Any:
        return (yield child)

    async def root() -> Any:
        wait = waits.make(what)
        handler = (async_handler if kind == "async" else gen_handler)(wait)
        me.append(handler)
        if what == "loader keys":
            # The keys asked for are still loaded, once, for whoever wants them.
            return await handler, await batchy.gather(*wait)
        if what != "shared child":
            return await handler
        # The child another handler waits on too keeps running for that one.
        return await batchy.gather(other(wait), handler)

    got = _bounded(root())
    if what == "shared child":
        assert got == ["child's value", "cancelled where it waited"]
        assert waits.child_outcome == ["child released"]
    elif what == "loader keys":
        assert got == ("cancelled where it waited", [1, 2])
        assert waits.calls == [[1, 2]]
    else:
        assert got == "cancelled where it waited"
    if what in ("child", "gather"):
        assert waits.child_outcome == ["child cancelled"]  # only the handler waited on it


@pytest.mark.parametrize("how", ["a done callback", "an eager child"])
def test_a_cancel_from_code_run_inside_the_step_lands_where_the_handler_next_waits(
    how: str,
) -> None:
    async def cancel(task: Any) -> None:
        task.cancel()

    @batchy.task
    async def handler() -> str:
        me = asyncio.current_task()
        if how == "a done callback":  # a resolved future calls it at once, inside the step
            batchy.resolved(None).add_done_callback(lambda _: me.cancel())  # type: ignore[union-attr]
        else:
            batchy.Task(cancel(me)).start_eagerly()
        try:
            await asyncio.get_running_loop().create_future()
        except asyncio.CancelledError:
            return "cancelled"
        return "waited"

    assert _bounded(handler()) == "cancelled"


@pytest.mark.parametrize("kind", ["async", "generator"])
def test_a_cancel_requested_in_the_last_step_ends_the_task_cancelled_as_asyncio_does(
    kind: str,
) -> None:
    me: list[Any] = []

    async def body() -> str:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        return "returned"

    def gen_body() -> Any:
        me[0].cancel()
        return "returned"
        yield  # a generator

    async def main() -> list[str]:
        outcomes = []
        plain = asyncio.create_task(body())
        task = batchy.Task(body() if kind == "async" else gen_body())
        me.append(task)
        for t in (plain, task):
            try:
                outcomes.append(await t)
            except asyncio.CancelledError:
                outcomes.append("cancelled")
        return outcomes

    assert batchy.run(main()) == ["cancelled", "cancelled"]


def test_after_a_self_cancel_taken_back_asyncio_timeout_still_works_as_in_asyncio() -> None:
    async def body() -> tuple[str, str, int]:
        me = asyncio.current_task()
        assert me is not None
        me.cancel()
        try:
            await asyncio.sleep(5)
            first = "slept"
        except asyncio.CancelledError:
            first = f"cancelled, {me.uncancel()} left"
        try:
            async with asyncio.timeout(0.01):
                await asyncio.sleep(5)
            second = "slept"
        except TimeoutError:
            second = "timed out"
        return first, second, me.cancelling()

    async def main() -> list[Any]:
        return [await asyncio.create_task(body()), await batchy.Task(body())]

    expected = ("cancelled, 0 left", "timed out", 0)
    assert _bounded(main()) == [expected, expected]


# -- anyio's cancel scopes inside async def handlers -------------------------------------


@pytest.mark.parametrize("what", ["asyncio sleep", "loader key", "child"])
@pytest.mark.parametrize("scope", ["fail_after", "move_on_after"])
def test_anyio_cancel_scopes_fire_inside_async_handlers(
    scope: str, what: str, caplog: pytest.LogCaptureFixture
) -> None:
    # anyio's asyncio backend reads asyncio.Task's _must_cancel and _fut_waiter on
    # the task it cancels: without them the deadline raised in an event-loop
    # callback ("Exception in callback", which the suite's own check does not see:
    # no batchy frame in it) and the scope never fired.
    anyio = pytest.importorskip("anyio")
    calls: list[list[Any]] = []
    double = make_loader(calls)

    @batchy.batched
    async def slow(keys: list[int]) -> list[int]:
        await asyncio.sleep(1)
        return keys

    @batchy.task
    async def child() -> str:
        await asyncio.sleep(1)
        return "slept"

    @batchy.task
    async def handler() -> Any:
        started = asyncio.get_running_loop().time()
        outcome = "not cancelled"
        try:
            with getattr(anyio, scope)(0.05):
                if what == "asyncio sleep":
                    await asyncio.sleep(1)
                elif what == "loader key":
                    await slow(1)
                else:
                    await child()
            outcome = "moved on"
        except TimeoutError:
            outcome = "timed out"
        took = asyncio.get_running_loop().time() - started
        me = asyncio.current_task()
        return outcome, took < 0.5, me.cancelling(), await double(21)  # type: ignore[union-attr]

    got = batchy.run(handler())
    assert [r.getMessage() for r in caplog.records if r.levelno >= 40] == []
    assert got == ("timed out" if scope == "fail_after" else "moved on", True, 0, 42)
    assert calls == [[21]]  # the handler goes on loading, batched, after the scope
