"""The SQLite store: the embedded default, one file shared by worker processes on one machine.

Why it is safe with several processes: the database runs in WAL mode, and every
step that changes job state is one ``BEGIN IMMEDIATE`` transaction, which SQLite
serialises between processes. A claimed job is not deleted (huey's SQLite store
deletes on dequeue, so a crash loses the job): its row gets ``state = running``,
an ``owner`` and a ``lease`` time. A row whose lease is in the past belongs to a
worker that died; the next ``cycle`` of any worker gives it back. Delayed and
retry jobs are rows with a future ``due``; an index on ``(queue, state, due)``
makes "ready" a range scan, and claiming is the same ``UPDATE`` for all of them,
so a due job is claimed exactly once.

Ordering keys: a job with a key (column ``okey``) that is not its key's head
(the lowest rowid of the key) has ``state = 2`` (blocked), which no claim looks
at. When a head leaves (done or dead) the key's next row, found through an index
on ``okey``, becomes ``state = 0`` in the same transaction. New rows always get a
rowid above every live row, so rowid order is push order; a retry updates its
row in place and keeps its place.

Calls are synchronous under the hood (SQLite answers in microseconds); a busy
database makes a call wait up to ``busy_timeout`` seconds.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from ._backend import DEAD_MAX, DEAD_MAX_AGE, Backend
from ._errors import ConfigError
from ._model import (
    Claimed,
    DeadJob,
    Envelope,
    Info,
    JobStatus,
    KeyInfo,
    Outcome,
    QueueInfo,
    WorkerInfo,
)
from ._sqlite_tx import Transaction as _Transaction
from ._sqlite_tx import chunks as _chunks

__all__ = ["SQLiteBackend"]

RUNNING = 1
WAITING = 0
BLOCKED = 2  # behind the head of its ordering key

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
CREATE INDEX IF NOT EXISTS dead_died ON dead (died);
CREATE TABLE IF NOT EXISTS uniques (key TEXT PRIMARY KEY, expires REAL NOT NULL);
CREATE TABLE IF NOT EXISTS workers (id TEXT PRIMARY KEY, info TEXT NOT NULL, expires REAL NOT NULL);
CREATE TABLE IF NOT EXISTS queues (name TEXT PRIMARY KEY);
"""


