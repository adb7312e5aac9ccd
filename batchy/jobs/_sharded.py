"""Sharded jobs: a keyspace cut into N shards, each a leased job that saves its cursor per batch.

::

    @queue.sharded(shards=8)
    async def mark_processed(shard: int, shards: int, cursor: int | None) -> int | None:
        rows = await orders_after(shard, shards, cursor or 0)   # e.g. id % shards = shard
        if not rows:
            return None                                          # this shard is finished
        await mark(rows)
        return rows[-1]["id"]                                    # the cursor to resume from

    await mark_processed.start("2024-06")    # one job per shard; workers anywhere run them

Each shard is an ordinary job with a fixed id (``name:run:shard``), so it is
claimed by one worker at a time under a lease that the worker's heartbeat renews
while it lives: no fixed timeout to guess (too short: two owners; too long: a
dead shard waits). The handler is called once per batch; after each batch the
new cursor is written into the job's payload with :meth:`Backend.save_progress`,
which carries the claim's lease token and is applied only while that token
holds. So a worker that dies loses at most the batch in hand: the lease expires,
another worker claims the shard and resumes from the saved cursor. A worker that
finds its lease gone stops (:class:`LeaseLost`; the worker logs the loss once)
and its stale cursor is never written over the new owner's.

A run is done when every shard's job is done (results are kept ``keep_result``
seconds, a week by default). Starting a run whose shards are still in the store
does nothing; starting it again once done runs it again from the start. The
store remembers each run's start for as long (:meth:`Backend.note_run`), so
``queue.admin.runs(job)``, ``batchy info`` and the dashboard list the runs
without scanning the jobs. Starts of one run at the same moment, in any
processes, start it once: each start's pushes carry unique keys named after the
run's last recorded start (see ``ShardedJob._start_key``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import batchy

from . import _clock
from ._errors import JobDefinitionError, LeaseLost, SerializationError, TextError
from ._guard import guard
from ._job import JobType
from ._model import Envelope, JobStatus, Message, encode
from ._retry import DEFAULT_RETRIES, Backoff, sidekiq_backoff
from ._screen import check_lookup
from ._serializer import JSONSerializer, key_not_text

if TYPE_CHECKING:
    from ._handle import Running
    from ._job import Owner

__all__ = ["ShardedJob"]

#: Results of finished shards are kept a week, so a run's status stays known.
SHARD_KEEP = 7 * 24 * 3600.0
#: Seconds a start's unique keys are held: far past the reads and push of a
#: start, far below a run's remembering (see ShardedJob._start_key).
START_TTL = 3600.0


class ShardedJob:
    """A job type over ``shards`` shards, declared with :meth:`Queue.sharded`.

    The handler (a generator or ``async def``, so a batchy handler: its loads
    batch) takes ``(shard, shards, cursor)``, processes one batch after
    ``cursor`` (``None`` at the start) and returns the next cursor (any JSON
    value), or ``None`` once its shard is finished.
    """

    def __init__(
        self,
        owner: Owner,
        fn: Callable[[int, int, Any], Any],
        *,
        shards: int,
        name: str | None = None,
        queue: str | None = None,
        retries: int = DEFAULT_RETRIES,
        backoff: Backoff = sidekiq_backoff,
        keep_result: float = SHARD_KEEP,
    ) -> None:
        label = name or f"{fn.__module__}.{getattr(fn, '__qualname__', repr(fn))}"
        if type(shards) is not int or shards < 1:
            raise JobDefinitionError(
                f"sharded job {label!r}: shards={shards!r} must be an int >= 1 (how many "
                "parts the keyspace is cut into, e.g. shards=16 for id % 16)"
            )
        self.queue = owner
        self.shards = shards
        self.name = label
        self.handler: batchy.TaskFunction[[int, int, Any], Any] = batchy.task(fn)
        self._guarded: batchy.TaskFunction[[int, int, Any], Any] = batchy.task(guard(fn))
        self.job: JobType[..., Any] = JobType(
            owner,
            self._run_shard,
            name=label,
            queue=queue,
            retries=retries,
            backoff=backoff,
            keep_result=keep_result,
        )
        self.job.takes_running = True

    def __repr__(self) -> str:
        return f"<batchy.jobs.ShardedJob {self.name} shards={self.shards}>"

    @property
    def remembered(self) -> float:
        """Seconds the store lists a run after its start: its results' keep, at least a week."""
        return max(self.job.keep_result, SHARD_KEEP)

    def shard_id(self, run: str, shard: int) -> str:
        """The job id of one shard of one run (:class:`TextError` for a run no id can hold)."""
        self._check_run(run)
        return f"{self.name}:{run}:{shard}"

    def _check_run(self, run: str) -> None:
        where = f"sharded job {self.name!r} run {batchy.short_repr(run)}"
        check_lookup(run, "run name", where, "name runs with text a job id can hold")

    def __call__(self, shard: int, shards: int, cursor: Any) -> batchy.Task[Any]:
        """Run one batch here and now (as a batchy task), without the queue."""
        return self.handler(shard, shards, cursor)

    async def start(self, run: str = "default", *, cursor: Any = None) -> int:
        """Enqueue every shard of ``run``; how many were enqueued (0: it is still going,
        or another process started it at the same moment)."""
        backend = self.queue.backend
        self._check_run(run)  # (the shards' ids hold it; asked, PostgreSQL would fail first)
        # Read before the shards: see _start_key. Then the shards' states, read
        # after it, are at least as new as the start it names.
        last = await backend.run_started(self.name, run)
        # Going while any shard is queued, running or dead (a dead one resumes from
        # its cursor with `batchy dead retry`); a push alone would see only the
        # shards still queued or running, and run the finished ones again.
        if any(s.state not in ("done", "unknown") for s in await self.status(run)):
            return 0
        now = _clock.now()
        envelopes = []
        for shard in range(self.shards):
            message = Message(
                self.shard_id(run, shard), self.job.queue_name, self.name, [run, shard, cursor], {}
            )
            self.queue._announce(message)  # before encoding: hooks may write headers
            payload = encode(message, self.queue.serializer)
            unique = self._start_key(run, last, shard)
            envelopes.append(
                Envelope(message.id, message.queue, payload, unique=unique, unique_ttl=START_TTL)
            )
        started = sum(await backend.push(envelopes, now))
        # Listed by Admin.runs while its shards' results are kept; read by the next start.
        if started:
            await backend.note_run(self.name, run, now, self.remembered)
        return started

    def _start_key(self, run: str, last: float | None, shard: int) -> str:
        # Two starts that read the same last start are one start: their pushes
        # carry the same unique keys, so the store keeps the first and skips the
        # other, atomically in every store (a read of every shard, then a push,
        # is not: a shard the first start pushed and a worker finished since
        # read "done" to the second, which pushed it again). A start that lands
        # records itself (note_run) and the next start reads that, so a finished
        # run starts again. The key need outlive only the time from the read to
        # the push, and the push to the record; shorter than a run is remembered,
        # so a run forgotten and started again (read None again) is not refused.
        # (Starts whose reads fall either side of the record's forgetting read
        # different names: that moment, a week on, is not covered.)
        after = "never" if last is None else repr(last)
        return f"sharded:{self.name}:{run}:{after}:{shard}"

    async def status(self, run: str = "default") -> list[JobStatus]:
        """Each shard's status (``done`` once finished, until its result expires)."""
        # One read of all of them: wait() reads them every 0.1 s.
        ids = [self.shard_id(run, s) for s in range(self.shards)]
        return await self.queue.backend.statuses(ids, _clock.now())

    async def done(self, run: str = "default") -> bool:
        """True once every shard of ``run`` has finished."""
        return all(s.state == "done" for s in await self.status(run))

    async def wait(self, run: str = "default", *, timeout: float = 3600.0) -> None:
        """Wait until ``run`` is done; :class:`TimeoutError` naming the unfinished shards."""
        deadline = time.monotonic() + timeout
        while True:
            states = await self.status(run)
            if all(s.state == "done" for s in states):
                return
            if time.monotonic() > deadline:
                left = {i: s.state for i, s in enumerate(states) if s.state != "done"}
                raise TimeoutError(
                    f"sharded job {self.name!r} run {run!r} not done after {timeout}s; "
                    f"unfinished shards: {left} (are workers running? `batchy info`)"
                )
            await asyncio.sleep(0.1)

    def _check_cursor(self, run: str, shard: int, cursor: Any) -> None:
        # Checked before it is saved: a retry then resumes from the last cursor
        # that JSON keeps as it is, not from one whose keys came back as text.
        where = None
        if type(self.queue.serializer) is JSONSerializer:
            where = key_not_text(cursor, "the cursor")
        if where is not None:
            raise SerializationError(
                f"sharded job {self.name!r} run {run!r} shard {shard}: the handler returned "
                f"the cursor {cursor!r}, and {where}; JSON keeps only text keys, so a resumed "
                "shard would get it as a str. Return a cursor with str keys, or a list"
            )

    async def _run_shard(self, running: Running, run: str, shard: int, cursor: Any) -> Any:
        message = running.message
        batches = 0
        while True:
            after = await self._guarded(shard, self.shards, cursor)
            if after is None:
                return {"run": run, "shard": shard, "batches": batches}
            if after == cursor:
                raise JobDefinitionError(
                    f"sharded job {self.name!r} run {run!r} shard {shard}: the handler "
                    f"returned the cursor it was given ({cursor!r}), so it would loop "
                    "forever; return the last key it processed, or None when the shard is done"
                )
            self._check_cursor(run, shard, after)
            message.args[2] = after  # a retry resumes from here too
            try:
                payload = encode(message, self.queue.serializer)
                # In a task of its own: batchy steps handlers outside any asyncio task,
                # and store clients (redis-py's timeouts) need one.
                saved = await asyncio.ensure_future(
                    self.queue.backend.save_progress(
                        message.id, running.token, payload, running.lease, _clock.now()
                    )
                )
            except (SerializationError, TextError):
                # A cursor no payload holds, or none a store keeps: the retry carries
                # the last one saved (its own payload must be kept, and decoded).
                message.args[2] = cursor
                raise
            cursor = after
            if not saved:
                raise LeaseLost(
                    f"sharded job {self.name!r} run {run!r} shard {shard}: worker "
                    f"{running.worker} lost its lease before saving cursor {cursor!r}; the "
                    "shard's new owner resumes from the last saved cursor (if workers stall "
                    "longer than the lease, raise lease=)"
                )
            batches += 1
