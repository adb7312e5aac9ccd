"""The suite-wide check of tests/conftest.py: every asyncio callback error fails the test it happens in."""

from __future__ import annotations

import asyncio
import logging
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import batchy

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")


def _record(message: str, exc_info: Any = None) -> logging.LogRecord:
    return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, message, None, exc_info)


def _raised(fn: Any) -> Any:
    try:
        fn()
    except Exception:
        return sys.exc_info()
    raise AssertionError("expected an exception")


def _not_ours() -> None:
    raise ValueError("an application bug")


def test_a_record_with_a_frame_in_batchy_is_flagged(asyncio_callback_errors: Any) -> None:
    check = asyncio_callback_errors.check
    # Future.result() of a pending future raises inside batchy/_future.py.
    exc_info = _raised(batchy.Future().result)
    text = check(_record("Exception in callback Scheduler.run()", exc_info))
    assert text is not None
    assert "Exception in callback Scheduler.run()" in text
    assert "_future.py" in text and "UsageError" in text  # the traceback is in the report


def test_an_application_error_is_flagged_too(asyncio_callback_errors: Any) -> None:
    check = asyncio_callback_errors.check
    exc_info = _raised(_not_ours)
    assert "an application bug" in check(_record("Exception in callback _not_ours()", exc_info))
    assert check(_record("Task exception was never retrieved", exc_info)) is not None


def test_another_library_tripping_over_our_task_is_flagged(
    asyncio_callback_errors: Any,
) -> None:
    # As anyio's cancel scopes did, reading asyncio.Task's private fields on a
    # batchy task from a loop callback: no batchy frame in the traceback, and
    # the message only says '_CoroTask'. A check for batchy frames missed it.
    async def main() -> None:
        task = batchy.Task(_a_handler())
        asyncio.get_running_loop().call_soon(lambda: task._no_such_field)
        await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(main())
    found = asyncio_callback_errors.take()
    assert len(found) == 1 and "_no_such_field" in found[0]


async def _a_handler() -> None:
    pass


def test_other_asyncio_messages_are_not_flagged(asyncio_callback_errors: Any) -> None:
    exc_info = _raised(batchy.Future().result)
    check = asyncio_callback_errors.check
    assert check(_record("Executing <Handle Scheduler.run()> took 0.2 seconds", exc_info)) is None
    assert check(_record("Task was destroyed but it is pending!")) is None


def test_a_real_callback_error_is_caught_and_can_be_taken(asyncio_callback_errors: Any) -> None:
    async def main() -> None:
        asyncio.get_running_loop().call_soon(batchy.Future().result)
        asyncio.get_running_loop().call_soon(_not_ours)
        await asyncio.sleep(0.01)

    asyncio.run(main())
    found = asyncio_callback_errors.take()  # expected here: the teardown does not fail
    assert len(found) == 2
    assert "Exception in callback Future.result()" in found[0]
    assert "an application bug" in found[1]


INNER_TESTS = """
import asyncio
import gc

import batchy


def _not_ours():
    raise ValueError("an application bug")


def test_provokes():
    async def main():
        asyncio.get_running_loop().call_soon(batchy.Future().result)
        await asyncio.sleep(0.01)

    asyncio.run(main())


def test_provokes_one_of_its_own():
    async def main():
        asyncio.get_running_loop().call_soon(_not_ours)
        await asyncio.sleep(0.01)

    asyncio.run(main())


def test_clean():
    pass


def test_zz_leaks_a_failed_future_in_a_cycle():
    gc.disable()  # the check at the session's end collects it
    loop = asyncio.new_event_loop()
    fut = loop.create_future()
    try:
        batchy.Future().result()
    except batchy.UsageError as error:
        fut.set_exception(error)
    cycle = [fut]
    cycle.append(cycle)
    del fut, cycle
    loop.close()
"""


def test_the_check_fails_tests_at_teardown_and_at_the_session_end(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_inner=textwrap.dedent(INNER_TESTS))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=4, errors=3)
    output = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_provokes*",
            "*during this test*",
            "*Exception in callback Future.result()*",
        ]
    )
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_provokes_one_of_its_own*"])
    assert "ERROR at teardown of test_clean" not in output
    assert "after the last test" in output
    assert "Future exception was never retrieved" in output
