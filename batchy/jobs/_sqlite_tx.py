"""SQLite plumbing for the store: schema, transactions, inserts, id lists, finished jobs."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from typing import TypeVar

from . import _clock
from ._errors import ConfigError
from ._model import Envelope, Outcome

__all__ = [
    "BLOCKED",
    "RUNNING",
    "WAITING",
    "Transaction",
    "advance",
    "check_busy_timeout",
    "chunks",
    "create_schema",
    "entry_state",
    "insert_jobs",
    "finish_done",
    "open_wal",
    "pairs",
]

# The ``state`` column of ``jobs``.
WAITING = 0
RUNNING = 1
BLOCKED = 2  # behind the head of its ordering key

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    queue TEXT NOT NULL,
    payload TEXT NOT NULL,
    state INTEGER NOT NULL DEFAULT 0,
    due REAL NOT NULL,
    retrying INTEGER NOT NULL DEFAULT 0,
    owner TEXT,
    lease REAL
);
CREATE INDEX IF NOT EXISTS jobs_ready ON jobs (queue, state, due);
CREATE INDEX IF NOT EXISTS jobs_lease ON jobs (state, lease);

CREATE TABLE IF NOT EXISTS results (id TEXT PRIMARY KEY, result TEXT, expires REAL NOT NULL);
CREATE TABLE IF NOT EXISTS dead (
    id TEXT PRIMARY KEY, queue TEXT NOT NULL, payload TEXT NOT NULL,
    reason TEXT NOT NULL, traceback TEXT NOT NULL, died REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS uniques (key TEXT PRIMARY KEY, expires REAL NOT NULL);
CREATE TABLE IF NOT EXISTS workers (id TEXT PRIMARY KEY, info TEXT NOT NULL, expires REAL NOT NULL);
CREATE TABLE IF NOT EXISTS queues (name TEXT PRIMARY KEY);
"""


def open_wal(path: str, busy_timeout: float) -> sqlite3.Connection:
    """Connect to ``path`` in WAL mode, waiting up to ``busy_timeout`` for other openers."""
    db = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return db
        except sqlite3.OperationalError as exc:
            # SQLite answers this pragma "locked" at once, without its busy handler,
            # while another process is switching the same new file to WAL: two
            # processes started together (a worker and an enqueue) would fail one.
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                db.close()
                raise
            time.sleep(0.005)


def create_schema(db: sqlite3.Connection) -> None:
    """Create the tables (in the caller's transaction); older files get the new columns."""
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)
    # Files made before ordering keys (okey), lease tokens or done jobs' records
    # (what the job was, beside its result) existed get the columns now.
    added = (
        ("jobs", "okey"), ("dead", "okey"), ("jobs", "token"),
        ("results", "queue"), ("results", "okey"), ("results", "payload"),
    )  # fmt: skip
    for table, column in added:
        columns = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
        if column not in columns:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} TEXT")
    db.execute("CREATE INDEX IF NOT EXISTS jobs_okey ON jobs (okey) WHERE okey IS NOT NULL")
    # For operators: pages of dead and done jobs, newest first, by index seeks;
    # the results index also serves the prune of expired results.
    db.execute("CREATE INDEX IF NOT EXISTS dead_died_id ON dead (died, id)")
    db.execute("DROP INDEX IF EXISTS dead_died")  # dead_died_id does its work
    db.execute("CREATE INDEX IF NOT EXISTS results_expires ON results (expires, id)")
    # When the last write transaction began and ended (see Transaction): one row.
    db.execute("CREATE TABLE IF NOT EXISTS held (began REAL NOT NULL, ended REAL NOT NULL)")
    db.execute("INSERT INTO held SELECT 0, 0 WHERE NOT EXISTS (SELECT 1 FROM held)")
    # Cancels an operator asked for, each for one claim (its token) of a running job.
    db.execute(
        "CREATE TABLE IF NOT EXISTS cancels (id TEXT PRIMARY KEY, owner TEXT NOT NULL, "
        "token TEXT NOT NULL)"
    )


def entry_state(db: sqlite3.Connection, key: str | None) -> int:
    """A new row's state: blocked when its ordering key already has a job (the head)."""
    if key is None:
        return WAITING
    busy = db.execute("SELECT 1 FROM jobs WHERE okey = ? LIMIT 1", (key,)).fetchone()
    return WAITING if busy is None else BLOCKED


