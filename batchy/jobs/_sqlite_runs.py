"""The SQLite store's record of sharded runs: one row per job and run, with when it started.

The ``runs`` table is made on first use (``CREATE TABLE IF NOT EXISTS``), like
the counters. Its primary key ``(name, run)`` makes a start an upsert and the
list of one job's runs a range read; a start also drops that job's runs older
than they are listed.
"""

from __future__ import annotations

import sqlite3

__all__ = ["TABLE", "note_run", "run_started", "runs"]

TABLE = (
    "CREATE TABLE IF NOT EXISTS runs (name TEXT NOT NULL, run TEXT NOT NULL, "
    "started REAL NOT NULL, PRIMARY KEY (name, run)) WITHOUT ROWID"
)


def note_run(db: sqlite3.Connection, name: str, run: str, now: float, keep: float) -> None:
    """Record the start of ``run``, in the caller's transaction; forget runs past ``keep``."""
    db.execute(TABLE)
    db.execute(
        "INSERT INTO runs (name, run, started) VALUES (?, ?, ?) "
        "ON CONFLICT (name, run) DO UPDATE SET started = excluded.started",
        (name, run, now),
    )
    db.execute("DELETE FROM runs WHERE name = ? AND started < ?", (name, now - keep))


def runs(
    db: sqlite3.Connection, name: str, now: float, keep: float, limit: int
) -> list[tuple[str, float]]:
    """Up to ``limit`` runs of ``name`` started in the last ``keep`` seconds, latest first."""
    try:
        rows = db.execute(
            "SELECT run, started FROM runs WHERE name = ? AND started >= ? "
            "ORDER BY started DESC, run LIMIT ?",
            (name, now - keep, limit),
        )
        return [(str(run), float(started)) for run, started in rows]
    except sqlite3.OperationalError as error:
        if "no such table" in str(error):
            return []  # no run was ever started in this file
        raise


def run_started(db: sqlite3.Connection, name: str, run: str) -> float | None:
    """When ``run`` of ``name`` was last started, ``None`` if it never was (or is forgotten)."""
    try:
        row = db.execute(
            "SELECT started FROM runs WHERE name = ? AND run = ?", (name, run)
        ).fetchone()
    except sqlite3.OperationalError as error:
        if "no such table" in str(error):
            return None  # no run was ever started in this file
        raise
    return None if row is None else float(row[0])
