"""What an operator reads and does in the SQLite store: pages of jobs, one job, actions.

Pages are keyset pages: each query seeks an index to the row after the cursor
and reads on in index order (a sort key ``(a, b)`` continues as ``a = ? AND b >
?`` then ``a > ?``, two index ranges, so many jobs sharing a due time cost no
more than one). A page reads at most ``budget`` rows per queue; where a state
is not in an index (scheduled and retrying jobs share one), the rows read are
filtered here, and a page may end short, with a cursor to go on from. The store
calls these under its lock, the actions inside its transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from ._backend import Backend
from ._records import StoredJob, cut_page, decode_cursor, merge_pages, narrowed_by
from ._sqlite_tx import BLOCKED, RUNNING, advance, chunks, entry_state

__all__ = ["act", "list_jobs", "read_jobs", "retry_dead", "select_dead"]

_JOB = "SELECT id, queue, payload, okey, state, due, retrying, owner, lease, rowid FROM jobs"
_DEAD = "SELECT id, queue, payload, okey, reason, traceback, died FROM dead"
_DONE = "SELECT id, result, expires, queue, okey, payload FROM results"
_QUEUES = "SELECT name FROM queues ORDER BY name"

Row = tuple[Any, ...]


def _job(row: Row, now: float, shift: float) -> StoredJob:
    job_id, queue, payload, key, state, due, retrying, owner, lease, _ = row
    if state == RUNNING:
        return StoredJob(job_id, queue, "running", payload, key, due + shift, owner, lease + shift)
    if state == BLOCKED:
        name = "blocked"
    elif due > now:
        name = "retrying" if retrying else "scheduled"
    else:
        name = "queued"
    return StoredJob(job_id, queue, name, payload, key, due + shift)


def _dead(row: Row, shift: float) -> StoredJob:
    job_id, queue, payload, key, reason, traceback, died = row
    return StoredJob(
        job_id, queue, "dead", payload, key, reason=reason, traceback=traceback,
        died_at=died + shift,
    )  # fmt: skip


def _done(row: Row, shift: float) -> StoredJob:
    job_id, result, expires, queue, key, payload = row
    return StoredJob(
        job_id, queue or "", "done", payload or "", key, result=result, expires=expires + shift
    )


def _seek(
    select: str,
    where: str,
    args: Sequence[Any],
    cols: tuple[str, str],
    after: list[Any] | None,
    desc: bool = False,
) -> tuple[str, list[Any]]:
    """Rows of ``select ... where`` after sort key ``after`` on ``cols``, in order; params."""
    way, op = ("DESC", "<") if desc else ("ASC", ">")
    a, b = cols
    if after is None:
        return f"{select} WHERE {where} ORDER BY {a} {way}, {b} {way}", list(args)
    return (
        f"SELECT * FROM ({select} WHERE {where} AND {a} = ? AND {b} {op} ? ORDER BY {b} {way}) "
        f"UNION ALL SELECT * FROM ({select} WHERE {where} AND {a} {op} ? "
        f"ORDER BY {a} {way}, {b} {way})",
        [*args, after[0], after[1], *args, after[0]],
    )


def list_jobs(
    db: sqlite3.Connection,
    state: str,
    now: float,
    shift: float,
    *,
    queue: str | None,
    key: str | None,
    after: str | None,
    limit: int,
    budget: int,
    store: object,
) -> tuple[list[StoredJob], str | None]:
    """A page of ``state`` (see :meth:`Backend.list_jobs`); ``now`` on the store's clock."""
    budget = max(budget, limit + 1)
    if state == "done":
        c = None if after is None else decode_cursor(after, state, 2, store)
        sql, args = _seek(_DONE, "expires >= ?", [now], ("expires", "id"), c, desc=True)
        # Results are indexed by expiry only: with a filter, read at most a budget
        # of them and filter here, so a rare queue costs one bounded read a page.
        filtered = queue is not None or key is not None
        read = budget if filtered else limit + 1
        rows = db.execute(sql + " LIMIT ?", [*args, read]).fetchall()
        found = [(_done(r, shift), [r[2], r[0]]) for r in rows]
        return cut_page(found, narrowed_by(queue, key), limit, len(rows) == read, state)
    if state == "dead":
        c = None if after is None else decode_cursor(after, state, 2, store)
        where, args = "1", []
        if queue is not None:
            where, args = where + " AND queue = ?", [*args, queue]
        if key is not None:
            where, args = where + " AND okey = ?", [*args, key]
        sql, args = _seek(_DEAD, where, args, ("died", "id"), c, desc=True)
        rows = db.execute(sql + " LIMIT ?", [*args, limit + 1]).fetchall()
        found = [(_dead(r, shift), [r[6], r[0]]) for r in rows]
        return cut_page(found, lambda j: True, limit, len(rows) > limit, state)

    def keep(job: StoredJob) -> bool:
        return job.state == state and (queue is None or job.queue == queue)

    if key is not None:  # every state of a key, in push order, through the key's index
        tag = state + "@key"
        c = None if after is None else decode_cursor(after, tag, 1, store)
        rows = db.execute(
            f"{_JOB} WHERE okey = ? AND rowid > ? ORDER BY rowid LIMIT ?",
            (key, c[0] if c else -1, budget),
        ).fetchall()
        found = [(_job(r, now, shift), [r[9]]) for r in rows]
        return cut_page(found, keep, limit, len(rows) == budget, tag)
    if state == "running":
        c = None if after is None else decode_cursor(after, state, 1, store)
        where, args = "state = 1 AND id > ?", [c[0] if c else ""]
        if queue is not None:
            where, args = where + " AND queue = ?", [*args, queue]
        # Every running job (at most the workers' concurrency) is read and sorted by
        # id: an index in the page's order would be written by every claim and
        # finish. Named: with statistics that said most jobs run, SQLite read the
        # primary key in id order and dropped every queued job before a running one.
        rows = db.execute(
            f"{_JOB} INDEXED BY jobs_lease WHERE {where} ORDER BY id LIMIT ?", [*args, limit + 1]
        ).fetchall()
        found = [(_job(r, now, shift), [r[0]]) for r in rows]
        return cut_page(found, keep, limit, len(rows) > limit, state)
    if state == "blocked":
        c = None if after is None else decode_cursor(after, state, 1, store)
        wants = budget if queue is not None else limit + 1  # all kept but of other queues
        # Blocked rows have no lease: the (state, lease) index lists them in push order.
        rows = db.execute(
            f"{_JOB} WHERE state = 2 AND lease IS NULL AND rowid > ? ORDER BY rowid LIMIT ?",
            (c[0] if c else -1, wants),
        ).fetchall()
        found = [(_job(r, now, shift), [r[9]]) for r in rows]
        return cut_page(found, keep, limit, len(rows) == wants, state)
    names = [queue] if queue is not None else [r[0] for r in db.execute(_QUEUES)]
    if state == "queued":
        return _queued(db, names, now, shift, after, limit, store)
    return _waiting(db, names, state, now, shift, after, limit, budget, keep, store)


