"""What the SQL loaders say when something fails: one message per kind of failure, and bad keys.

A backend only names the kind of a failure (:meth:`SQLDatabase._classify`);
the words live here once, so a lost MariaDB and a closed SQLite file read alike.
Every message names the loader, the store, what happened and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal, Protocol
from urllib.parse import SplitResult, urlsplit

from batchy import short_repr

from ..errors import (
    ConnectionLostError,
    DatabaseOpenError,
    DataSourceError,
    KeyEncodingError,
    QueryInterruptedError,
    QueryRejectedError,
)

__all__ = [
    "CONTAINERS",
    "shown_url",
    "url_parts",
    "Kind",
    "KeysRejected",
    "bad_key",
    "failed",
    "pool_wait_hint",
    "refusal",
    "timed_out",
    "unencodable_key",
    "unreadable_key",
]

#: What went wrong, as a backend tells it (:meth:`SQLDatabase._classify`).
Kind = Literal["lost", "closed", "killed", "busy", "rejected", "cantopen", "notadb", "other"]


class _Store(Protocol):
    kind: str
    host: str
    timeout: float | None
    killed_hint: str
    timeout_hint: str
    connect_hint: str
    encode_hint: str


class KeysRejected(Exception):
    """Raised by a backend's ``_rows`` when the driver could not encode some parameters.

    ``bad`` maps a parameter's index to the driver's error. Nothing was sent, so
    the loader fails those keys alone and sends the statement again without them.
    ``by_server``: the server, not the driver, could not read those keys as the
    type the statement compares them with (PostgreSQL reads keys itself); the
    statement failed as a whole, so it too is sent again without them.
    ``absent``: those of ``bad`` that cannot be in the column at all (a domain's
    CHECK refuses them): they get no row, as ``WHERE col = key`` would say.
    ``again``: the backend learnt how to write the statement for this column
    (MySQL: the column's character set); build it again and send it.
    """

    def __init__(
        self,
        bad: dict[int, BaseException],
        *,
        by_server: bool = False,
        absent: set[int] | frozenset[int] = frozenset(),
        again: bool = False,
    ) -> None:
        super().__init__(f"{len(bad)} parameter(s) could not be encoded")
        self.bad = bad
        self.by_server = by_server
        self.absent = absent
        self.again = again


def _err(error: BaseException) -> str:
    # batchy.error_text is not public; this is its shape, for errors we know print.
    # The first line only: PostgreSQL's go on with the statement and a caret.
    text = str(error).split("\n", 1)[0].rstrip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


#: Values that drivers expand into lists (or refuse): never one key.
CONTAINERS = (tuple, list, set, frozenset, dict)


def refusal(key: Any, accepted: str, fix: str | None = None) -> str:
    """Why the driver cannot bind ``key``, and what to do instead."""
    if fix is None:
        if isinstance(key, CONTAINERS):
            fix = (
                "A key is one value; for a key over several columns, write the statement "
                "yourself with db.query(...)."
            )
        else:
            fix = "Convert it to the key column's type (for a UUID, str(key))."
    return f"its driver binds only keys of type {accepted}. {fix}"


def bad_key(db: _Store, name: str, key: Any, problem: str) -> KeyEncodingError:
    """The error of a key whose type the driver cannot bind (found before anything is sent)."""
    return KeyEncodingError(
        f"loader {name!r} cannot send key {short_repr(key)} ({type(key).__name__}) to "
        f"{db.kind} at {db.host}: {problem} Only this key failed; the other keys of its "
        "batch were loaded.",
        loader=name,
        key=key,
        host=db.host,
    )


def unencodable_key(db: _Store, name: str, key: Any, error: BaseException) -> KeyEncodingError:
    """The error of a key the driver refused to encode although its type is one it binds."""
    failure = KeyEncodingError(
        f"loader {name!r} could not encode key {short_repr(key)} ({type(key).__name__}) for "
        f"{db.kind} at {db.host} ({_err(error)}). Only this key failed; the other keys of its "
        f"batch were loaded. {db.encode_hint}",
        loader=name,
        key=key,
        host=db.host,
    )
    failure.__cause__ = error
    return failure


def unreadable_key(db: _Store, name: str, key: Any, error: BaseException) -> KeyEncodingError:
    """The error of a key the server could not read as the type of the column it meets."""
    failure = KeyEncodingError(
        f"loader {name!r} could not send key {short_repr(key)} ({type(key).__name__}) to "
        f"{db.kind} at {db.host}: the server cannot read it as a value of the column it is "
        f"compared with ({_err(error)}). Only this key failed; the other keys of its batch "
        "were loaded. Pass keys of the column's type.",
        loader=name,
        key=key,
        host=db.host,
    )
    failure.__cause__ = error
    return failure


def timed_out(
    db: _Store, name: str, keys: Sequence[Any], *, connecting: bool = False
) -> QueryInterruptedError:
    if connecting:  # nothing was sent: no statement to blame
        text = (
            f"loader {name!r} got no connection to {db.kind} at {db.host} within "
            f"{db.timeout} s while loading keys {short_repr(keys)}: {db.connect_hint}"
        )
    else:
        text = (
            f"loader {name!r} got no answer from {db.kind} at {db.host} within {db.timeout} s "
            f"while loading keys {short_repr(keys)}; {db.timeout_hint}"
        )
    return QueryInterruptedError(text, loader=name, keys=keys, host=db.host)


def pool_wait_hint(size: str) -> str:
    """The end of the message of a timeout before a pool gave a connection; ``size`` is the
    pool's option for its number of connections (``max_size``, ``maxsize``)."""
    return (
        "the pool had none free and none could be made in time (every one busy, or the "
        "server slow to accept or not answering). Check that the server accepts connections, "
        f"raise the pool's {size} if its connections are all busy, or raise timeout=."
    )


def failed(
    db: _Store, kind: Kind, name: str, keys: Sequence[Any], sql: str, error: BaseException
) -> DataSourceError:
    """The error for a statement that failed as a whole, worded by what happened."""
    at = f"{db.kind} at {db.host} ({_err(error)})"
    loading = f"while loading keys {short_repr(keys)}"
    cls: type[DataSourceError]
    if kind == "lost":
        cls = ConnectionLostError
        text = (
            f"cannot reach {at} {loading}. Check that the server is running and "
            "reachable; the next call reconnects."
        )
    elif kind == "closed":
        cls = ConnectionLostError
        text = (
            f"cannot use {at}: the database was closed before this call, {loading}. "
            "Close it only after its last loader call, or open a new one."
        )
    elif kind == "killed":
        cls = QueryInterruptedError
        text = f"had its query interrupted by {at} {loading}: {db.killed_hint}"
    elif kind == "busy":
        cls = QueryInterruptedError
        text = (
            f"timed out waiting for a lock on {at} {loading}: another connection held "
            "a write lock for longer than the busy timeout. Keep write transactions "
            "short; a retry can succeed."
        )
    elif kind == "rejected":
        cls = QueryRejectedError
        text = f"had its query rejected by {at} {loading}. Check the table and column names. " + (
            f"SQL: {short_repr(sql)}"
        )
    elif kind == "cantopen":
        cls = DatabaseOpenError
        text = (
            f"cannot reach {at} {loading}. The file cannot be opened: check that its "
            "directory exists and that this process may read and write there (SQLite "
            "creates the file, not its directories)."
        )
    elif kind == "notadb":
        cls = DatabaseOpenError
        text = (
            f"cannot reach {at} {loading}. The file is not an SQLite database (or it is "
            "encrypted or damaged): check the path."
        )
    else:
        cls = DataSourceError
        text = f"failed on {at} {loading}. SQL: {short_repr(sql)}"
    return cls(f"loader {name!r} {text}", loader=name, keys=keys, host=db.host)


def shown_url(url: object) -> str:
    """``url`` as a message shows it: its repr, with any password in it masked.

    A URL a loader factory refused is echoed back to say what was wrong with it,
    and such messages reach logs and error pages.
    """
    if not isinstance(url, str):
        return repr(url)
    masked = re.sub(
        r"(//[^/@:]*:)[^/]*@", r"\1***@", url
    )  # scheme://user:password@ (to the last @)
    return repr(re.sub(r"(?i)(password=)[^&\s]*", r"\1***", masked))  # ?password=, key=value


def url_parts(url: object, schemes: tuple[str, ...]) -> SplitResult | None:
    """``url`` split, or None when it is no URL of ``schemes`` with a host (and a port
    that is a number): the caller's message then shows it, with :func:`shown_url`."""
    if not isinstance(url, str):
        return None
    try:  # urlsplit and its fields raise ValueError for a bad [IPv6] host or port
        parts = urlsplit(url)
        if parts.scheme not in schemes or not parts.hostname:
            return None
        parts.port  # noqa: B018 - read to check it
    except ValueError:
        return None
    return parts
