"""Shared fixtures: real servers (MariaDB, Redis, memcached, PostgreSQL); under CI=true a missing one fails.

The shared servers are on the standard ports; ``private_postgres``,
``private_redis`` and ``private_mariadb`` are the session's own
(tests/private_servers.py), for tests that restart or stop their server.

Also, for the whole suite: a test during which asyncio logged an error from a
callback ("Exception in callback ...", "... exception was never retrieved")
fails, at its teardown, with the logged text. Such a log means an error escaped
into the event loop, where nobody sees it and whatever waited on it hangs. Every
one counts, not only those with batchy in their traceback: another library's
callback that trips over a batchy object (anyio's cancel scopes reading
asyncio.Task's private fields on a batchy task) shows no batchy frame at all.
A test that provokes one on purpose takes it with ``asyncio_callback_errors.take()``.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import sys
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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


# -- private servers, which a test may restart ---------------------------------------


def _private(kind: str) -> Iterator[Any]:
    import private_servers

    server = getattr(private_servers, kind)()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture(scope="session")
def _private_postgres() -> Iterator[Any]:
    yield from _private("PrivatePostgres")


@pytest.fixture(scope="session")
def _private_redis() -> Iterator[Any]:
    yield from _private("PrivateRedis")


@pytest.fixture(scope="session")
def _private_mariadb() -> Iterator[Any]:
    yield from _private("PrivateMariaDB")


@pytest.fixture
def private_postgres(_private_postgres: Any) -> Iterator[Any]:
    """A PostgreSQL server of this session's own (tests/private_servers.py), up when the
    test starts and again after it: the test may restart, stop or crash it."""
    _private_postgres.ensure_up()
    yield _private_postgres
    _private_postgres.ensure_up()


@pytest.fixture
def private_redis(_private_redis: Any) -> Iterator[Any]:
    """A redis-server of this session's own, with AOF (see ``private_postgres``)."""
    _private_redis.ensure_up()
    yield _private_redis
    _private_redis.ensure_up()


@pytest.fixture
def private_mariadb(_private_mariadb: Any) -> Iterator[Any]:
    """A MariaDB server of this session's own (see ``private_postgres``)."""
    _private_mariadb.ensure_up()
    yield _private_mariadb
    _private_mariadb.ensure_up()


# -- asyncio callback errors ----------------------------------------------------------

#: What asyncio logs when an error escapes into the event loop.
CALLBACK_ERROR_MARKS = ("Exception in callback", "exception was never retrieved")


def callback_error(record: logging.LogRecord) -> str | None:
    """The text of ``record`` (its traceback included) if it is a callback error of asyncio's.

    A callback error is "Exception in callback ..." or "... exception was never
    retrieved"; asyncio's other messages (a slow callback, a task destroyed
    pending) are not.
    """
    try:
        message = record.getMessage()
    except Exception:
        message = str(record.msg)
    if not any(mark in message for mark in CALLBACK_ERROR_MARKS):
        return None
    text = message
    if record.exc_info and record.exc_info[0] is not None:
        text += "\n" + "".join(traceback.format_exception(*record.exc_info))
    elif record.exc_text:
        text += "\n" + record.exc_text
    return text


class CallbackErrorLog(logging.Handler):
    """Keeps the text of every callback error that asyncio logs."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self._found: list[str] = []
        self._checked = 0  # found[:checked] were reported (or taken) already
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        # Only the text is kept: the record's traceback would keep its frames alive.
        try:
            text = callback_error(record)
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
    check = staticmethod(callback_error)

    def __init__(self, log: CallbackErrorLog) -> None:
        self._log = log

    def take(self) -> list[str]:
        """The errors logged so far, which the test then expects (its teardown ignores them)."""
        return self._log.take()


def _report(found: list[str], when: str) -> str:
    lines = [
        f"asyncio logged {len(found)} callback error(s) {when}: an error "
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
    """Fail the test if asyncio logged a callback error during it.

    Errors logged between two tests (a task freed late) count for the next one.
    """
    errors = AsyncioCallbackErrors(_callback_error_log)
    yield errors
    found = _callback_error_log.take()
    if found:
        pytest.fail(_report(found, "during this test (or since the previous one ended)"))
