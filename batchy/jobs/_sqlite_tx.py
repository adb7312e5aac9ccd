"""SQLite plumbing for the store: schema, transactions, inserts, id lists, done and dead jobs."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

from . import _clock
from ._errors import ConfigError
from ._hooks import log
from ._model import Envelope, Outcome
from ._sqlite_size import fit_result

__all__ = [
    "BLOCKED",
    "RUNNING",
    "WAITING",
    "advance",
    "cap_dead",
    "chunks",
    "create_schema",
    "entry_state",
    "foreign_problem",
    "foreign_tables",
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
    """Connect to ``path`` in WAL mode, waiting up to ``busy_timeout`` for other openers.

    Its busy timeout is 0: the store waits for a held file itself (see _sqlite_lock).
    A file it cannot use is a :class:`ConfigError` naming it and the likely fix.
    """
    try:
        db = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
    except sqlite3.DatabaseError as error:
        raise _cannot_open(path, error) from error
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            (mode,) = db.execute("PRAGMA journal_mode=WAL").fetchone()
            if mode != "wal" and path not in ("", ":memory:"):
                _not_wal(path, mode)
            return db
        except sqlite3.DatabaseError as exc:
            # SQLite answers this pragma "locked" at once, without its busy handler,
            # while another process is switching the same new file to WAL: two
            # processes started together (a worker and an enqueue) would fail one.
            busy = exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
            if not busy or time.monotonic() > deadline:
                db.close()
                if busy:
                    raise
                raise _cannot_open(path, exc) from exc
            time.sleep(0.005)


def _cannot_open(path: str, error: sqlite3.DatabaseError) -> ConfigError:
    code = getattr(error, "sqlite_errorcode", 0) & 0xFF
    if code == sqlite3.SQLITE_NOTADB:
        why = (
            "it is not a SQLite database (another program's file?). Point the store at a "
            "new file, or at your application's own SQLite file"
        )
    elif code == sqlite3.SQLITE_READONLY:
        why = (
            "it is read-only to this process. The store writes to it, and SQLite makes "
            "its -wal and -shm files beside it: give this process write access to the "
            "file and its directory"
        )
    elif code == sqlite3.SQLITE_CANTOPEN:
        why = (
            "cannot open or create it. Its directory must exist and be writable by this "
            "process, and the path must name a file, not a directory"
        )
    else:
        why = "cannot use it"
    return ConfigError(
        f"SQLite job store {os.path.abspath(path)}: {why} (SQLite says: {error}); nothing "
        "was changed"
    )


def _not_wal(path: str, mode: str) -> None:
    # SQLite answers the pragma with the mode it kept rather than failing: a file
    # system without shared memory (a network mount, say) cannot hold the WAL index.
    log.warning(
        "SQLite job store %s: the file stays in journal mode %r, as SQLite refused WAL "
        "(its file system offers no shared memory, as on most network mounts). The store "
        "works, but readers and writers now block each other, and a power loss during a "
        "write may corrupt the file unless synchronous='FULL'. Put the file on a local "
        "disk, or use another store for workers on several machines",
        path,
        mode,
    )


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


def foreign_tables(db: sqlite3.Connection, others: Sequence[str]) -> dict[str, list[str]]:
    """Tables of the file with a name of the store's but other columns: {name: columns}.

    The store keeps its tables in the file it opens, which is the application's
    own for a transactional enqueue; an application table named ``jobs`` or
    ``workers`` would otherwise be taken for the store's: its rows overwritten,
    pruned, or every heartbeat failing. ``others``: the CREATE statements of the
    tables made on first use (counts, runs). A table of an older release, with
    fewer of the columns, is the store's.
    """
    mine = _columns(others)
    names = ", ".join("?" * len(mine))
    found = [r[0] for r in db.execute(
        f"SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ({names})", list(mine)
    )]  # fmt: skip
    theirs = {name: [r[1] for r in db.execute(f"PRAGMA table_info({name})")] for name in found}
    return {name: cols for name, cols in theirs.items() if not set(cols) <= mine[name]}


def foreign_problem(path: str, tables: Mapping[str, list[str]]) -> str:
    """The error message for :func:`foreign_tables`' finds."""
    shown = "; ".join(f"{name!r} ({', '.join(cols)})" for name, cols in sorted(tables.items()))
    return (
        f"SQLite job store {path}: the file holds tables of the same name as the store's but "
        f"not its columns: {shown}. The store keeps its tables (jobs, results, dead, uniques, "
        "workers, queues, held, cancels, counts, runs) in the file it opens, and would take "
        "these for its own. Rename those tables, or give the store a file of its own (jobs "
        "are then not enqueued in your transactions); nothing was changed"
    )


_COLUMNS: dict[str, set[str]] = {}


def _columns(others: Sequence[str]) -> dict[str, set[str]]:
    """The store's tables and their columns, read off the schema made in memory (once)."""
    if not _COLUMNS:
        mem = sqlite3.connect(":memory:")
        create_schema(mem)
        for statement in others:
            mem.execute(statement)
        for (name,) in mem.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            _COLUMNS[name] = {r[1] for r in mem.execute(f"PRAGMA table_info({name})")}
        mem.close()
    return _COLUMNS


