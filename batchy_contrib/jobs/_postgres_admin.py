"""What an operator reads and does in the PostgreSQL job store: job pages, actions, the dead set.

Pages are keyset pages on the store's indexes: each query seeks to the row after
the cursor with a row comparison (``(due, seq) > (%s, %s)``, an index condition
on ``jobs_ready``) and reads on in index order, so page 2 of a million queued
jobs reads as few rows as page 1. Scheduled and retrying jobs share the ready
index: a page reads at most ``page_budget`` rows of each queue, filters them
here, and may end short with a cursor to go on from. Blocked jobs have a
partial index of their own (``jobs_blocked``, in push order), which a page of
one queue reads at most ``page_budget`` rows of; dead and done jobs are read
newest first on ``dead_died_id`` and ``results_expires_id``, whose second
column (id) makes the cursor's whole sort key an index condition, however many
jobs share its time. Running jobs have no index in their page's order (by id):
every claim and every finish would write one more index entry, a tax on each
job for a dashboard's page. A page of them reads every running job (at most the
workers' concurrency) through ``jobs_lease`` and sorts them, whatever the
statistics say (see ``_running``), never the queued backlog.

An action is one transaction: it locks the rows of its ids (``FOR UPDATE``, so a
claim skips them), checks every job's state, and changes all of them or none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from batchy.jobs import Backend, DeadJob, JobStateError, StoredJob

from ._postgres_read import by_id, indexed
from ._postgres_schema import Names
from ._postgres_sql import KEY_WAIT, KEY_WAIT_SECONDS

__all__ = ["PostgresOperating"]

Conn = psycopg.AsyncConnection[Any]
Row = tuple[Any, ...]

_JOB_COLUMNS = [
    "id",
    "queue",
    "payload",
    "okey",
    "state",
    "due",
    "retrying",
    "owner",
    "lease",
    "seq",
]
_DEAD_COLUMNS = ["id", "queue", "payload", "okey", "reason", "traceback", "died"]
_DONE_COLUMNS = ["id", "result", "expires", "queue", "okey", "payload"]
_JOB = f"SELECT {', '.join(_JOB_COLUMNS)} FROM {{s}}.jobs"
_DEAD = f"SELECT {', '.join(_DEAD_COLUMNS)} FROM {{s}}.dead"
_DONE = f"SELECT {', '.join(_DONE_COLUMNS)} FROM {{s}}.results"
# Many jobs' records in one statement: one row per id, with the columns of each
# table (NULL where it has no such id), each table read by its primary key.
_RECORDS = (
    "WITH c(t) AS (SELECT {s}.clock()), w(id) AS (SELECT unnest(%s::text[])) SELECT w.id, c.t, "
    + ", ".join(
        f"{alias}.{column}"
        for alias, columns in (("j", _JOB_COLUMNS), ("d", _DEAD_COLUMNS), ("r", _DONE_COLUMNS))
        for column in columns
    )
    + " FROM c CROSS JOIN w LEFT JOIN {s}.jobs AS j ON j.id = w.id "
    "LEFT JOIN {s}.dead AS d ON d.id = w.id "
    "LEFT JOIN {s}.results AS r ON r.id = w.id AND r.expires >= c.t"
)


def _job(row: Row, now: float, shift: float) -> StoredJob:
    job_id, queue, payload, key, state, due, retrying, owner, lease, _ = row
    if state == 1:
        return StoredJob(job_id, queue, "running", payload, key, due + shift, owner, lease + shift)
    if state == 2:
        name = "blocked"
    elif due > now:
        name = "retrying" if retrying else "scheduled"
    else:
        name = "queued"
    return StoredJob(job_id, queue, name, payload or "", key, due + shift)


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


def _record(row: Row, now: float) -> StoredJob | None:
    """The record in one row of ``_RECORDS``: a live job over a dead one (its id enqueued
    anew), a dead one over a kept result, as ``status()`` reads them."""
    t, shift = row[1], now - row[1]  # the store's times are reported on the caller's clock
    live, rest = row[2 : 2 + len(_JOB_COLUMNS)], row[2 + len(_JOB_COLUMNS) :]
    dead, done = rest[: len(_DEAD_COLUMNS)], rest[len(_DEAD_COLUMNS) :]
    if live[0] is not None:
        return _job(live, t, shift)
    if dead[0] is not None:
        return _dead(dead, shift)
    return _done(done, shift) if done[0] is not None else None


async def _rows(conn: Conn, sql: str, params: Sequence[Any]) -> list[Row]:
    rows: list[Row] = await (await conn.execute(sql, params)).fetchall()
    return rows


class PostgresOperating:
    """The operating methods of :class:`PostgresBackend` (a mixin: see the module's docstring)."""

    names: Names
    #: Rows a page reads at most per queue beyond the page.
    page_budget = 500

    async def pool(self) -> AsyncConnectionPool[Any]:
        raise NotImplementedError  # the store's own

    # -- the dead set --------------------------------------------------------------------

    async def _dead_rows(self, sql: str, params: Sequence[Any]) -> list[Row]:
        async with (await self.pool()).connection() as conn:
            return await _rows(conn, self.names.sql(sql), params)

    async def dead_jobs(self, limit: int = 100) -> list[DeadJob]:
        rows = await self._dead_rows(
            "SELECT id, queue, payload, reason, traceback, died, okey FROM {s}.dead "
            "ORDER BY died DESC LIMIT %s",
            (limit,),
        )
        return [DeadJob(*row) for row in rows]

    async def retry_dead(self, ids: Sequence[str] | None, now: float) -> int:
        chosen = None if ids is None else list(ids)
        try:
            ((moved,),) = await self._dead_rows("SELECT {s}.retry_dead(%s::text[])", (chosen,))
        except psycopg.errors.LockNotAvailable as error:
            raise JobStateError(_held("retry", chosen)) from error
        return int(moved or 0)

    async def delete_dead(self, ids: Sequence[str] | None) -> int:
        chosen = None if ids is None else list(ids)
        rows = await self._dead_rows(
            "DELETE FROM {s}.dead WHERE %s::text[] IS NULL OR id = ANY(%s::text[]) RETURNING 1",
            (chosen, chosen),
        )
        return len(rows)

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
        pool = await self.pool()
        running = state == "running" and key is None
        async with indexed(pool) if running else pool.connection() as conn:  # see _running
            (t,) = (await _rows(conn, self.names.sql("SELECT {s}.clock()"), ()))[0]
            if running:
                return await self._running(conn, t, now - t, queue, after, limit)
            return await self._list(conn, state, t, now - t, queue, key, after, limit)

    async def _running(
        self, conn: Conn, t: float, shift: float, queue: str | None, after: str | None, limit: int
    ) -> tuple[list[StoredJob], str | None]:
        """A page of running jobs by id: all of them (of ``queue``) read, sorted here.

        Read through ``jobs_lease`` whatever the statistics: the CTE has no order for
        the primary key to offer, and ``conn`` plans without sequential scans. With
        statistics that said most jobs run, ``ORDER BY id LIMIT`` read the primary
        key in id order and dropped every queued job before the running ones (20,000
        rows for a page of 50), and the CTE alone was planned as a scan of the table.
        """
        c = None if after is None else Backend.read_cursor(after, "running", 1, self)
        where, args = "state = 1 AND id > %s", [c[0] if c else ""]
        if queue is not None:
            where, args = where + " AND queue = %s", [*args, queue]
        sql = self.names.sql(
            f"WITH r AS MATERIALIZED ({_JOB} WHERE {where}) SELECT * FROM r ORDER BY id LIMIT %s"
        )
        rows = await _rows(conn, sql, [*args, limit + 1])
        found = [(_job(r, t, shift), [r[0]]) for r in rows]
        return Backend.cut_page(found, lambda j: True, limit, len(rows) > limit, "running")

    async def _list(
        self,
        conn: Conn,
        state: str,
        t: float,
        shift: float,
        queue: str | None,
        key: str | None,
        after: str | None,
        limit: int,
    ) -> tuple[list[StoredJob], str | None]:
        s = self.names.sql
        budget = max(self.page_budget, limit + 1)
        tag = state + "@key" if key is not None and state not in ("dead", "done") else state
        size = {"queued": 3, "running": 1, "blocked": 1}.get(state, 2) if tag == state else 1
        c = None if after is None else Backend.read_cursor(after, tag, size, self)

        def keep(job: StoredJob) -> bool:
            return job.state == state and (queue is None or job.queue == queue)

        if state == "done":
            where = "expires >= %s" + (" AND (expires, id) < (%s, %s)" if c else "")
            sql = s(f"{_DONE} WHERE {where} ORDER BY expires DESC, id DESC LIMIT %s")
            # Results are indexed by expiry only: with a filter, read at most a
            # budget of them and filter here (a page may end short, with a cursor).
            wants = budget if queue is not None or key is not None else limit + 1
            rows = await _rows(conn, sql, [t, *(c or ()), wants])
            found = [(_done(r, shift), [r[2], r[0]]) for r in rows]
            wanted = Backend.narrowed_by(queue, key)
            return Backend.cut_page(found, wanted, limit, len(rows) == wants, state)
        if state == "dead":
            conds: list[str] = ["true"]
            values: list[Any] = []
            for column, value in (("queue", queue), ("okey", key)):
                if value is not None:
                    conds, values = [*conds, f"{column} = %s"], [*values, value]
            if c:
                conds, values = [*conds, "(died, id) < (%s, %s)"], [*values, *c]
            sql = s(f"{_DEAD} WHERE {' AND '.join(conds)} ORDER BY died DESC, id DESC LIMIT %s")
            rows = await _rows(conn, sql, [*values, limit + 1])
            found = [(_dead(r, shift), [r[6], r[0]]) for r in rows]
            return Backend.cut_page(found, lambda j: True, limit, False, state)
        if key is not None or state == "blocked":
            if key is not None:  # every state of one key, in push order (jobs_okey)
                where, args = "okey = %s AND seq > %s", [key, c[0] if c else -1]
            else:
                where, args = "state = 2 AND seq > %s", [c[0] if c else -1]
            sql = s(f"{_JOB} WHERE {where} ORDER BY seq LIMIT %s")
            # Every blocked job read is kept unless a queue narrows the page (a key's
            # read has every state): a page and one more row then do.
            wants = budget if key is not None or queue is not None else limit + 1
            rows = await _rows(conn, sql, [*args, wants])
            found = [(_job(r, t, shift), [r[9]]) for r in rows]
            return Backend.cut_page(found, keep, limit, len(rows) == wants, tag)
        names = [queue] if queue is not None else [
            r[0] for r in await _rows(conn, s("SELECT name FROM {s}.queues ORDER BY name"), ())
        ]  # fmt: skip
        if state == "queued":
            return await self._queued(conn, names, t, shift, c, limit)
        parts = []
        for name in names:
            # A page's worth at a time, until the queue has a page of its own or is
            # done, or ``budget`` rows were read (scheduled and retrying interleave).
            got: list[tuple[StoredJob, list[Any]]] = []
            start, kept, cut = c, 0, False
            while True:
                where = "queue = %s AND state = 0 AND due > %s"
                where += " AND (due, seq) > (%s, %s)" if start else ""
                sql = s(f"{_JOB} WHERE {where} ORDER BY due, seq LIMIT %s")
                rows = await _rows(conn, sql, [name, t, *(start or ()), limit + 1])
                read = [(_job(r, t, shift), [r[5], r[9]]) for r in rows]
                got += read
                kept += sum(1 for j, _ in read if keep(j))
                cut = len(rows) == limit + 1
                if not cut or kept > limit or len(got) >= budget:
                    break
                start = got[-1][1]
            parts.append((got, cut))
        return Backend.merge_pages(parts, keep, limit, state)

    async def _queued(
        self, conn: Conn, names: list[str], t: float, shift: float, c: Any, limit: int
    ) -> tuple[list[StoredJob], str | None]:
        """Queued jobs queue by queue (by name), each in claim order ``(due, seq)``."""
        found: list[tuple[StoredJob, list[Any]]] = []
        for name in names:
            if c is not None and name < c[0]:
                continue
            start = c[1:] if c is not None and name == c[0] else None
            where = "queue = %s AND state = 0 AND due <= %s"
            where += " AND (due, seq) > (%s, %s)" if start else ""
            sql = self.names.sql(f"{_JOB} WHERE {where} ORDER BY due, seq LIMIT %s")
            rows = await _rows(conn, sql, [name, t, *(start or ()), limit + 1 - len(found)])
            found += [(_job(r, t, shift), [name, r[5], r[9]]) for r in rows]
            if len(found) > limit:
                break
        return Backend.cut_page(found, lambda j: True, limit, False, "queued")

    async def jobs(self, job_ids: Sequence[str], now: float) -> list[StoredJob | None]:
        if not job_ids:
            return []  # (no round trip for nothing)
        async with by_id(await self.pool()) as conn:
            rows = await _rows(conn, self.names.sql(_RECORDS), [list(dict.fromkeys(job_ids))])
        found = {row[0]: _record(row, now) for row in rows}
        return [found[job_id] for job_id in job_ids]

    async def act(self, action: str, ids: Sequence[str], now: float) -> dict[str, str]:
        chosen = list(ids)
        try:
            return await self._act(action, chosen)
        except psycopg.errors.LockNotAvailable as error:
            raise JobStateError(_held(action, chosen)) from error

    async def _act(self, action: str, chosen: list[str]) -> dict[str, str]:
        s = self.names.sql
        async with (await self.pool()).connection() as conn, conn.transaction():
            # An application's open transaction may hold a key (or a row) for long:
            # the operator hears so after KEY_WAIT rather than waiting for ever.
            await conn.execute("SELECT set_config('lock_timeout', %s, true)", (KEY_WAIT[1:-1],))
            (t,) = (await _rows(conn, s("SELECT {s}.clock()"), ()))[0]
            # Ordering keys first, as every step does (see lock_keys), then the rows.
            await conn.execute(
                s("SELECT {s}.lock_keys(ARRAY(SELECT okey FROM {s}.jobs WHERE id = ANY(%s) "
                  "UNION SELECT okey FROM {s}.dead WHERE id = ANY(%s)))"),
                (chosen, chosen),
            )  # fmt: skip
            rows = await _rows(conn, s(f"{_JOB} WHERE id = ANY(%s) FOR UPDATE"), [chosen])
            states = {r[0]: _job(r, t, 0.0).state for r in rows}
            queues = {r[0]: r[1] for r in rows}
            dead = await _rows(conn, s("SELECT id FROM {s}.dead WHERE id = ANY(%s)"), [chosen])
            done = await _rows(
                conn, s("SELECT id FROM {s}.results WHERE id = ANY(%s) AND expires >= %s"),
                [chosen, t],
            )  # fmt: skip
            refused = Backend.refusals(
                states, action, chosen, {i for (i,) in dead}, {i for (i,) in done}
            )
            if refused:
                return refused
            await self._apply(conn, action, chosen, t, {queues[i] for i in chosen if i in queues})
        return {}

    async def _apply(
        self, conn: Conn, action: str, ids: list[str], t: float, queues: set[str]
    ) -> None:
        s = self.names.sql
        if action == "delete":
            keys = await _rows(
                conn, s("DELETE FROM {s}.jobs WHERE id = ANY(%s) RETURNING okey"), [ids]
            )
            gone = [k for (k,) in keys if k is not None]
            if gone:  # a key's head left: its next job becomes the head
                await conn.execute(s("SELECT {s}.advance(%s::text[], %s)"), (gone, t))
        elif action == "run_now":
            await conn.execute(s("UPDATE {s}.jobs SET due = %s WHERE id = ANY(%s)"), (t, ids))
            for queue in sorted(queues):
                await conn.execute(s("SELECT {s}.wake(%s, false)"), (queue,))
        elif action == "cancel":
            await conn.execute(
                s("INSERT INTO {s}.cancels SELECT id, owner, token FROM {s}.jobs "
                  "WHERE id = ANY(%s) ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, "
                  "token = excluded.token"),
                (ids,),
            )  # fmt: skip
        elif action == "retry_dead":
            await conn.execute(s("SELECT {s}.retry_dead(%s::text[])"), (ids,))
        elif action == "delete_dead":
            await conn.execute(s("DELETE FROM {s}.dead WHERE id = ANY(%s)"), (ids,))


def _held(action: str, ids: Sequence[str] | None) -> str:
    which = "the dead jobs" if ids is None else f"job(s) {', '.join(ids[:5])}"
    return (
        f"cannot {action.replace('_', ' ')} {which}: an ordering key of theirs (or their row) "
        f"stayed held by another open transaction for {KEY_WAIT_SECONDS} s, an application's "
        "that enqueued a job with that key, most likely; nothing changed. Try again once it "
        "has ended"
    )