def _queued(
    db: sqlite3.Connection,
    names: list[str],
    now: float,
    shift: float,
    after: str | None,
    limit: int,
    store: object,
) -> tuple[list[StoredJob], str | None]:
    """Queued jobs queue by queue (by name), each in claim order: ``(due, rowid)``."""
    c = None if after is None else decode_cursor(after, "queued", 3, store)
    found: list[tuple[StoredJob, list[Any]]] = []
    for name in names:
        if c is not None and name < c[0]:
            continue
        start = c[1:] if c is not None and name == c[0] else None
        where = "queue = ? AND state = 0 AND due <= ?"
        sql, args = _seek(_JOB, where, [name, now], ("due", "rowid"), start)
        rows = db.execute(sql + " LIMIT ?", [*args, limit + 1 - len(found)]).fetchall()
        found += [(_job(r, now, shift), [name, r[5], r[9]]) for r in rows]
        if len(found) > limit:
            break
    return cut_page(found, lambda j: True, limit, len(found) > limit, "queued")


def _waiting(
    db: sqlite3.Connection,
    names: list[str],
    state: str,
    now: float,
    shift: float,
    after: str | None,
    limit: int,
    budget: int,
    keep: Callable[[StoredJob], bool],
    store: object,
) -> tuple[list[StoredJob], str | None]:
    """Scheduled or retrying jobs of all ``names`` by due time: each queue's read merged."""
    c = None if after is None else decode_cursor(after, state, 2, store)
    parts = []
    for name in names:
        # A page's worth at a time, until the queue has a page of its own or is
        # done, or ``budget`` rows were read (scheduled and retrying interleave).
        found: list[tuple[StoredJob, list[Any]]] = []
        start, kept, cut = c, 0, False
        while True:
            where = "queue = ? AND state = 0 AND due > ?"
            sql, args = _seek(_JOB, where, [name, now], ("due", "rowid"), start)
            rows = db.execute(sql + " LIMIT ?", [*args, limit + 1]).fetchall()
            read = [(_job(r, now, shift), [r[5], r[9]]) for r in rows]
            found += read
            kept += sum(1 for j, _ in read if keep(j))
            cut = len(rows) == limit + 1
            if not cut or kept > limit or len(found) >= budget:
                break
            start = found[-1][1]
        parts.append((found, cut))
    return merge_pages(parts, keep, limit, state)