class SQLiteBackend(Backend):
    """Jobs in one SQLite file (``":memory:"`` for one process); several processes may share it.

    ::

        queue = batchy.jobs.Queue(SQLiteBackend("jobs.db"))
    """

    def __init__(
        self,
        path: str | Path = "batchy-jobs.db",
        *,
        busy_timeout: float = 10.0,
        synchronous: str = "NORMAL",
        dead_max: int = DEAD_MAX,
        dead_max_age: float = DEAD_MAX_AGE,
    ) -> None:
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ConfigError(
                f"SQLiteBackend synchronous={synchronous!r} is not a SQLite level; "
                "use 'NORMAL' (default: safe against process crashes) or 'FULL' "
                "(also against power loss)"
            )
        self.path = str(path)
        self.dead_max = dead_max
        self.dead_max_age = dead_max_age
        # One connection, possibly used from web threads (push_sync) and the loop:
        # a lock keeps their transactions from interleaving. No await happens
        # while it is held, so the event loop never waits on itself.
        self._lock = threading.RLock()
        self._db = sqlite3.connect(
            self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
        with self._tx():
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._db.execute(statement)
            # Files made before ordering keys existed get the columns now.
            for table in ("jobs", "dead"):
                columns = {r[1] for r in self._db.execute(f"PRAGMA table_info({table})")}
                if "okey" not in columns:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN okey TEXT")
            self._db.execute(
                "CREATE INDEX IF NOT EXISTS jobs_okey ON jobs (okey) WHERE okey IS NOT NULL"
            )
        self._pruned = 0.0

    def __repr__(self) -> str:
        return f"<SQLiteBackend {self.path}>"

    def _tx(self) -> _Transaction:
        return _Transaction(self._db, self._lock)

    # -- writing ---------------------------------------------------------------------

    async def push(self, envelopes: Sequence[Envelope], now: float) -> list[bool]:
        db = self._db
        pushed: list[bool] = []
        with self._tx():
            for env in envelopes:
                if env.unique is not None:
                    db.execute(
                        "DELETE FROM uniques WHERE key = ? AND expires <= ?", (env.unique, now)
                    )
                    cur = db.execute(
                        "INSERT OR IGNORE INTO uniques (key, expires) VALUES (?, ?)",
                        (env.unique, now + env.unique_ttl),
                    )
                    if cur.rowcount == 0:
                        pushed.append(False)
                        continue
                due = now if env.due is None else env.due
                cur = db.execute(
                    "INSERT OR IGNORE INTO jobs (id, queue, payload, due, okey, state) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (env.id, env.queue, env.payload, due, env.key, self._entry_state(env.key)),
                )
                pushed.append(cur.rowcount == 1)
            db.executemany(
                "INSERT OR IGNORE INTO queues (name) VALUES (?)",
                {(e.queue,) for e in envelopes},
            )
        return pushed

    async def cycle(
        self,
        outcomes: Sequence[Outcome],
        queues: Sequence[str],
        limit: int,
        worker: str,
        lease: float,
        now: float,
    ) -> list[Claimed]:
        db = self._db
        claimed: list[Claimed] = []
        with self._tx():
            if outcomes:
                self._apply(outcomes, now)
            # A lease in the past means its worker died: give the job back, once.
            db.execute(
                "UPDATE jobs SET state = 0, owner = NULL, lease = NULL "
                "WHERE state = 1 AND lease < ?",
                (now,),
            )
            for queue in queues:
                if len(claimed) >= limit:
                    break
                rows = db.execute(
                    "UPDATE jobs SET state = 1, owner = ?, lease = ?, retrying = 0 "
                    "WHERE rowid IN (SELECT rowid FROM jobs WHERE queue = ? "
                    "AND state = 0 AND due <= ? ORDER BY due, rowid LIMIT ?) "
                    "RETURNING id, queue, payload",
                    (worker, now + lease, queue, now, limit - len(claimed)),
                ).fetchall()
                claimed.extend(Claimed(*row) for row in rows)
            if now - self._pruned > 5.0:
                self._pruned = now
                db.execute("DELETE FROM results WHERE expires < ?", (now,))
                db.execute("DELETE FROM uniques WHERE expires < ?", (now,))
                db.execute("DELETE FROM workers WHERE expires < ?", (now,))
        return claimed

    def _entry_state(self, key: str | None) -> int:
        """A new row's state: blocked when its key already has a job (the head)."""
        if key is None:
            return WAITING
        busy = self._db.execute("SELECT 1 FROM jobs WHERE okey = ? LIMIT 1", (key,)).fetchone()
        return WAITING if busy is None else BLOCKED

    def _advance(self, keys: Iterable[str | None]) -> None:
        """The heads of ``keys`` left: each key's oldest remaining row becomes claimable."""
        for key in {k for k in keys if k is not None}:
            self._db.execute(
                "UPDATE jobs SET state = 0 WHERE rowid = "
                "(SELECT min(rowid) FROM jobs WHERE okey = ?) AND state = 2",
                (key,),
            )

    def _apply(self, outcomes: Sequence[Outcome], now: float) -> None:
        db = self._db
        done = [o.id for o in outcomes if o.kind == "done"]
        left: list[str | None] = []
        for chunk in _chunks(done):
            left += [
                r[0]
                for r in db.execute(
                    f"DELETE FROM jobs WHERE id IN ({','.join('?' * len(chunk))}) RETURNING okey",
                    tuple(chunk),
                )
            ]
        kept = [(o.id, o.result, now + o.keep) for o in outcomes if o.kind == "done" and o.keep > 0]
        if kept:
            db.executemany("INSERT OR REPLACE INTO results VALUES (?, ?, ?)", kept)
        db.executemany(
            "UPDATE jobs SET state = 0, owner = NULL, lease = NULL, retrying = 1, "
            "payload = ?, due = ? WHERE id = ?",
            [(o.payload, o.due, o.id) for o in outcomes if o.kind == "retry"],
        )
        db.executemany(
            "UPDATE jobs SET state = 0, owner = NULL, lease = NULL WHERE id = ?",
            [(o.id,) for o in outcomes if o.kind == "release"],
        )
        dead = [o for o in outcomes if o.kind == "dead"]
        for o in dead:
            row = db.execute("DELETE FROM jobs WHERE id = ? RETURNING okey", (o.id,)).fetchone()
            key = None if row is None else row[0]
            left.append(key)
            db.execute(
                "INSERT OR REPLACE INTO dead (id, queue, payload, reason, traceback, died, okey) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (o.id, o.queue, o.payload or "", o.reason, o.traceback, now, key),
            )
        if dead:
            self._cap_dead(now)
        self._advance(left)

    def _cap_dead(self, now: float) -> None:
        self._db.execute("DELETE FROM dead WHERE died < ?", (now - self.dead_max_age,))
        self._db.execute(
            "DELETE FROM dead WHERE id IN (SELECT id FROM dead ORDER BY died DESC "
            "LIMIT -1 OFFSET ?)",
            (self.dead_max,),
        )

    async def heartbeat(
        self, worker: WorkerInfo, ids: Sequence[str], lease: float, now: float
    ) -> list[str]:
        db = self._db
        held: set[str] = set()
        with self._tx():
            for chunk in _chunks(list(ids)):
                marks = ",".join("?" * len(chunk))
                rows = db.execute(
                    f"UPDATE jobs SET lease = ? WHERE state = 1 AND owner = ? "
                    f"AND id IN ({marks}) RETURNING id",
                    (now + lease, worker.id, *chunk),
                ).fetchall()
                held.update(r[0] for r in rows)
            db.execute(
                "INSERT OR REPLACE INTO workers VALUES (?, ?, ?)",
                (worker.id, worker.to_json(), now + lease),
            )
        return [i for i in ids if i not in held]

    async def save_progress(
        self, job_id: str, worker: str, payload: str, lease: float, now: float
    ) -> bool:
        with self._tx():
            cur = self._db.execute(
                "UPDATE jobs SET payload = ?, lease = ? WHERE id = ? AND state = 1 AND owner = ?",
                (payload, now + lease, job_id, worker),
            )
            return cur.rowcount == 1

    async def forget_worker(self, worker_id: str) -> None:
        with self._tx():
            self._db.execute("DELETE FROM workers WHERE id = ?", (worker_id,))

    async def keys(self, now: float, limit: int = 10) -> tuple[list[KeyInfo], list[KeyInfo]]:
        with self._lock:  # reads too: never inside another thread's transaction
            # An operator's view, so it may read every key; no claim ever does this.
            rows = self._db.execute(
                "SELECT k.okey, k.n, j.id, j.queue, j.state, j.due, j.retrying, j.lease "
                "FROM (SELECT okey, count(*) AS n, min(rowid) AS head FROM jobs "
                "WHERE okey IS NOT NULL GROUP BY okey) AS k JOIN jobs AS j ON j.rowid = k.head"
            ).fetchall()
        found = [
            KeyInfo.of_head(
                key,
                queue,
                n,
                head,
                running=state == RUNNING,
                lease=lease or 0.0,
                due=due,
                retrying=bool(retrying),
                now=now,
            )
            for key, n, head, queue, state, due, retrying, lease in rows
        ]
        return self.rank_keys(found, limit)

    # -- reading ---------------------------------------------------------------------

    async def status(self, job_id: str, now: float) -> JobStatus:
        with self._lock:  # reads too: never inside another thread's transaction
            db = self._db
            row = db.execute(
                "SELECT state, due, retrying FROM jobs WHERE id = ?", (job_id,)
            ).fetchone()
            if row is not None:
                state, due, retrying = row
                if state == RUNNING:
                    return JobStatus(job_id, "running")
                if due > now:
                    return JobStatus(job_id, "retrying" if retrying else "scheduled")
                return JobStatus(job_id, "queued")
            dead = db.execute("SELECT reason FROM dead WHERE id = ?", (job_id,)).fetchone()
            if dead is not None:
                return JobStatus(job_id, "dead", reason=dead[0])
            done = db.execute(
                "SELECT result FROM results WHERE id = ? AND expires >= ?", (job_id, now)
            ).fetchone()
            if done is not None:
                return JobStatus(job_id, "done", result=done[0])
            return JobStatus(job_id, "unknown")

    async def info(self, now: float) -> Info:
        with self._lock:  # reads too: never inside another thread's transaction
            db = self._db
            names = [r[0] for r in db.execute("SELECT name FROM queues ORDER BY name")]
            queues = []
            for name in names:
                size, oldest = db.execute(
                    "SELECT count(*), min(due) FROM jobs "
                    "WHERE queue = ? AND state = 0 AND due <= ?",
                    (name, now),
                ).fetchone()
                running, scheduled, retrying = db.execute(
                    "SELECT count(*) FILTER (WHERE state = 1), "
                    "count(*) FILTER (WHERE state = 0 AND due > ? AND retrying = 0), "
                    "count(*) FILTER (WHERE state = 0 AND due > ? AND retrying = 1) "
                    "FROM jobs WHERE queue = ?",
                    (now, now, name),
                ).fetchone()
                latency = max(0.0, now - oldest) if oldest is not None else 0.0
                queues.append(QueueInfo(name, size, latency, running, scheduled, retrying))
            dead = db.execute("SELECT count(*) FROM dead").fetchone()[0]
            workers = tuple(
                WorkerInfo.from_json(r[0])
                for r in db.execute(
                    "SELECT info FROM workers WHERE expires >= ? ORDER BY id", (now,)
                )
            )
            return Info(tuple(queues), dead, workers)

    async def dead_jobs(self, limit: int = 100) -> list[DeadJob]:
        with self._lock:  # reads too: never inside another thread's transaction
            rows = self._db.execute(
                "SELECT id, queue, payload, reason, traceback, died, okey FROM dead "
                "ORDER BY died DESC LIMIT ?",
                (limit,),
            ).fetchall()
            return [DeadJob(*row) for row in rows]

    async def retry_dead(self, ids: Sequence[str] | None, now: float) -> int:
        db = self._db
        with self._tx():
            rows = self._select_dead(ids)
            for job_id, queue, payload, key in rows:
                db.execute("DELETE FROM dead WHERE id = ?", (job_id,))
                db.execute(
                    "INSERT OR REPLACE INTO jobs (id, queue, payload, due, okey, state) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (job_id, queue, payload, now, key, self._entry_state(key)),
                )
        return len(rows)

    async def delete_dead(self, ids: Sequence[str] | None) -> int:
        with self._tx():
            rows = self._select_dead(ids)
            self._db.executemany("DELETE FROM dead WHERE id = ?", [(r[0],) for r in rows])
        return len(rows)

    def _select_dead(self, ids: Sequence[str] | None) -> list[tuple[str, str, str, str | None]]:
        if ids is None:
            return self._db.execute("SELECT id, queue, payload, okey FROM dead").fetchall()
        rows: list[tuple[str, str, str, str | None]] = []
        for chunk in _chunks(list(ids)):
            marks = ",".join("?" * len(chunk))
            rows += self._db.execute(
                f"SELECT id, queue, payload, okey FROM dead WHERE id IN ({marks})",
                tuple(chunk),
            ).fetchall()
        return rows

    async def close(self) -> None:
        self._db.close()