def entry_state(db: sqlite3.Connection, key: str | None) -> int:
    """A new row's state: blocked when its ordering key already has a job (the head)."""
    if key is None:
        return WAITING
    busy = db.execute("SELECT 1 FROM main.jobs WHERE okey = ? LIMIT 1", (key,)).fetchone()
    return WAITING if busy is None else BLOCKED


def insert_jobs(
    db: sqlite3.Connection, envelopes: Sequence[Envelope], sent: float, now: float
) -> list[bool]:
    """Insert new jobs (a unique key still held, or a known id, refuses one); which went in.

    A refused envelope takes nothing: a known id is looked for before the unique
    key is taken (a live job's id took the key, and the next enqueue under it was
    refused too), and only the queues of stored jobs are noted.

    ``db`` may be the application's connection, whose TEMP tables SQLite looks in
    before the file's: a temporary ``jobs`` would take the jobs and drop them with
    the connection, so every table here is named in ``main``.
    """
    pushed: list[bool] = []
    for env in envelopes:
        if db.execute("SELECT 1 FROM main.jobs WHERE id = ?", (env.id,)).fetchone():
            pushed.append(False)
            continue
        if env.unique is not None:
            db.execute("DELETE FROM main.uniques WHERE key = ? AND expires <= ?", (env.unique, now))
            cur = db.execute(
                "INSERT OR IGNORE INTO main.uniques (key, expires) VALUES (?, ?)",
                (env.unique, now + env.unique_ttl),
            )
            if cur.rowcount == 0:
                pushed.append(False)
                continue
        due = _clock.on_store(env.due, sent, now)
        cur = db.execute(
            "INSERT OR IGNORE INTO main.jobs (id, queue, payload, due, okey, state) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (env.id, env.queue, env.payload, due, env.key, entry_state(db, env.key)),
        )
        pushed.append(cur.rowcount == 1)
    stored = {(e.queue,) for e, ok in zip(envelopes, pushed, strict=True) if ok}
    db.executemany("INSERT OR IGNORE INTO main.queues (name) VALUES (?)", stored)
    return pushed


def advance(db: sqlite3.Connection, keys: Iterable[str | None]) -> None:
    """Rows of ``keys`` left: each key's oldest remaining row becomes claimable (if blocked)."""
    for key in {k for k in keys if k is not None}:
        db.execute(
            "UPDATE jobs SET state = 0 WHERE rowid = "
            "(SELECT min(rowid) FROM jobs WHERE okey = ?) AND state = 2",
            (key,),
        )


def cap_dead(db: sqlite3.Connection, older: float, most: int) -> None:
    """Drop the dead jobs that died before ``older``, and all but the ``most`` latest."""
    db.execute("DELETE FROM dead WHERE died < ?", (older,))
    db.execute(
        "DELETE FROM dead WHERE id IN (SELECT id FROM dead ORDER BY died DESC LIMIT -1 OFFSET ?)",
        (most,),
    )


# SQLite allows 32766 host parameters; stay far below.
_CHUNK = 500


def finish_done(
    db: sqlite3.Connection, given: Sequence[Outcome], now: float, limit: int
) -> list[tuple[str, str, str | None]]:
    """Remove the jobs of the ``done`` outcomes whose token holds, keeping each result
    with what the job was (queue, key, payload); the ``(id, token, ordering key)`` of
    each. A result that does not fit in a row beside them (``limit``) is not kept."""
    done = [(o.id, o.token) for o in given if o.kind == "done"]
    # By claim, not by id: a stale claim's outcome beside the live one's (same id)
    # is refused, and its result must not replace the live one's.
    was: dict[tuple[str, str], tuple[str, str | None, str]] = {}
    for chunk in chunks(done):
        where, params = pairs(chunk)
        for job_id, token, key, queue, payload in db.execute(
            f"DELETE FROM jobs WHERE +state = 1 AND {where} "
            "RETURNING id, token, okey, queue, payload",
            params,
        ):
            was[job_id, token] = (queue, key, payload)
    kept = [
        (o.id, fit_result(limit, o.id, o.result, *w), now + o.keep, *w)
        for o in given
        if o.kind == "done" and o.keep > 0 and (w := was.get((o.id, o.token))) is not None
    ]
    if kept:
        db.executemany(
            "INSERT OR REPLACE INTO results (id, result, expires, queue, okey, payload) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            kept,
        )
    return [(job_id, token, w[1]) for (job_id, token), w in was.items()]


def chunks(ids: Sequence[T]) -> Iterable[Sequence[T]]:
    """``ids`` in slices small enough for one ``IN (...)``."""
    for i in range(0, len(ids), _CHUNK):
        yield ids[i : i + _CHUNK]


def pairs(chunk: Sequence[tuple[str, str]]) -> tuple[str, tuple[str, ...]]:
    """``(id, token) IN (VALUES ...)`` for ``chunk``, and its parameters.

    The ids are listed on their own too: without them SQLite scans every running
    row for the pairs instead of looking each id up in the primary key. Callers
    say ``+state = 1``: the unary ``+`` keeps SQLite from answering that term
    with the index of ``(state, lease)``, which it prefers when the file has no
    statistics (about 10 rows per value, it assumes), and which reads every
    running job of every worker.
    """
    ids = ",".join("?" * len(chunk))
    marks = ",".join("(?, ?)" for _ in chunk)
    params = (*(pair[0] for pair in chunk), *(v for pair in chunk for v in pair))
    return f"id IN ({ids}) AND (id, token) IN (VALUES {marks})", params
