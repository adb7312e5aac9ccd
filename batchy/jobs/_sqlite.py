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

Fencing: a claim writes a fresh random ``token`` into the row (one per cycle); an outcome, a
heartbeat or a progress save changes the row only while the token is still the
row's (``state = 1 AND token = ?``, in the same transaction), so a worker whose
lease moved on can no longer speak for the job. Times are decided on the
machine's clock (:func:`_clock.store_now`), never on the caller's ``now``.

Idle workers wait on wake-ups, one named pipe per queue between processes
(:mod:`batchy.jobs._sqlite_wake`), rung after the transaction that made work.

Calls are synchronous under the hood (SQLite answers in microseconds). A step
that finds the file held by another connection waits up to ``busy_timeout``
seconds for it between tries, awaiting on the event loop rather than blocking
it (see ``_sqlite_lock``).
"""

from __future__ import annotations

import functools
import os
import secrets
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from . import _clock
from ._backend import DEAD_MAX, DEAD_MAX_AGE, Backend
from ._errors import ConfigError
from ._model import (
    Claimed,
    Claims,
    DeadJob,
    Envelope,
    Info,
    JobStatus,
    KeyInfo,
    Outcome,
    WorkerInfo,
)
from ._records import StoredJob
from ._sqlite_admin import act, list_jobs, read_jobs, retry_dead, select_dead
from ._sqlite_app import join_app_transaction, stale_snapshot_noted, usable
from ._sqlite_counts import TABLE as COUNTS_TABLE
from ._sqlite_kept import KeptRecords
from ._sqlite_lock import Transaction as _Transaction
from ._sqlite_lock import Waits, check_busy_timeout, read
from ._sqlite_read import read_info, read_keys, read_statuses
from ._sqlite_runs import TABLE as RUNS_TABLE
from ._sqlite_size import (
    check_lengths,
    check_progress,
    fit_death,
    length_limit,
    screen_lengths,
)
from ._sqlite_tx import (
    advance,
    cap_dead,
    finish_done,
    foreign_problem,
    foreign_tables,
    insert_jobs,
    open_wal,
)
from ._sqlite_tx import chunks as _chunks
from ._sqlite_tx import create_schema as _create_schema
from ._sqlite_tx import pairs as _pairs
from ._sqlite_wake import SQLiteWakeups

__all__ = ["SQLiteBackend"]

T = TypeVar("T")


class SQLiteBackend(KeptRecords, Backend):
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
        check_busy_timeout(busy_timeout)
        self.path = str(path)
        memory = self.path in ("", ":memory:")
        # Resolved once: a later chdir must not point the store (its wake-ups, the
        # check of an application's connection) at another file of the same name.
        self.file = self.path if memory else os.path.abspath(self.path)
        self._waits = Waits(None if memory else self.file + "-wake/held")  # see _sqlite_held
        self.dead_max = dead_max
        self.dead_max_age = dead_max_age
        # One connection, used from web threads (push_sync) and the loop: see
        # _sqlite_lock for how steps take it and the file in turn.
        self._lock = threading.RLock()
        self._db = open_wal(self.path, busy_timeout)
        self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
        self.busy_timeout = busy_timeout
        with _Transaction(self._db, self._lock, busy_timeout, noted=False):
            foreign = foreign_tables(self._db, (COUNTS_TABLE, RUNS_TABLE))
            if not foreign:
                _create_schema(self._db)
        if foreign:
            self._db.close()
            raise ConfigError(foreign_problem(self.path, foreign))
        self._pruned = 0.0
        self._wakeups = SQLiteWakeups(self.file, self._db, self._lock, busy_timeout)

    #: Rows a page of jobs reads at most per queue beyond the page (see list_jobs).
    page_budget = 500

    def __repr__(self) -> str:
        return f"<SQLiteBackend {self.path}>"

    def _tx(self) -> _Transaction:
        return _Transaction(self._db, self._lock, self.busy_timeout, waits=self._waits)

    async def _read(self, fn: Callable[[], T]) -> T:
        return await read(self._lock, self.busy_timeout, fn)

    # -- writing ---------------------------------------------------------------------

    async def push(
        self, envelopes: Sequence[Envelope], now: float, *, connection: Any = None
    ) -> list[bool]:
        if connection is not None:
            return self._push_in(connection, envelopes, now)
        self._check(envelopes, self._db)
        async with self._tx() as tx:
            pushed = insert_jobs(self._db, envelopes, now, tx.began)
        return self._pushed(envelopes, pushed)

    def push_sync(
        self, envelopes: Sequence[Envelope], now: float, *, connection: Any = None
    ) -> list[bool]:
        if connection is not None:
            return self._push_in(connection, envelopes, now)
        self._check(envelopes, self._db)
        with self._tx() as tx:  # a thread of its own may wait for the file
            pushed = insert_jobs(self._db, envelopes, now, tx.began)
        return self._pushed(envelopes, pushed)

    def _push_in(self, connection: Any, envelopes: Sequence[Envelope], sent: float) -> list[bool]:
        # The application's own connection, in its open transaction: the jobs
        # exist if and only if it commits. Nobody can ring after that commit,
        # so a worker may see them only at its next poll_interval.
        self._check(envelopes, usable(self, connection))
        join_app_transaction(self, self.file, connection)
        with stale_snapshot_noted(envelopes):
            pushed = insert_jobs(connection, envelopes, sent, _clock.store_now())
        return self._pushed(envelopes, pushed)

    def _check(self, envelopes: Sequence[Envelope], db: Any) -> None:
        self.check_envelopes(envelopes)
        check_lengths(self, envelopes, db)

    def _pushed(self, envelopes: Sequence[Envelope], pushed: list[bool]) -> list[bool]:
        self._wakeups.signal({e.queue for e, ok in zip(envelopes, pushed, strict=True) if ok})
        return pushed

    async def cycle(
        self,
        outcomes: Sequence[Outcome],
        queues: Sequence[str],
        limit: int,
        worker: str,
        lease: float,
        now: float,
    ) -> Claims:
        sent, db, claimed = now, self._db, Claims()
        async with self._tx() as tx:
            now = tx.began
            if outcomes:
                size = length_limit(db)
                screened = screen_lengths(self.screen_outcomes(outcomes), size)
                claimed.refused += self._apply(screened, sent, now, size)
            # A lease in the past means its worker died or stalled: give the job
            # back, once; its token goes with it, so that worker's word is void.
            db.execute(
                "UPDATE jobs SET state = 0, owner = NULL, lease = NULL, token = NULL "
                "WHERE state = 1 AND lease < ?",
                (now,),
            )
            # One fresh token per cycle is enough: what fencing needs is that a
            # job's next claim (always another cycle) has another token.
            token = secrets.token_hex(8)
            for queue in queues:
                if len(claimed) >= limit:
                    break
                rows = db.execute(
                    "UPDATE jobs SET state = 1, owner = ?, lease = ?, retrying = 0, token = ? "
                    "WHERE rowid IN (SELECT rowid FROM jobs WHERE queue = ? "
                    "AND state = 0 AND due <= ? ORDER BY due, rowid LIMIT ?) "
                    "RETURNING id, queue, payload",
                    (worker, now + lease, token, queue, now, limit - len(claimed)),
                ).fetchall()
                claimed.extend(Claimed(i, q, payload, token) for i, q, payload in rows)
            # An operator's cancels of this worker's runs (a tiny table, mostly empty).
            claimed.cancel += db.execute(
                # Each cancel looks its job up: a join may read every running job
                # instead (statistics of jobs, none of the empty cancels).
                "SELECT c.id, c.token FROM cancels c WHERE c.owner = ? AND EXISTS ("
                "SELECT 1 FROM jobs j WHERE j.id = c.id AND j.token = c.token "
                "AND +j.state = 1)",
                (worker,),
            ).fetchall()
            if now - self._pruned > 5.0:
                self._pruned = now
                db.execute("DELETE FROM results WHERE expires < ?", (now,))
                db.execute("DELETE FROM uniques WHERE expires < ?", (now,))
                db.execute("DELETE FROM workers WHERE expires < ?", (now,))
                db.execute(  # cancels whose claim ended some other way
                    "DELETE FROM cancels WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE "
                    "j.id = cancels.id AND j.token = cancels.token AND +j.state = 1)"
                )
            wake = self._wakeups.after_cycle(outcomes, queues, len(claimed) >= limit, now)
        self._wakeups.signal(wake)
        return claimed

    async def wait_for_work(self, worker: str, queues: Sequence[str], timeout: float) -> None:
        await self._wakeups.wait_for_work(queues, timeout)

    def _apply(self, given: Sequence[Outcome], sent: float, now: float, limit: int) -> list[str]:
        """Apply the outcomes whose token holds (in the caller's transaction), fitting
        them in rows of at most ``limit`` bytes (:mod:`._sqlite_size`); the refused ids."""
        db = self._db
        applied: set[tuple[str, str]] = set()  # claims: a call may name a job twice
        left: list[str | None] = []  # the ordering keys of the rows that left
        for job_id, token, key in finish_done(db, given, now, limit):
            applied.add((job_id, token))
            left.append(key)
        dead = False
        for o in given:  # retries, releases and deaths are the rare outcomes: one by one
            if o.kind == "done":
                continue
            if o.kind == "dead":
                row = db.execute(
                    "DELETE FROM jobs WHERE id = ? AND state = 1 AND token = ? "
                    "RETURNING okey, payload, queue",
                    (o.id, o.token),
                ).fetchone()
                if row is None:
                    continue
                left.append(row[0])
                # Without a queue or a payload of its own, it keeps the one it was claimed with.
                queue, payload = o.queue or row[2], row[1] if o.payload is None else o.payload
                reason, trace = fit_death(
                    limit, o.reason, o.traceback, o.id, queue, payload, row[0]
                )
                db.execute(
                    "INSERT OR REPLACE INTO dead "
                    "(id, queue, payload, reason, traceback, died, okey) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (o.id, queue, payload, reason, trace, now, row[0]),
                )
                dead = True
            elif o.kind == "retry":
                cur = db.execute(
                    "UPDATE jobs SET state = 0, owner = NULL, lease = NULL, token = NULL, "
                    "retrying = 1, payload = ?, due = ? WHERE id = ? AND state = 1 AND token = ?",
                    (o.payload, _clock.on_store(o.due, sent, now), o.id, o.token),
                )
                if cur.rowcount != 1:
                    continue
            else:  # release
                cur = db.execute(
                    "UPDATE jobs SET state = 0, owner = NULL, lease = NULL, token = NULL "
                    "WHERE id = ? AND state = 1 AND token = ?",
                    (o.id, o.token),
                )
                if cur.rowcount != 1:
                    continue
            applied.add((o.id, o.token))
        if dead:
            cap_dead(db, now - self.dead_max_age, self.dead_max)
        advance(db, left)
        return [o.id for o in given if (o.id, o.token) not in applied]

    async def heartbeat(
        self, worker: WorkerInfo, held: Sequence[tuple[str, str]], lease: float, now: float
    ) -> list[str]:
        db = self._db
        renewed: set[tuple[str, str]] = set()  # claims: a call may name a job twice
        async with self._tx() as tx:
            now = tx.began
            for chunk in _chunks(held):
                where, params = _pairs(chunk)
                rows = db.execute(
                    f"UPDATE jobs SET lease = ? WHERE +state = 1 AND {where} RETURNING id, token",
                    (now + lease, *params),
                ).fetchall()
                renewed.update(rows)
            db.execute(
                "INSERT OR REPLACE INTO workers VALUES (?, ?, ?)",
                (worker.id, worker.to_json(), now + lease),
            )
        return [i for i, t in held if (i, t) not in renewed]

    async def save_progress(
        self, job_id: str, token: str, payload: str, lease: float, now: float
    ) -> bool:
        check_progress(self, job_id, payload, self._db)
        async with self._tx():
            cur = self._db.execute(
                "UPDATE jobs SET payload = ?, lease = ? WHERE id = ? AND state = 1 AND token = ?",
                (payload, _clock.store_now() + lease, job_id, token),
            )
            return cur.rowcount == 1

    async def forget_worker(self, worker_id: str) -> None:
        async with self._tx():
            self._db.execute("DELETE FROM workers WHERE id = ?", (worker_id,))

    async def keys(self, now: float, limit: int = 10) -> tuple[list[KeyInfo], list[KeyInfo]]:
        shift = now - _clock.store_now()  # store times are reported on the caller's clock
        found = await self._read(lambda: read_keys(self._db, now, shift))
        return self.rank_keys(found, limit)

    # -- reading ---------------------------------------------------------------------

    async def status(self, job_id: str, now: float) -> JobStatus:
        return (await self.statuses([job_id], now))[0]

    async def statuses(self, job_ids: Sequence[str], now: float) -> list[JobStatus]:
        return await self._read(lambda: read_statuses(self._db, job_ids, _clock.store_now()))

    async def info(self, now: float) -> Info:
        return await self._read(lambda: read_info(self._db, _clock.store_now()))

    async def dead_jobs(self, limit: int = 100) -> list[DeadJob]:
        sql = (
            "SELECT id, queue, payload, reason, traceback, died, okey FROM dead "
            "ORDER BY died DESC LIMIT ?"
        )
        rows = await self._read(lambda: self._db.execute(sql, (limit,)).fetchall())
        return [DeadJob(*row) for row in rows]

    async def retry_dead(self, ids: Sequence[str] | None, now: float) -> int:
        async with self._tx():
            moved = retry_dead(self._db, select_dead(self._db, ids), _clock.store_now())
        self._wakeups.signal(set(moved))
        return len(moved)

    async def delete_dead(self, ids: Sequence[str] | None) -> int:
        async with self._tx():
            rows = select_dead(self._db, ids)
            self._db.executemany("DELETE FROM dead WHERE id = ?", [(r[0],) for r in rows])
        return len(rows)

    # -- operating -------------------------------------------------------------------

    def describe(self) -> str:
        where = self.file
        return f"SQLite {where}"

    async def list_jobs(
        self,
        state: str,
        now: float,
        *,
        queue: str | None = None,
        key: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> tuple[list[StoredJob], str | None]:
        store_now = _clock.store_now()
        page = functools.partial(
            list_jobs, self._db, state, store_now, now - store_now, queue=queue, key=key,
            after=after, limit=limit, budget=self.page_budget, store=self,
        )  # fmt: skip
        return await self._read(page)

    async def jobs(self, job_ids: Sequence[str], now: float) -> list[StoredJob | None]:
        store_now = _clock.store_now()
        read = functools.partial(read_jobs, self._db, job_ids, store_now, now - store_now)
        return await self._read(read) if job_ids else []

    async def act(self, action: str, ids: Sequence[str], now: float) -> dict[str, str]:
        async with self._tx():
            refused, woken = act(self._db, action, ids, _clock.store_now())
        self._wakeups.signal(woken)
        return refused

    async def close(self) -> None:
        self._wakeups.close()
        self._db.close()