def read_jobs(
    db: sqlite3.Connection, job_ids: Sequence[str], now: float, shift: float
) -> list[StoredJob | None]:
    """Each job's record wherever it is (waiting or running, dead, done), or None: three
    statements per :func:`chunks` of ids, each reading its table by primary key."""
    found: dict[str, StoredJob] = {}
    for chunk in chunks(list(dict.fromkeys(job_ids))):
        marks = ",".join("?" * len(chunk))
        # Read last what status() looks at first: a live job over a dead one (its id
        # enqueued anew), a dead one over a kept result.
        for row in db.execute(f"{_DONE} WHERE id IN ({marks}) AND expires >= ?", (*chunk, now)):
            found[row[0]] = _done(row, shift)
        for row in db.execute(f"{_DEAD} WHERE id IN ({marks})", tuple(chunk)):
            found[row[0]] = _dead(row, shift)
        for row in db.execute(f"{_JOB} WHERE id IN ({marks})", tuple(chunk)):
            found[row[0]] = _job(row, now, shift)
    return [found.get(job_id) for job_id in job_ids]


def select_dead(
    db: sqlite3.Connection, ids: Sequence[str] | None
) -> list[tuple[str, str, str, str | None]]:
    """``(id, queue, payload, key)`` of the dead jobs ``ids`` (all when None)."""
    if ids is None:
        return db.execute("SELECT id, queue, payload, okey FROM dead").fetchall()
    rows: list[tuple[str, str, str, str | None]] = []
    for chunk in chunks(list(ids)):
        marks = ",".join("?" * len(chunk))
        rows += db.execute(
            f"SELECT id, queue, payload, okey FROM dead WHERE id IN ({marks})", tuple(chunk)
        ).fetchall()
    return rows


def retry_dead(
    db: sqlite3.Connection, rows: Sequence[tuple[str, str, str, str | None]], now: float
) -> list[str]:
    """Put the dead jobs ``rows`` (from :func:`select_dead`) back on their queues, due now;
    the queues of those moved. One whose id is a live job's again (enqueued anew) stays dead:
    the live job is not replaced."""
    queues = []
    for job_id, queue, payload, key in rows:
        if db.execute("SELECT 1 FROM jobs WHERE id = ?", (job_id,)).fetchone() is not None:
            continue
        db.execute("DELETE FROM dead WHERE id = ?", (job_id,))
        db.execute(
            "INSERT INTO jobs (id, queue, payload, due, okey, state) VALUES (?, ?, ?, ?, ?, ?)",
            (job_id, queue, payload, now, key, entry_state(db, key)),
        )
        queues.append(queue)
    return queues


def act(
    db: sqlite3.Connection, action: str, ids: Sequence[str], now: float
) -> tuple[dict[str, str], set[str]]:
    """Apply ``action`` to all ``ids`` or none (see :meth:`Backend.act`), in the caller's
    transaction: the refused ids with their states, and the queues to wake."""
    states: dict[str, str] = {}
    queues: dict[str, str] = {}
    dead: set[str] = set()
    done: set[str] = set()  # with a kept result
    for chunk in chunks(list(ids)):
        marks = ",".join("?" * len(chunk))
        for row in db.execute(f"{_JOB} WHERE id IN ({marks})", tuple(chunk)):
            states[row[0]], queues[row[0]] = _job(row, now, 0.0).state, row[1]
        dead.update(r[0] for r in db.execute(f"SELECT id FROM dead WHERE id IN ({marks})", chunk))
        done.update(
            r[0]
            for r in db.execute(
                f"SELECT id FROM results WHERE id IN ({marks}) AND expires >= ?", (*chunk, now)
            )
        )
    refused = Backend.refusals(states, action, ids, dead, done)
    if refused:
        return refused, set()
    woken = {queues[i] for i in ids if i in queues}
    for chunk in chunks(list(ids)):
        marks = ",".join("?" * len(chunk))
        if action == "delete":
            sql = f"DELETE FROM jobs WHERE id IN ({marks}) RETURNING okey"
            advance(db, [r[0] for r in db.execute(sql, tuple(chunk))])  # a head may have left
        elif action == "run_now":
            db.execute(f"UPDATE jobs SET due = ? WHERE id IN ({marks})", (now, *chunk))
        elif action == "cancel":
            db.execute(
                f"INSERT OR REPLACE INTO cancels SELECT id, owner, token FROM jobs "
                f"WHERE id IN ({marks})",
                tuple(chunk),
            )
        elif action == "delete_dead":
            db.execute(f"DELETE FROM dead WHERE id IN ({marks})", tuple(chunk))
    if action == "retry_dead":
        rows = select_dead(db, ids)
        retry_dead(db, rows, now)
        woken = {r[1] for r in rows}
    return {}, woken
