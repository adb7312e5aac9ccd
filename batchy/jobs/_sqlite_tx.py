"""SQLite plumbing for the store: one atomic transaction, and id lists cut to SQLite's limits."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Sequence

__all__ = ["Transaction", "chunks"]

# SQLite allows 32766 host parameters; stay far below.
_CHUNK = 500


def chunks(ids: Sequence[str]) -> Iterable[Sequence[str]]:
    """``ids`` in slices small enough for one ``IN (...)``."""
    for i in range(0, len(ids), _CHUNK):
        yield ids[i : i + _CHUNK]


class Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error): one atomic step."""

    def __init__(self, db: sqlite3.Connection, lock: threading.RLock) -> None:
        self.db = db
        self.lock = lock

    def __enter__(self) -> None:
        self.lock.acquire()
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self.lock.release()
            raise

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")
        finally:
            self.lock.release()