def insert_jobs(
    db: sqlite3.Connection, envelopes: Sequence[Envelope], sent: float, now: float
) -> list[bool]:
    """Insert new jobs (a unique key still held, or a known id, refuses one); which went in."""
    pushed: list[bool] = []
    for env in envelopes:
        if env.unique is not None:
            db.execute("DELETE FROM uniques WHERE key = ? AND expires <= ?", (env.unique, now))
            cur = db.execute(
                "INSERT OR IGNORE INTO uniques (key, expires) VALUES (?, ?)",
                (env.unique, now + env.unique_ttl),
            )
            if cur.rowcount == 0:
                pushed.append(False)
                continue
        due = _clock.on_store(env.due, sent, now)
        cur = db.execute(
            "INSERT OR IGNORE INTO jobs (id, queue, payload, due, okey, state) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (env.id, env.queue, env.payload, due, env.key, entry_state(db, env.key)),
        )
        pushed.append(cur.rowcount == 1)
    db.executemany(
        "INSERT OR IGNORE INTO queues (name) VALUES (?)", {(e.queue,) for e in envelopes}
    )
    return pushed


def advance(db: sqlite3.Connection, keys: Iterable[str | None]) -> None:
    """Rows of ``keys`` left: each key's oldest remaining row becomes claimable (if blocked)."""
    for key in {k for k in keys if k is not None}:
        db.execute(
            "UPDATE jobs SET state = 0 WHERE rowid = "
            "(SELECT min(rowid) FROM jobs WHERE okey = ?) AND state = 2",
            (key,),
        )


# SQLite allows 32766 host parameters; stay far below.
_CHUNK = 500


def finish_done(
    db: sqlite3.Connection, given: Sequence[Outcome], now: float
) -> list[tuple[str, str | None]]:
    """Remove the jobs of the ``done`` outcomes whose token holds, keeping each result
    with what the job was (queue, key, payload); the ``(id, ordering key)`` of each."""
    done = [(o.id, o.token) for o in given if o.kind == "done"]
    was: dict[str, tuple[str, str | None, str]] = {}
    for chunk in chunks(done):
        where, params = pairs(chunk)
        for job_id, key, queue, payload in db.execute(
            f"DELETE FROM jobs WHERE state = 1 AND {where} RETURNING id, okey, queue, payload",
            params,
        ):
            was[job_id] = (queue, key, payload)
    kept = [
        (o.id, o.result, now + o.keep, *was[o.id])
        for o in given
        if o.kind == "done" and o.keep > 0 and o.id in was
    ]
    if kept:
        db.executemany(
            "INSERT OR REPLACE INTO results (id, result, expires, queue, okey, payload) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            kept,
        )
    return [(job_id, w[1]) for job_id, w in was.items()]


def chunks(ids: Sequence[T]) -> Iterable[Sequence[T]]:
    """``ids`` in slices small enough for one ``IN (...)``."""
    for i in range(0, len(ids), _CHUNK):
        yield ids[i : i + _CHUNK]


def pairs(chunk: Sequence[tuple[str, str]]) -> tuple[str, tuple[str, ...]]:
    """``(id, token) IN (VALUES ...)`` for ``chunk``, and its parameters.

    The ids are listed on their own too: without them SQLite scans every running
    row for the pairs instead of looking each id up in the primary key.
    """
    ids = ",".join("?" * len(chunk))
    marks = ",".join("(?, ?)" for _ in chunk)
    params = (*(pair[0] for pair in chunk), *(v for pair in chunk for v in pair))
    return f"id IN ({ids}) AND (id, token) IN (VALUES {marks})", params


#: Seconds a write transaction may hold the file before the leases it outlived
#: get that time back (a normal one takes milliseconds).
HOLD_GRACE = 0.1


class Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error): one atomic step.

    Each one notes when it began and ended (table ``held``). While a transaction
    holds the file, no other process can renew a lease: a process stopped or
    frozen inside one (SIGSTOP, a VM pause) would let every worker's leases run
    out, and the next cycle would hand running jobs to a second worker while the
    first still runs them. So the next transaction gives a long hold's time back
    to the leases that were live when it began, before anything else reads them.

    It is entered with ``async with`` on the event loop and ``with`` elsewhere.
    Either way it waits for a file held by another connection between tries,
    never inside SQLite's busy handler and never holding the store's lock: the
    holder may be a transaction of the application's own connection in a
    coroutine of this very loop (``connection=``), awaiting something before it
    commits. A loop blocked in the busy handler would wait for a commit that
    cannot come until ``busy_timeout`` ran out, and stall every other task
    meanwhile. ``began`` is the store's time once the file is held: a wait
    does not shorten the leases or due times a step writes.
    """

    def __init__(
        self,
        db: sqlite3.Connection,
        lock: threading.RLock,
        busy_timeout: float,
        *,
        noted: bool = True,
    ) -> None:
        self.db = db
        self.lock = lock
        self.busy_timeout = busy_timeout
        self.noted = noted  # False only while the schema (and table held) is being made
        self.began = 0.0

    def __enter__(self) -> Transaction:
        pause, deadline = _FIRST_PAUSE, time.monotonic() + self.busy_timeout
        # A thread waits its turn at the lock (in arrival order, fairly); the
        # loop never does, below.
        while not self._begin(max(0.0, deadline - time.monotonic())):
            self._check(deadline)
            time.sleep(pause)
            pause = min(pause * 2, _LAST_PAUSE)
        return self

    async def __aenter__(self) -> Transaction:
        pause, deadline = _FIRST_PAUSE, time.monotonic() + self.busy_timeout
        while not self._begin(None):
            self._check(deadline)
            await asyncio.sleep(pause)
            pause = min(pause * 2, _LAST_PAUSE)
        return self

    def _begin(self, wait: float | None) -> bool:
        """Hold the lock and the file now, or neither and say so (``wait``: for the lock)."""
        if not (self.lock.acquire(timeout=wait) if wait else self.lock.acquire(blocking=False)):
            return False  # another thread's step holds it
        try:
            if not _begin_immediate(self.db, self.busy_timeout):
                self.lock.release()
                return False
            self.began = _clock.store_now()
            if self.noted:
                _give_back_held_time(self.db)
        except BaseException:
            # Whatever failed once BEGIN went through (an interrupt, a full disk),
            # the transaction ends here: left open, every later step would fail.
            try:
                _rollback(self.db)
            finally:
                self.lock.release()
            raise
        return True

    def _check(self, deadline: float) -> None:
        if time.monotonic() >= deadline:
            raise sqlite3.OperationalError(
                f"database is locked: another connection held the jobs file for "
                f"busy_timeout={self.busy_timeout}s (a long transaction of your own "
                "connection, or of another process)"
            )

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
        except BaseException:
            _rollback(self.db)
            raise


# Between tries for a held file: short at first (most holds are a step of
# another process, microseconds long), at most 20 ms.
_FIRST_PAUSE = 0.0005
_LAST_PAUSE = 0.02

#: The longest busy_timeout SQLite takes (milliseconds in a C int).
MAX_BUSY_TIMEOUT = (2**31 - 1) // 1000


def _begin_immediate(db: sqlite3.Connection, busy_timeout: float) -> bool:
    """``BEGIN IMMEDIATE`` without waiting: False if another connection holds the file."""
    db.execute("PRAGMA busy_timeout = 0")
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:
            raise
        return False
    finally:
        # Reads keep the busy handler: in WAL mode they wait only for moments.
        db.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    return True


def _rollback(db: sqlite3.Connection) -> None:
    # SQLite may have rolled back already (a full disk, an I/O error): a second
    # ROLLBACK would raise and hide the error that did it.
    if db.in_transaction:
        db.execute("ROLLBACK")


def _give_back_held_time(db: sqlite3.Connection) -> None:
    row = db.execute("SELECT began, ended FROM held").fetchone()
    if row is not None and row[1] - row[0] > HOLD_GRACE:
        # The last transaction held the file from `began` to `ended`: a lease live
        # at `began` could not be renewed for that long. (It is applied once: this
        # transaction notes its own times over it.)
        db.execute(
            "UPDATE jobs SET lease = lease + ? WHERE state = 1 AND lease >= ?",
            (row[1] - row[0], row[0]),
        )


def check_busy_timeout(busy_timeout: object) -> None:
    """Raise :class:`ConfigError` unless ``busy_timeout`` is seconds SQLite can wait."""
    if not (isinstance(busy_timeout, int | float) and 0 <= busy_timeout <= MAX_BUSY_TIMEOUT):
        raise ConfigError(
            f"SQLiteBackend busy_timeout={busy_timeout!r} is not a time SQLite can wait "
            f"for a held file; give seconds from 0 to {MAX_BUSY_TIMEOUT:,} (default 10.0)"
        )
