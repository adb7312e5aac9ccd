"""Reading the SQLite store for people: where a job is, and the counts ``batchy info`` shows.

Nothing here changes a job; the store calls these under its lock.
"""

from __future__ import annotations

import sqlite3

from ._model import Info, JobStatus, QueueInfo, WorkerInfo
from ._sqlite_tx import RUNNING

__all__ = ["read_info", "read_status"]


def read_status(db: sqlite3.Connection, job_id: str, now: float) -> JobStatus:
    """Where the job is at ``now`` (the store's clock), with its result when kept."""
    row = db.execute("SELECT state, due, retrying FROM jobs WHERE id = ?", (job_id,)).fetchone()
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
    workers = tuple(
        WorkerInfo.from_json(r[0])
        for r in db.execute("SELECT info FROM workers WHERE expires >= ? ORDER BY id", (now,))
    )
    return Info(tuple(queues), dead, workers)
