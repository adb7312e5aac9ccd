"""Forgetting to await is never silent: a task dropped unstarted warns, naming itself and the fix.

asyncio warns "coroutine ... was never awaited" for a coroutine dropped before
it ran; a batchy task dropped before it started (a missing ``yield`` in a
generator handler, a missing ``await`` in async code) warns the same way, for
both kinds of handler, and only once. Handing a batchy future to asyncio does
not count as forgetting it: ``asyncio.wait_for(x, 0)`` times out as it does for
a coroutine, with no warning and nothing left pending.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import batchy
from batchy import DataLoader


@batchy.task
def child(x: int) -> Any:
    value = yield batchy.resolved(x)
    return value


@batchy.task
async def achild(x: int) -> int:
    return await batchy.resolved(x)


@batchy.task
async def gated(gate: asyncio.Event) -> int:
    await gate.wait()
    return 1


@batchy.batched
def double(keys: list[int]) -> list[int]:
    return [k * 2 for k in keys]


@contextmanager
def caught() -> Iterator[list[warnings.WarningMessage]]:
    """Every warning raised in the block, garbage collection included."""
    with warnings.catch_warnings(record=True) as found:
        warnings.simplefilter("always")
        yield found
        gc.collect()


def never_awaited(found: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in found if "never awaited" in str(w.message)]


# -- a task dropped before it started ------------------------------------------------


def test_a_task_forgotten_in_a_generator_handler_warns_where_it_was_dropped() -> None:
    @batchy.task
    def parent() -> Any:
        child(1)  # the forgotten yield
        return (yield child(2))

    with caught() as found:
        assert batchy.run(parent()) == 2
    (warning,) = [w for w in found if "never awaited" in str(w.message)]
    assert warning.category is RuntimeWarning
    text = str(warning.message)
    assert "batchy task child (defined at" in text and __file__ in text
    assert "Await it or yield it" in text
    # Pointed at the line that made and dropped it, as Python's own warning is.
    assert warning.filename == __file__
    assert "child(1)" in _line(warning)


def test_a_task_forgotten_in_async_code_warns() -> None:
    async def handler() -> Any:
        child(1)  # the forgotten await
        return await child(2)

    with caught() as found:
        assert asyncio.run(handler()) == 2
    (text,) = never_awaited(found)
    assert text.startswith("batchy task child ")


def test_an_async_def_task_forgotten_warns_once_with_batchy_s_warning() -> None:
    # Python's own "coroutine 'achild' was never awaited" named neither the task
    # nor batchy's fix; batchy's warning replaces it rather than doubling it.
    async def handler() -> int:
        achild(1)
        return await achild(2)

    with caught() as found:
        assert asyncio.run(handler()) == 2
    (text,) = never_awaited(found)
    assert text.startswith("batchy task achild ") and "Await it or yield it" in text


def test_in_asyncio_debug_mode_the_warning_says_where_the_task_was_made() -> None:
    before = sys.get_coroutine_origin_tracking_depth()
    sys.set_coroutine_origin_tracking_depth(10)  # what asyncio's debug mode does
    try:
        with caught() as found:
            made = achild(1)
            line = sys._getframe().f_lineno - 1
            del made
    finally:
        sys.set_coroutine_origin_tracking_depth(before)
    (text,) = never_awaited(found)
    assert f"created at {__file__}:{line}" in text


def test_tasks_that_ran_or_were_cancelled_do_not_warn() -> None:
    @batchy.task
    def parent() -> Any:
        a = yield child(1)
        b, c = yield child(2), achild(3)
        d = yield batchy.gather(child(4), achild(5))
        return [a, b, c, *d]

    async def started() -> Any:
        task = child(6).start()
        return await task

    with caught() as found:
        assert batchy.run(parent()) == [1, 2, 3, 4, 5]
        assert asyncio.run(started()) == 6
        for made in (child(7), achild(8)):
            made.cancel()  # dropped on purpose: cancelled, not forgotten
        del made
    assert never_awaited(found) == []
    assert [w for w in found if issubclass(w.category, RuntimeWarning)] == []


def test_a_task_batchy_run_refused_and_then_dropped_warns_too() -> None:
    # As asyncio.run() refusing a coroutine inside a running loop: the task is
    # left as it was, to be awaited instead (test_task.py); dropped, it never ran.
    async def main() -> None:
        with pytest.raises(batchy.UsageError, match="inside async code, 'await' the task"):
            batchy.run(child(1))

    with caught() as found:
        asyncio.run(main())
    (text,) = never_awaited(found)
    assert text.startswith("batchy task child ")


def test_a_task_whose_handler_call_raised_is_dropped_quietly() -> None:
    # The task object exists before its handler is called; a call that raises
    # (a recursion limit) leaves it half made, which must not break its end.
    with caught() as found:
        with pytest.raises(batchy.UsageError):
            batchy.Task(object())  # type: ignore[arg-type]
    assert found == []


# -- asyncio.wait_for(x, 0) ----------------------------------------------------------


def _run_wait_for_zero(make: Callable[[], Any]) -> Any:
    """``asyncio.wait_for(make(), 0)`` in a fresh loop; returns the awaitable, after."""
    made: list[Any] = []

    async def main() -> None:
        made.append(make())
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(made[0], 0)
        await asyncio.sleep(0.01)  # whatever was left scheduled runs now

    asyncio.run(main())
    return made[0]


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: child(1), id="generator task"),
        pytest.param(lambda: achild(1), id="async def task"),
        pytest.param(lambda: batchy.gather(child(1), achild(2)), id="gather of tasks"),
        pytest.param(lambda: batchy.gather(asyncio.sleep(0)), id="gather of a coroutine"),
    ],
)
def test_wait_for_zero_times_out_without_warning_and_cancels(make: Callable[[], Any]) -> None:
    # asyncio's own wait_for(coro(), 0) raises TimeoutError, closes the
    # coroutine unrun and says nothing. A batchy task given to it was left
    # unstarted by asyncio's wrapper, and warned "coroutine ... was never
    # awaited" (or, for a generator handler, was just left pending).
    with caught() as found:
        aw = _run_wait_for_zero(make)
        assert aw.done()
        assert isinstance(aw.exception(), asyncio.CancelledError)
        del aw
    assert [str(w.message) for w in found] == []


def test_wait_for_zero_leaves_a_task_others_wait_on_running() -> None:
    async def main() -> list[Any]:
        gate = asyncio.Event()
        shared = gated(gate)
        waiting = asyncio.ensure_future(shared)
        await asyncio.sleep(0.01)  # the shared task starts, awaited by `waiting`
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(shared, 0)
        gate.set()
        return [await waiting, shared.result()]

    with caught() as found:
        assert asyncio.run(main()) == [1, 1]
    assert never_awaited(found) == []


def test_wait_for_zero_of_a_done_future_gives_its_result_as_asyncio_does() -> None:
    async def main() -> list[Any]:
        done = child(1)
        assert await done == 1
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(2)
        return [await asyncio.wait_for(done, 0), await asyncio.wait_for(fut, 0)]

    assert asyncio.run(main()) == [1, 2]


def test_wait_for_zero_of_a_loader_key_still_loads_the_key() -> None:
    # A key cannot be cancelled (other handlers may share it): it times out
    # for this waiter and is loaded as usual, nothing left pending.
    with caught() as found:
        key = _run_wait_for_zero(lambda: double(21))
        assert key.result() == 42
    assert found == []


def test_wait_for_zero_of_a_dataloader_load_cancels_that_load() -> None:
    async def batch(keys: list[int]) -> list[int]:
        return [k + 1 for k in keys]

    async def main() -> list[Any]:
        loader = DataLoader(batch)
        load = loader.load(1)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(load, 0)
        return [load.cancelled(), await loader.load(1)]

    assert asyncio.run(main()) == [True, 2]


# -- asyncio drives batchy futures itself ----------------------------------------------


def test_asyncio_runs_batchy_futures_as_it_runs_coroutines() -> None:
    async def main() -> list[Any]:
        task = asyncio.ensure_future(child(1))
        return [
            await task,
            await asyncio.wait_for(achild(2), 5),
            await asyncio.gather(child(3), double(2), batchy.gather(achild(4))),
            await asyncio.create_task(child(5)),
        ]

    with caught() as found:
        assert asyncio.run(main()) == [1, 2, [3, 4, [4]], 5]
    assert never_awaited(found) == []


def test_asyncio_gets_a_batchy_future_s_error() -> None:
    @batchy.task
    def boom() -> Any:
        yield batchy.resolved(None)
        raise ValueError("boom")

    async def main() -> None:
        await asyncio.ensure_future(boom())

    with pytest.raises(ValueError, match="boom"):
        asyncio.run(main())


def test_cancelling_the_asyncio_task_that_drives_a_batchy_task_cancels_it() -> None:
    async def main() -> Any:
        gate = asyncio.Event()
        task = gated(gate)
        driver = asyncio.ensure_future(task)
        await asyncio.sleep(0.01)
        driver.cancel()
        with pytest.raises(asyncio.CancelledError):
            await driver
        with pytest.raises(asyncio.CancelledError):
            await task
        return task.done()

    assert asyncio.run(main()) is True


def _line(warning: warnings.WarningMessage) -> str:
    import linecache

    return linecache.getline(warning.filename, warning.lineno)


# -- a failure nothing ever read -----------------------------------------------------
# asyncio logs "Task exception was never retrieved"; a batchy task started and
# never awaited, or a key asked for and never yielded, failed in silence.


@batchy.batched
def broken(keys: list[int]) -> list[int]:
    raise ValueError("db down")


@batchy.task
def fails() -> Any:
    yield batchy.resolved(None)
    raise KeyError("bug in a task")


def unread_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    gc.collect()
    return [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()]


def test_a_started_task_that_fails_unawaited_logs_its_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @batchy.task
    def parent() -> Any:
        fails().start()  # started, never awaited
        yield batchy.resolved(None)
        yield batchy.resolved(None)
        return "ok"

    assert batchy.run(parent()) == "ok"
    (text,) = unread_errors(caplog)
    assert text.startswith("batchy: <batchy.Task fails failed> failed with KeyError")
    (record,) = [r for r in caplog.records if "never retrieved" in r.getMessage()]
    assert record.name == "batchy" and record.exc_info is not None
    assert isinstance(record.exc_info[1], KeyError)


def test_a_key_asked_for_and_never_yielded_logs_its_batch_s_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @batchy.task
    def parent() -> Any:
        broken(1)  # the forgotten yield
        yield batchy.resolved(None)
        yield double(1)
        return "ok"

    assert batchy.run(parent()) == "ok"
    (text,) = unread_errors(caplog)
    assert "LoaderError: loader 'broken' raised ValueError: db down" in text


def test_a_failure_read_later_or_cancelled_is_not_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @batchy.task
    def parent() -> Any:
        early = broken(2)  # fetched ahead of time, read after it failed
        started = fails().start()
        peeked = broken(3)
        yield batchy.resolved(None)
        yield batchy.resolved(None)
        yield double(1)  # a round: the broken batch fails meanwhile
        assert early.done() and started.done()
        out = []
        for fut in (early, started):
            try:
                yield fut
            except (batchy.LoaderError, KeyError) as error:
                out.append(type(error).__name__)
        assert isinstance(peeked.exception(), batchy.LoaderError)
        both = yield batchy.gather(broken(4), fails(), return_exceptions=True)
        return out + [type(e).__name__ for e in both]

    assert batchy.run(parent()) == ["LoaderError", "KeyError", "LoaderError", "KeyError"]

    async def cancelled() -> None:
        task = child(1).start()
        task.cancel()
        await asyncio.sleep(0.01)

    asyncio.run(cancelled())
    assert unread_errors(caplog) == []


def test_a_read_future_is_back_to_its_own_class() -> None:
    # The engine's fast paths test exact types (a loader key is a plain Future).
    @batchy.task
    def parent() -> Any:
        key = broken(5)
        yield double(1)
        assert type(key) is not batchy.Future  # failed with nobody waiting
        try:
            yield key
        except batchy.LoaderError:
            pass
        return type(key) is batchy.Future

    assert batchy.run(parent()) is True


async def slow_db_down(keys: list[int]) -> list[int]:
    """A DataLoader's batch function that fails, after its loads had time to be awaited."""
    await asyncio.sleep(0.01)
    raise RuntimeError("db down")


