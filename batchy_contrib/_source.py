"""The error every data-source loader raises when its store fails, and the helpers that word it.

    batchy.BatchyError
     +-- batchy.LoaderError
          +-- DataSourceError     the store behind a loader failed (down, lost, timed out, bad SQL)

A :class:`DataSourceError` is a :class:`batchy.LoaderError`, so the engine
passes it through untouched: every key of the failed call gets it, and the keys
are evicted from the scope cache so a retry can succeed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from batchy import LoaderError

__all__ = ["DataSourceError"]


class DataSourceError(LoaderError):
    """The store behind a loader failed; ``host`` says which one (``host:port`` or a file).

    The original exception is ``__cause__``.
    """

    def __init__(self, message: str, *, loader: str, keys: Sequence[Any], host: str) -> None:
        super().__init__(message, loader=loader, keys=keys)
        self.host = host
