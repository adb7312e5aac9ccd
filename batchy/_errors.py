"""The exceptions batchy raises, all under one base class.

    BatchyError
     +-- UsageError            an API was called the wrong way (outside a loop, bad option, ...)
     |    +-- InvalidKeyError  a loader got a key it cannot batch (unhashable, raising __eq__)
     +-- YieldError            a handler yielded something batchy cannot wait on (also a TypeError)
     +-- LoaderError           a batch function broke its contract or raised; fails every key it got
     +-- MissingKeyError       a batch function's dict had no entry for a key (also a KeyError)
     +-- CycleError            tasks wait on each other in a circle (a task waiting on itself)

Every message names the loader or task and the offending value, says what was
expected, and suggests a fix. Messages are built with :func:`short_repr` and
:func:`error_text`, which never raise: a key or value whose ``repr`` fails (a
detached ORM row) must not turn an error report into a second, unreported error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "BatchyError",
    "CycleError",
    "InvalidKeyError",
    "LoaderError",
    "MissingKeyError",
    "UsageError",
    "YieldError",
    "error_text",
    "short_repr",
]

_MAX_ITEMS = 10
_MAX_CHARS = 200


def short_repr(value: Any) -> str:
    """A repr of ``value`` short enough for an error message (long lists and texts cut).

    It never raises: when ``value``'s own ``repr`` fails, it says so and names the type.
    Public so that integrations word their errors the way the engine does.
    """
    try:
        if isinstance(value, (list, tuple)) and len(value) > _MAX_ITEMS:
            head = ", ".join(short_repr(v) for v in value[:_MAX_ITEMS])
            return f"[{head}, ... and {len(value) - _MAX_ITEMS} more]"
        text = repr(value)
    except Exception as error:
        return _unprintable(value, "repr", error)
    if len(text) > _MAX_CHARS:
        text = text[: _MAX_CHARS - 3] + "..."
    return text


def error_text(error: BaseException) -> str:
    """``"TypeName: message"`` for an exception, even when its ``str`` raises."""
    try:
        text = str(error)
    except Exception as failure:
        text = _unprintable(error, "str", failure)
    name = type(error).__name__
    return f"{name}: {text}" if text else name


def _unprintable(value: Any, what: str, error: Exception) -> str:
    return (
        f"<{type(value).__qualname__} object at {id(value):#x}; "
        f"its {what}() failed with {type(error).__name__}>"
    )


class BatchyError(Exception):
    """Base class of every error batchy raises."""


class UsageError(BatchyError):
    """An API was called in a way batchy cannot honour; the message says how to fix it."""


class InvalidKeyError(UsageError, TypeError):
    """A loader was called with a key it cannot batch: unhashable, or its hash or ``==`` raised.

    ``loader`` is the loader's name and ``key`` the key. The error is raised where
    the loader is called, before the key joins a batch, so it fails only that call.
    """

    def __init__(self, message: str, *, loader: str, key: Any) -> None:
        super().__init__(message)
        self.loader = loader
        self.key = key


class CycleError(BatchyError):
    """Tasks wait on each other in a circle, so none of them could ever go on.

    Raised at the yield (or ``await``) that would close the circle; ``tasks`` are
    the tasks of the cycle, starting with the one that was about to wait.
    """

    def __init__(self, message: str, *, tasks: Sequence[Any]) -> None:
        super().__init__(message)
        self.tasks = list(tasks)


class YieldError(BatchyError, TypeError):
    """A handler yielded or awaited a value batchy cannot wait on."""


class LoaderError(BatchyError):
    """A batch function raised or returned something that breaks the loader contract.

    ``loader`` is the loader's name and ``keys`` the keys of the failed call; when
    the batch function raised, the original exception is ``__cause__``.
    """

    def __init__(self, message: str, *, loader: str, keys: Sequence[Any]) -> None:
        super().__init__(message)
        self.loader = loader
        self.keys = list(keys)


class MissingKeyError(BatchyError, KeyError):
    """A batch function returned a mapping that has no entry for a requested key."""

    def __init__(self, message: str, *, loader: str, key: Any) -> None:
        super().__init__(message)
        self.loader = loader
        self.key = key

    def __str__(self) -> str:
        # KeyError.__str__ would show the repr of the whole message.
        return str(self.args[0])


# Tracebacks and reprs show the public path (batchy.LoaderError), not this module.
for _cls in (
    BatchyError,
    CycleError,
    InvalidKeyError,
    UsageError,
    YieldError,
    LoaderError,
    MissingKeyError,
):
    _cls.__module__ = "batchy"
