"""The one SQL statement with which the SQL stores (SQLite, PostgreSQL) read many jobs' statuses."""

from __future__ import annotations

__all__ = ["status_select"]


def status_select(now: str, ids: str, tables: str = "") -> str:
    """A query of ``(id, state, result, reason)`` rows, one per id: the fields of a
    :class:`~batchy.jobs.JobStatus`, in order.

    ``now`` is SQL for the store's time, ``ids`` a query of the ids (one column),
    ``tables`` what comes before each table's name (a schema: ``"jobs".``). Every
    table is read by its primary key, once per id. Both stores keep the same
    tables for this: ``jobs`` (state 1: running), ``dead`` and ``results``.
    """
    return (
        f"WITH c(t) AS (SELECT {now}), w(id) AS ({ids}) "
        # A live job first (its id may be a dead or done job's again), then a dead
        # one, then a kept result: the order of status().
        "SELECT id, state, CASE state WHEN 'done' THEN result END, "
        "CASE state WHEN 'dead' THEN reason ELSE '' END FROM (SELECT w.id AS id, CASE "
        "WHEN j.state = 1 THEN 'running' WHEN j.due > c.t AND j.retrying THEN 'retrying' "
        "WHEN j.due > c.t THEN 'scheduled' WHEN j.id IS NOT NULL THEN 'queued' "
        "WHEN d.id IS NOT NULL THEN 'dead' WHEN r.id IS NOT NULL THEN 'done' "
        "ELSE 'unknown' END AS state, d.reason AS reason, r.result AS result "
        f"FROM c CROSS JOIN w LEFT JOIN {tables}jobs AS j ON j.id = w.id "
        f"LEFT JOIN {tables}dead AS d ON d.id = w.id "
        f"LEFT JOIN {tables}results AS r ON r.id = w.id AND r.expires >= c.t) AS found"
    )
