"""Shared fixtures: real servers (MariaDB, Redis, memcached, PostgreSQL); under CI=true a missing one fails.

Also, for the whole suite: a test during which asyncio logged an error from a
callback ("Exception in callback ...", "... exception was never retrieved")
that involves batchy code fails, at its teardown, with the logged text. Such a
log means an error escaped the engine into the event loop, where nobody sees it
and whatever waited on it hangs. A test that provokes one on purpose takes it
with ``asyncio_callback_errors.take()``.
"""

from __future__ import annotations

import gc
import importlib.util
import logging
import os
import socket
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

import batchy

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the shared helpers (tree_helpers) of the test modules
    sys.path.insert(0, str(HERE))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--chaos-long",
        action="store_true",
        default=False,
        help="run the chaos suite (tests/test_chaos.py) with thousands of examples per test",
    )


SERVERS = {
    "mariadb": ("127.0.0.1", 3306),
    "redis": ("127.0.0.1", 6379),
    "memcached": ("127.0.0.1", 11211),
    "postgres": ("127.0.0.1", 5432),
}


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def require_server(name: str) -> tuple[str, int]:
    """Return (host, port) of a test server; fail under CI=true, skip (visibly) otherwise."""
    host, port = SERVERS[name]
    if not _reachable(host, port):
        message = f"{name} is not reachable on {host}:{port}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{message}; CI needs every server (run `make services`)")
        pytest.skip(message)
    return host, port


@pytest.fixture
def mariadb() -> tuple[str, int]:
    return require_server("mariadb")


@pytest.fixture
def redis_server() -> tuple[str, int]:
    return require_server("redis")


@pytest.fixture
def memcached() -> tuple[str, int]:
    return require_server("memcached")


@pytest.fixture
def postgres_server() -> tuple[str, int]:
    return require_server("postgres")


# -- asyncio callback errors that involve batchy ----------------------------------------

#: What asyncio logs when an error escapes into the event loop.
CALLBACK_ERROR_MARKS = ("Exception in callback", "exception was never retrieved")


def _package_dir(name: str) -> str | None:
    spec = importlib.util.find_spec(name)  # does not import the package
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(Path(next(iter(spec.submodule_search_locations))).resolve()) + os.sep


BATCHY_DIRS = tuple(d for d in map(_package_dir, ("batchy", "batchy_contrib")) if d)
# The checkout's own path is no mention of batchy (it may well be called "batchy").
_CHECKOUT = str(Path(batchy.__file__).resolve().parents[1])


def _exceptions(error: BaseException | None) -> Iterator[BaseException]:
    """``error``, its causes and contexts, and the members of exception groups."""
    seen: set[int] = set()
    todo = [error]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [e.__cause__, e.__context__, *getattr(e, "exceptions", ())]


def _mentions_batchy(message: str, error: BaseException | None) -> bool:
    if "batchy" in message.replace(_CHECKOUT, ""):
        return True
    for e in _exceptions(error):
        if type(e).__module__.split(".")[0] in ("batchy", "batchy_contrib"):
            return True
        for frame in traceback.extract_tb(e.__traceback__):
            if os.path.realpath(frame.filename).startswith(BATCHY_DIRS):
                return True
    return False


def batchy_callback_error(record: logging.LogRecord) -> str | None:
    """The text of ``record`` if it is a callback error of asyncio's involving batchy, else None.

    A callback error is "Exception in callback ..." or "... exception was never
    retrieved"; it involves batchy when its traceback (causes and contexts
    included) has a frame in batchy/ or batchy_contrib/, raises one of their
    exceptions, or its message names batchy.
    """
    try:
        message = record.getMessage()
    except Exception:
        message = str(record.msg)
    if not any(mark in message for mark in CALLBACK_ERROR_MARKS):
        return None
    error = record.exc_info[1] if record.exc_info else None
    if not _mentions_batchy(message, error):
        return None
    text = message
    if record.exc_info and record.exc_info[0] is not None:
        text += "\n" + "".join(traceback.format_exception(*record.exc_info))
    elif record.exc_text:
        text += "\n" + record.exc_text
    return text


class CallbackErrorLog(logging.Handler):
    """Keeps the text of every callback error involving batchy that asyncio logs."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self._found: list[str] = []
        self._checked = 0  # found[:checked] were reported (or taken) already
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        # Only the text is kept: the record's traceback would keep its frames alive.
        try:
            text = batchy_callback_error(record)
        except Exception as error:  # a check that breaks must not hide the log
            text = f"(could not check this asyncio log record: {error!r}) {record.msg!r}"
        if text is not None:
            with self._guard:
                self._found.append(text)

    def take(self) -> list[str]:
        """Those logged since the last call (of any test): they are not reported again."""
        with self._guard:
            new = self._found[self._checked :]
            self._checked = len(self._found)
        return new


class AsyncioCallbackErrors:
    """What the ``asyncio_callback_errors`` fixture gives a test."""

    #: The check itself, for tests of it.
    check = staticmethod(batchy_callback_error)

    def __init__(self, log: CallbackErrorLog) -> None:
        self._log = log

    def take(self) -> list[str]:
        """The errors logged so far, which the test then expects (its teardown ignores them)."""
        return self._log.take()


def _report(found: list[str], when: str) -> str:
    lines = [
        f"asyncio logged {len(found)} callback error(s) involving batchy {when}: an error "
        "escaped into the event loop, where nothing reports it and its waiters may hang."
    ]
    for i, text in enumerate(found[:_SHOWN], 1):
        lines += ["", f"--- {i} ---", text.rstrip()]
    if len(found) > _SHOWN:
        lines += ["", f"... and {len(found) - _SHOWN} more"]
    return "\n".join(lines)


_SHOWN = 5  # a test that provokes hundreds (a Hypothesis run) shows the first few


@pytest.fixture(scope="session", autouse=True)
def _callback_error_log() -> Iterator[CallbackErrorLog]:
    """Listen to asyncio's logger for the whole session; check once more after a collection."""
    log = CallbackErrorLog()
    logger = logging.getLogger("asyncio")
    logger.addHandler(log)
    try:
        yield log
        # Errors of tasks and futures that died in reference cycles are logged
        # when the garbage collector frees them: collect once, at the end.
        gc.collect()
        found = log.take()
        if found:
            pytest.fail(_report(found, "after the last test (when garbage was collected)"))
    finally:
        logger.removeHandler(log)


@pytest.fixture(autouse=True)
def asyncio_callback_errors(
    _callback_error_log: CallbackErrorLog,
) -> Iterator[AsyncioCallbackErrors]:
    """Fail the test if asyncio logged a callback error involving batchy during it.

    Errors logged between two tests (a task freed late) count for the next one.
    """
    errors = AsyncioCallbackErrors(_callback_error_log)
    yield errors
    found = _callback_error_log.take()
    if found:
        pytest.fail(_report(found, "during this test (or since the previous one ended)"))
