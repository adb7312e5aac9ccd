"""Forgetting to await is never silent: a task dropped unstarted warns, naming itself and the fix.

asyncio warns "coroutine ... was never awaited" for a coroutine dropped before
it ran; a batchy task dropped before it started (a missing ``yield`` in a
generator handler, a missing ``await`` in async code) warns the same way, for
both kinds of handler, and only once.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import batchy


@batchy.task
def child(x: int) -> Any:
    value = yield batchy.resolved(x)
    return value


@batchy.task
async def achild(x: int) -> int:
    return await batchy.resolved(x)


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


def test_a_task_whose_handler_call_raised_is_dropped_quietly() -> None:
    # The task object exists before its handler is called; a call that raises
    # (a recursion limit) leaves it half made, which must not break its end.
    with caught() as found:
        with pytest.raises(batchy.UsageError):
            batchy.Task(object())  # type: ignore[arg-type]
    assert found == []


def _line(warning: warnings.WarningMessage) -> str:
    import linecache

    return linecache.getline(warning.filename, warning.lineno)