async def test_a_dataloader_batch_whose_loads_were_all_cancelled_logs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loader = DataLoader(slow_db_down)
    load = loader.load(1)
    load.cancel()  # the key stays in its batch, which fails with nobody to tell
    await asyncio.sleep(0.05)
    del load, loader
    assert unread_errors(caplog) == []


async def test_a_key_whose_asker_was_cancelled_fails_without_a_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The asker waited, then was cancelled while the batch ran: the key's error is
    # nobody's to report (the chaos test of cancellation found it logged).
    @batchy.batched
    async def slow_broken(keys: list[int]) -> list[int]:
        await asyncio.sleep(0.02)
        raise ValueError("db down")

    @batchy.task
    def asker() -> Any:
        return (yield slow_broken(1))

    task = asker().start()
    await asyncio.sleep(0.005)  # the batch is in flight
    task.cancel()
    await asyncio.sleep(0.05)  # the batch fails meanwhile
    assert task.done()
    assert unread_errors(caplog) == []


async def test_a_dataloader_load_that_fails_unawaited_logs_its_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # asyncio logs "Future exception was never retrieved" for an aiodataloader
    # load nobody awaited; a DataLoader's load failed in silence, whether its
    # batch raised or its key's value was an error (the cached one too).
    async def batch(keys: list[int]) -> list[Any]:
        if 1 in keys:
            raise RuntimeError("db down")
        return [LookupError(f"no row {k}") for k in keys]

    loader = DataLoader(batch, name="users")
    for key in (1, 2, 2):  # the last: the cached error, forgotten again
        load = loader.load(key)  # the forgotten await
        while not load.done():  # (done() reads nothing, as for an asyncio future)
            await asyncio.sleep(0)
        del load
    texts = unread_errors(caplog)
    assert len(texts) == 3, texts
    assert sorted(t.split(" failed with ")[0] for t in texts) == [
        "batchy: <LoadFuture 'users' key=1 failed>",
        "batchy: <LoadFuture 'users' key=2 failed>",
        "batchy: <LoadFuture 'users' key=2 failed>",
    ]
    assert sum("RuntimeError: db down" in t for t in texts) == 1
    assert sum("LookupError: no row 2" in t for t in texts) == 2
    assert all("Yield or await every task you start and every key you ask for" in t for t in texts)


async def test_a_dataloader_load_read_or_whose_waiter_was_cancelled_logs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loader = DataLoader(slow_db_down)
    awaited, peeked, called_back = loader.load(1), loader.load(2), loader.load(3)
    called_back.add_done_callback(lambda load: None)
    waiter = asyncio.ensure_future(loader.load(4))
    await asyncio.sleep(0)  # the waiter waits on its load
    waiter.cancel()

    @batchy.task
    def handler() -> Any:
        return (yield loader.load(5))

    task = handler().start()
    await asyncio.sleep(0)
    task.cancel()  # its load had a waiter, which stopped waiting
    with pytest.raises(RuntimeError, match="db down"):
        await awaited
    assert isinstance(peeked.exception(), RuntimeError)
    assert waiter.cancelled() and task.done()
    del awaited, peeked, called_back, waiter, task
    assert unread_errors(caplog) == []
