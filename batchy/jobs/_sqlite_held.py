"""Holds of the SQLite file: the waits that saw them, and the time leases get back.

While a connection holds the file nobody can renew a lease, so the leases a
long hold outlived get its time back before anything reads them. A store's
transaction notes its own times (table ``held``), and the next transaction
gives them back. A holder that notes nothing (an application's own
transaction, a step killed holding the file, or one that rolled back) is known
only to the steps that waited for it, and the first transaction after the hold
may come from a process that did not wait (a web process's enqueue): so a
waiter publishes its wait, as soon as it is long enough to matter, in a file
of its own in ``<file>-wake/held/`` (the database itself is held), and every
transaction reads that folder. A step that did not wait pays a listing of an
empty (or absent) folder, a few microseconds.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
from collections.abc import Iterable

from . import _clock

__all__ = ["HOLD_GRACE", "Waits"]

#: Seconds a write transaction may hold the file before the leases it outlived
#: get that time back (a normal one takes milliseconds).
HOLD_GRACE = 0.1


def _data_version(db: sqlite3.Connection) -> int | None:
    """A number that changes when another connection commits (None if unreadable now)."""
    try:
        return int(db.execute("PRAGMA data_version").fetchone()[0])
    except sqlite3.OperationalError:  # a connection recovering the file after a crash
        return None


class Waits:
    """When one store's steps (of one process) found the file held, across steps.

    A wait is a list of pieces ``[first failed try, last one]``: a new piece begins
    when another connection committed between two tries (the file changed hands,
    and that holder noted its own hold, or was brief). Within a piece nobody
    committed, so the file was held throughout, as far as anyone can tell: the
    piece is the hold of a holder that notes nothing. A step that gave up after
    ``busy_timeout`` leaves its wait here, so the store's next step gives it back
    even if nobody else does. Changed only under the store's lock.
    """

    def __init__(self, directory: str | None = None) -> None:
        # <file>-wake/held (beside the FIFOs); None for an in-memory database.
        self.directory = directory
        self.pieces: list[list[float]] = []
        self._version: int | None = None  # data_version at the latest failed try
        self._token = secrets.token_hex(6)  # this store's files in the directory
        self._written = 0  # ... numbered
        self._last_file: str | None = None  # the latest, which the next one replaces

    def failed(self, db: sqlite3.Connection) -> None:
        """A try found the file held (db outside any transaction)."""
        now = _clock.store_now()
        version = _data_version(db)
        if self.pieces and version in (self._version, None):
            self.pieces[-1][1] = now
        else:
            # Pieces too short to give back are forgotten: a waiter starved by
            # other processes' brief steps collects thousands of them.
            self.pieces = [p for p in self.pieces if p[1] - p[0] > HOLD_GRACE]
            self.pieces.append([now, now])
            self._version = version
        if self.pieces[-1][1] - self.pieces[-1][0] > HOLD_GRACE:
            self._publish()

    def got_in(self, db: sqlite3.Connection, began: float) -> None:
        """This step waited, and has the file since ``began``: if nobody committed
        since its last failed try, the file was held until just now."""
        if self.pieces and _data_version(db) == self._version:
            self.pieces[-1][1] = began

    def _publish(self) -> None:
        if self.directory is None:
            return
        # A new name for each writing: a reader deletes only the files it read (once
        # it commits), never a wait written since under the same name.
        self._written += 1
        path = os.path.join(self.directory, f"{os.getpid()}.{self._token}.{self._written}")
        text = "".join(f"{s!r} {e!r}\n" for s, e in self.pieces if e - s > HOLD_GRACE)
        # Written whole, then renamed: a reader never sees half of it.
        with contextlib.suppress(OSError):  # no folder to write in: this store gives it back
            os.makedirs(self.directory, exist_ok=True)
            with open(path + ".tmp", "w") as file:
                file.write(text)
            os.replace(path + ".tmp", path)
            if self._last_file is not None:
                with contextlib.suppress(OSError):  # a reader took it already
                    os.unlink(self._last_file)
            self._last_file = path

    def _published(self) -> tuple[list[str], list[list[float]]]:
        """Files of waits in the directory (this store's too), and their pieces."""
        if self.directory is None:
            return [], []
        try:
            names = [n for n in os.listdir(self.directory) if not n.endswith(".tmp")]
        except OSError:
            return [], []
        paths, pieces = [], []
        for name in names:
            path = os.path.join(self.directory, name)
            try:
                with open(path) as file:
                    pieces += [[float(x) for x in line.split()] for line in file]
            except (OSError, ValueError):  # gone meanwhile, or not ours
                continue
            paths.append(path)
        return paths, [p for p in pieces if len(p) == 2]

    def give_back(self, db: sqlite3.Connection) -> list[str]:
        """Give the holds since the last transaction back to live leases (inside a
        transaction); the files of waits it read, to remove once it commits."""
        began, ended = db.execute("SELECT began, ended FROM held").fetchone()
        if ended - began > HOLD_GRACE:
            # The last transaction held the file from `began` to `ended`: a lease
            # live at `began` could not be renewed for that long. (It is applied
            # once: this transaction notes its own times over it.)
            _extend(db, began, ended)
        paths, published = self._published()
        # Waits are of holds after that transaction, or they were inside it (a
        # waiter waiting for it) or given back by a transaction before it. Those
        # of one hold overlap (several waiters): each moment is given back once.
        done = ended
        for first, last in sorted([*self.pieces, *published]):
            if last - first > HOLD_GRACE and last > done:
                _extend(db, max(first, done), last)
                done = last
        return paths

    def committed(self, paths: Iterable[str]) -> None:
        """The transaction that gave the waits back committed: they are done."""
        self.pieces = []
        self._version = None
        for path in paths:
            with contextlib.suppress(OSError):  # another process's transaction removed it
                os.unlink(path)


def _extend(db: sqlite3.Connection, began: float, ended: float) -> None:
    db.execute(
        "UPDATE jobs SET lease = lease + ? WHERE state = 1 AND lease >= ?",
        (ended - began, began),
    )
