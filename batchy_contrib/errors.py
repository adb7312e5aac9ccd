"""The errors a data-source loader raises when its store fails: one class per thing that went wrong.

    batchy.BatchyError
     +-- batchy.LoaderError
          +-- DataSourceError            the store behind a loader failed
               +-- KeyEncodingError        the client could not encode one key; fails that key alone
               +-- QueryRejectedError      the server answered the statement with an error
               +-- QueryInterruptedError   the statement was killed, or timed out
               +-- ConnectionLostError     the store cannot be reached, dropped us, or was closed
               +-- DatabaseOpenError       a database file cannot be opened (SQLite)

A :class:`DataSourceError` is a :class:`batchy.LoaderError`, so the engine
passes it through untouched: every key of the failed call gets it (a
:class:`KeyEncodingError` only its own key), and the keys are evicted from the
scope cache so a retry can succeed. Catch :class:`DataSourceError` for all of
them; the subclasses say which fix applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from batchy import LoaderError

__all__ = [
    "ConnectionLostError",
    "DataSourceError",
    "DatabaseOpenError",
    "KeyEncodingError",
    "QueryInterruptedError",
    "QueryRejectedError",
]


class DataSourceError(LoaderError):
    """The store behind a loader failed; ``host`` says which one (``host:port`` or a file).

    The original exception is ``__cause__``.
    """

    def __init__(self, message: str, *, loader: str, keys: Sequence[Any], host: str) -> None:
        super().__init__(message, loader=loader, keys=keys)
        self.host = host


class KeyEncodingError(DataSourceError):
    """The client could not turn one key into a bound parameter (a tuple, a ``Decimal`` on SQLite).

    ``key`` is the key. It fails that key alone: the batch's other keys are sent
    without it. Nothing about it reached the server.
    """

    def __init__(self, message: str, *, loader: str, key: Any, host: str) -> None:
        super().__init__(message, loader=loader, keys=[key], host=host)
        self.key = key


class QueryRejectedError(DataSourceError):
    """The server answered the statement with an error: a missing table or column, bad SQL."""


class QueryInterruptedError(DataSourceError):
    """The statement did not finish: it was killed (``KILL QUERY``), hit a time limit, or timed out.

    Nothing is wrong with the statement itself; a retry can succeed.
    """


class ConnectionLostError(DataSourceError):
    """The store cannot be reached, the connection dropped mid-statement, or it was closed."""


class DatabaseOpenError(DataSourceError):
    """A database file cannot be opened: a missing directory, no permission, not a database."""
