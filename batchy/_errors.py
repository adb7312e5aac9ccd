"""The exceptions batchy raises, all under one base class.

    BatchyError
     +-- UsageError            an API was called the wrong way (outside a loop, bad option, ...)
     +-- YieldError            a handler yielded something batchy cannot wait on (also a TypeError)
     +-- LoaderError           a batch function broke its contract or raised; fails every key it got
     +-- MissingKeyError       a batch function's dict had no entry for a key (also a KeyError)

Every message names the loader or task and the offending value, says what was
expected, and suggests a fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "BatchyError",
    "LoaderError",
    "MissingKeyError",
    "UsageError",
    "YieldError",
    "short_repr",
]

_MAX_ITEMS = 10
_MAX_CHARS = 200


def short_repr(value: Any) -> str:
    """A repr of ``value`` short enough for an error message (long lists and texts cut).

    Public so that integrations word their errors the way the engine does.
    """
    if isinstance(value, (list, tuple)) and len(value) > _MAX_ITEMS:
        head = ", ".join(short_repr(v) for v in value[:_MAX_ITEMS])
        return f"[{head}, ... and {len(value) - _MAX_ITEMS} more]"
    text = repr(value)
    if len(text) > _MAX_CHARS:
        text = text[: _MAX_CHARS - 3] + "..."
    return text


class BatchyError(Exception):
    """Base class of every error batchy raises."""


class UsageError(BatchyError):
    """An API was called in a way batchy cannot honour; the message says how to fix it."""


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
for _cls in (BatchyError, UsageError, YieldError, LoaderError, MissingKeyError):
    _cls.__module__ = "batchy"
