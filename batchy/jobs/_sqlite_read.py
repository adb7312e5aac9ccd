"""Reading the SQLite store for people: where a job is, ``batchy info``'s counts, ordering keys.

Nothing here changes a job; the store calls these under its lock.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ._backend import Backend
from ._model import Info, JobStatus, KeyInfo, QueueInfo, WorkerInfo
from ._sqlite_tx import RUNNING, chunks
from ._status_sql import status_select

__all__ = ["read_info", "read_keys", "read_statuses"]


def read_statuses(db: sqlite3.Connection, job_ids: Sequence[str], now: float) -> list[JobStatus]:
    """Where each job is at ``now`` (the store's clock), with its result when kept.

    One statement per :func:`chunks` of ids, each table read by primary key, so
    ``result()``'s waiters cost the store one read per poll however many they are.
    """
    found: dict[str, JobStatus] = {}
    for chunk in chunks(list(dict.fromkeys(job_ids))):
        query = status_select("?", "VALUES " + ",".join(["(?)"] * len(chunk)))
        for row in db.execute(query, (now, *chunk)):
            found[row[0]] = JobStatus(*row)
    return [found[job_id] for job_id in job_ids]


def read_info(db: sqlite3.Connection, now: float) -> Info:
    """Counts per queue, the dead set's size and the live workers at ``now``."""
    names = [r[0] for r in db.execute("SELECT name FROM queues ORDER BY name")]
    queues = []
    for name in names:
        size, oldest = db.execute(
            "SELECT count(*), min(due) FROM jobs WHERE queue = ? AND state = 0 AND due <= ?",
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
    workers = Backend.with_running(
        (
            WorkerInfo.from_json(r[0])
            for r in db.execute("SELECT info FROM workers WHERE expires >= ? ORDER BY id", (now,))
        ),
        # The jobs each worker holds now: its heartbeat's list may be seconds old.
        db.execute("SELECT owner, id FROM jobs WHERE state = 1"),
    )
    return Info(tuple(queues), dead, workers)


def read_keys(db: sqlite3.Connection, now: float, shift: float) -> list[KeyInfo]:
    """Every ordering key with jobs, its head's state on the caller's clock (``now``)."""
    # An operator's view, so it may read every key; no claim ever does this.
    rows = db.execute(
        "SELECT k.okey, k.n, j.id, j.queue, j.state, j.due, j.retrying, j.lease "
        "FROM (SELECT okey, count(*) AS n, min(rowid) AS head FROM jobs "
        "WHERE okey IS NOT NULL GROUP BY okey) AS k JOIN jobs AS j ON j.rowid = k.head"
    ).fetchall()
    return [
        KeyInfo.of_head(
            key,
            queue,
            n,
            head,
            running=state == RUNNING,
            lease=(lease or 0.0) + shift,
            due=due + shift,
            retrying=bool(retrying),
            now=now,
        )
        for key, n, head, queue, state, due, retrying, lease in rows
    ]
