"""Taking the SQLite file for a store step: in turn within the process, and waiting for others.

One connection serves a store in a process, from the event loop and from web
threads (``push_sync``): a lock keeps their steps apart, and nothing awaits
while it is held. Another connection may hold the file (another process, or
the application's own connection in a transaction of its own). The store's
connection never waits for it inside SQLite's busy handler (its busy timeout
is 0): the holder may be a coroutine of this very event loop, awaiting
something before it commits, and a loop blocked in the busy handler would wait
for a commit that cannot come until ``busy_timeout`` ran out, stalling every
other task meanwhile. So a step tries, and waits between tries, without the
lock: on the loop with ``asyncio.sleep``, in a thread with ``time.sleep``. The
lock itself is waited for, on the loop too: its holder runs one step that
never waits, and a loop that only tried it would lose every time to a thread
pushing job after job.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from . import _clock
from ._errors import ConfigError
from ._sqlite_held import Waits

__all__ = ["MAX_BUSY_TIMEOUT", "Transaction", "Waits", "check_busy_timeout", "read"]

T = TypeVar("T")

#: The longest busy_timeout SQLite takes (milliseconds in a C int).
MAX_BUSY_TIMEOUT = (2**31 - 1) // 1000

# Between tries for a held file: short at first (most holds are a step of
# another process, microseconds long), at most 20 ms.
_FIRST_PAUSE = 0.0005
_LAST_PAUSE = 0.02


def check_busy_timeout(busy_timeout: object) -> None:
    """Raise :class:`ConfigError` unless ``busy_timeout`` is seconds SQLite can wait."""
    if not (isinstance(busy_timeout, int | float) and 0 <= busy_timeout <= MAX_BUSY_TIMEOUT):
        raise ConfigError(
            f"SQLiteBackend busy_timeout={busy_timeout!r} is not a time SQLite can wait "
            f"for a held file; give seconds from 0 to {MAX_BUSY_TIMEOUT:,} (default 10.0)"
        )


class _Patience:
    """How long to pause before the next try, until ``busy_timeout`` has passed."""

    def __init__(self, busy_timeout: float) -> None:
        self.busy_timeout = busy_timeout
        self.deadline = time.monotonic() + busy_timeout
        self._pause = _FIRST_PAUSE

    def pause(self) -> float:
        """The next pause; :class:`sqlite3.OperationalError` once the time is up."""
        if time.monotonic() >= self.deadline:
            error = sqlite3.OperationalError(
                f"database is locked: another connection held the jobs file for "
                f"busy_timeout={self.busy_timeout}s (a long transaction of your own "
                "connection, or of another process)"
            )
            # As SQLite's own "locked" error says it, for code that checks.
            error.sqlite_errorcode = sqlite3.SQLITE_BUSY
            error.sqlite_errorname = "SQLITE_BUSY"
            raise error
        pause, self._pause = self._pause, min(self._pause * 2, _LAST_PAUSE)
        return pause


def _busy(error: sqlite3.OperationalError) -> bool:
    return error.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY


async def read(lock: threading.RLock, busy_timeout: float, fn: Callable[[], T]) -> T:
    """``fn()``, reads outside any transaction, under ``lock`` (never within another
    thread's step). In WAL mode a reader meets a held file only while another
    connection recovers it after a crash: then it waits between tries."""
    patience: _Patience | None = None
    while True:
        with lock:  # held by another thread only for a step that never waits
            try:
                return fn()
            except sqlite3.OperationalError as error:
                if not _busy(error):
                    raise
        patience = patience or _Patience(busy_timeout)
        await asyncio.sleep(patience.pause())


class Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error): one atomic step.

    Entered with ``async with`` on the event loop and ``with`` in a thread; either
    waits for a held file between tries (see the module's docstring). ``began``
    is the store's time once the file is held: a wait does not shorten the
    leases or due times a step writes.

    Each one notes when it began and ended (table ``held``). While a transaction
    holds the file, no other process can renew a lease: a process stopped or
    frozen inside one (SIGSTOP, a VM pause) would let every worker's leases run
    out, and the next cycle would hand running jobs to a second worker while the
    first still runs them. So the next transaction gives a long hold's time back
    to the leases that were live when it began, before anything else reads them,
    and the holds that only waiters saw (see :mod:`._sqlite_held`).
    """

    def __init__(
        self,
        db: sqlite3.Connection,
        lock: threading.RLock,
        busy_timeout: float,
        *,
        noted: bool = True,
        waits: Waits | None = None,
    ) -> None:
        self.db = db
        self.lock = lock
        self.busy_timeout = busy_timeout
        self.noted = noted  # False only while the schema (and table held) is being made
        self.began = 0.0
        self.waits = waits or Waits()  # the store's, shared by its steps
        self.waited = False  # whether a try of this step found the file held
        self.read: list[str] = []  # files of waits it gave back, removed once it commits

    def __enter__(self) -> Transaction:
        if not self._begin():  # most steps: at the first try
            patience = self._waiting()
            while not self._begin():
                time.sleep(patience.pause())
        return self

    async def __aenter__(self) -> Transaction:
        if not self._begin():
            patience = self._waiting()
            while not self._begin():
                await asyncio.sleep(patience.pause())
        return self

    def _waiting(self) -> _Patience:
        # The file is held since the first failed try (noted in self.waits, and
        # published for other processes), as far as this store knows: if its
        # holder notes nothing (killed holding it, rolled back, an application's
        # transaction), the wait is the hold.
        return _Patience(self.busy_timeout)

    def _begin(self) -> bool:
        """Hold the lock and the file now, or neither and say so.

        The lock is waited for: whoever holds it runs one step that never
        waits (the file is waited for without it), so the wait is short, and
        the loop is not starved by threads that take it back at once.
        """
        self.lock.acquire()
        try:
            try:
                self.db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as error:
                if not _busy(error):
                    raise
                self.waits.failed(self.db)
                self.waited = True
                self.lock.release()
                return False
            self.began = _clock.store_now()
            if self.waited:
                self.waits.got_in(self.db, self.began)
            if self.noted:
                self.read = self.waits.give_back(self.db)
        except BaseException:
            # Whatever failed once BEGIN went through (an interrupt, a full disk),
            # the transaction ends here: left open, every later step would fail.
            try:
                _rollback(self.db)
            finally:
                self.lock.release()
            raise
        return True

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            if exc_type is None:
                self._commit()
            else:
                _rollback(self.db)
        finally:
            self.lock.release()

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.__exit__(exc_type, exc, tb)

    def _commit(self) -> None:
        try:
            if self.noted:
                ended = _clock.store_now()
                self.db.execute("UPDATE held SET began = ?, ended = ?", (self.began, ended))
            self.db.execute("COMMIT")
            # Cleared once committed: a step that rolled back gave nothing back.
            self.waits.committed(self.read)
        except BaseException:
            _rollback(self.db)
            raise


def _rollback(db: sqlite3.Connection) -> None:
    # SQLite may have rolled back already (a full disk, an I/O error): a second
    # ROLLBACK would raise and hide the error that did it.
    if db.in_transaction:
        db.execute("ROLLBACK")
