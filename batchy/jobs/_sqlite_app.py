"""The application's own sqlite3 connection: whether the store's jobs may join its transaction."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ._errors import ConfigError
from ._model import Envelope

__all__ = ["join_app_transaction", "stale_snapshot_noted", "usable"]

_BUSY_SNAPSHOT = 517  # SQLITE_BUSY_SNAPSHOT, an extended code sqlite3 does not name


def join_app_transaction(store: object, path: str, connection: Any) -> None:
    """Check that ``connection`` can take ``store``'s jobs into its transaction, and open it.

    :class:`ConfigError` unless it is a sqlite3 connection on ``path`` that is in a
    transaction or begins one. One with none open yet is begun here: the sqlite3
    module would begin it only at the first insert, after the read of each ordering
    key's head, and another writer could add a head in between. The app's
    ``commit()`` ends it as it would its own.
    """
    # On a cursor of its own: the app's row_factory (a dict factory, say) must not
    # change what is read; its text_factory may give the names as bytes.
    cursor = usable(store, connection).cursor()
    cursor.row_factory = None
    rows = cursor.execute("PRAGMA database_list").fetchall()
    cursor.close()
    files = [_text(row[2]) for row in rows if _text(row[1]) == "main"]
    mine = os.path.realpath(path) if path not in ("", ":memory:") else None
    theirs = os.path.realpath(files[0]) if files and files[0] else None
    if mine is None or theirs != mine:
        raise ConfigError(
            f"{store!r}: connection={connection!r} is open on {theirs or 'a memory database'}"
            f", not on this store's file {path}; a transaction can only include jobs "
            f"of the file it writes to: enqueue through a connection to {path}, or leave "
            "out connection=; nothing was enqueued"
        )
    if _autocommits(connection):
        raise ConfigError(
            f"{store!r}: connection={connection!r} is in autocommit mode with no transaction "
            "open, so the job would be committed at once, whatever your code does next; "
            "open the transaction first (`connection.execute('BEGIN IMMEDIATE')`, or a connection "
            "made without isolation_level=None), or leave out connection= to enqueue on "
            "its own; nothing was enqueued"
        )
    if not connection.in_transaction:
        connection.execute("BEGIN IMMEDIATE")


def usable(store: object, connection: Any) -> sqlite3.Connection:
    """``connection``, if it is a sqlite3 connection this thread may use; else :class:`ConfigError`.

    Checked before anything reads through it: a closed one (or one of another
    thread) raised sqlite3's ``ProgrammingError`` from deep in the store.
    """
    if not isinstance(connection, sqlite3.Connection):
        raise ConfigError(
            f"{store!r}: connection={connection!r} is not a sqlite3.Connection; pass the "
            "connection your transaction runs on; nothing was enqueued"
        )
    try:
        connection.cursor().close()  # raises on a closed one, or in another thread
    except sqlite3.ProgrammingError as error:
        raise ConfigError(
            f"{store!r}: connection={connection!r} cannot be used here ({error}); enqueue "
            "through the open connection your transaction runs on, in the thread that "
            "opened it; nothing was enqueued"
        ) from error
    return connection


@contextmanager
def stale_snapshot_noted(envelopes: Sequence[Envelope]) -> Iterator[None]:
    """Say why the application's transaction cannot write, when that is why it failed.

    A transaction begun deferred (``BEGIN``, or sqlite3's implicit one after a
    read) that read the file before another connection wrote to it may read on
    but never write: SQLite fails its first write at once, as "database is
    locked", whatever the wait. The error stays sqlite3's (an application may
    retry on it); the note names the jobs and the fix.
    """
    try:
        yield
    except sqlite3.OperationalError as error:
        if getattr(error, "sqlite_errorcode", None) == _BUSY_SNAPSHOT:
            ids = ", ".join(e.id for e in envelopes[:3]) + (", ..." if len(envelopes) > 3 else "")
            error.add_note(
                f"nothing was enqueued (job id {ids}): the application's transaction began "
                "deferred (BEGIN) and read the file before another connection wrote to it, so "
                "SQLite lets it read on but never write; begin transactions that enqueue jobs "
                "with BEGIN IMMEDIATE, then roll this one back and run it again"
            )
        raise


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return os.fsdecode(value)
    return str(value) if value is not None else ""


def _autocommits(connection: sqlite3.Connection) -> bool:
    """Whether a statement on ``connection`` would commit at once, outside any transaction."""
    if connection.in_transaction:
        return False
    mode = getattr(connection, "autocommit", None)  # Python 3.12's transaction control
    if mode is True or mode is False:
        return mode
    return connection.isolation_level is None  # legacy: None means no implicit BEGIN
