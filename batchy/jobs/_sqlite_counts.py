"""The SQLite store's activity counters: one row per minute and name, summed as workers add.

The ``counts`` table is made on first use (``CREATE TABLE IF NOT EXISTS``), so
files made before it existed gain it without a migration. Its primary key is
``(minute, name)``: adding is an upsert, reading the last hour one range scan,
and pruning minutes older than :data:`COUNTS_KEPT` a range delete.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

from ._backend import COUNTS_KEPT

__all__ = ["TABLE", "add_counts", "read_counts"]

TABLE = (
    "CREATE TABLE IF NOT EXISTS counts (minute INTEGER NOT NULL, name TEXT NOT NULL, "
    "n INTEGER NOT NULL, PRIMARY KEY (minute, name)) WITHOUT ROWID"
)


def add_counts(db: sqlite3.Connection, counts: Mapping[tuple[int, str], int], now: float) -> None:
    """Add ``counts`` in the caller's transaction, and drop minutes no dashboard shows."""
    db.execute(TABLE)
    db.executemany(
        "INSERT INTO counts (minute, name, n) VALUES (?, ?, ?) "
        "ON CONFLICT (minute, name) DO UPDATE SET n = n + excluded.n",
        [(minute, name, n) for (minute, name), n in counts.items()],
    )
    db.execute("DELETE FROM counts WHERE minute < ?", (int(now // 60) - COUNTS_KEPT,))


def read_counts(db: sqlite3.Connection, since: int) -> dict[tuple[int, str], int]:
    """The counters of minute ``since`` and later (none before any worker wrote one)."""
    try:
        rows = db.execute("SELECT minute, name, n FROM counts WHERE minute >= ?", (since,))
        return {(minute, name): n for minute, name, n in rows}
    except sqlite3.OperationalError as error:
        if "no such table" in str(error):
            return {}
        raise
