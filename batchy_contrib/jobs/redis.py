"""The Redis store of :mod:`batchy.jobs`: workers on many machines, each step one Lua script.

Keys (all under ``prefix``, default ``batchy:``):

- ``q:<queue>`` a list of ready job ids; ``queues`` the set of queue names;
- ``jobs`` a hash id -> payload; ``meta`` a hash id -> ``queue<TAB>ready time``;
- ``sched`` / ``retry`` sorted sets of delayed / retrying ids by due time;
- ``leases`` a sorted set of claimed ids by lease expiry, ``owner`` id -> the lease
  token of its current claim (from the counter ``claims``);
- ``dead`` a sorted set by death time, ``deadinfo`` id -> JSON; ``done:<id>`` a kept
  result with what the job was (queue, key, payload, each after its length), ``results``
  their ids by expiry;
- ``uniq:<key>`` unique enqueue keys; ``workers`` and ``worker:<id>`` live workers;
- ``okey`` a hash id -> ordering key, and ``k:<key>`` a list of the key's ids in push
  order, for keyed jobs only. Only a key's head (the list's first id) is ever in a
  queue list or a due set; the others wait in ``jobs`` until the head leaves (done or
  dead), when the same script moves the next id up. Redis drops a list when it is
  empty, so a key with no jobs leaves nothing behind.

A claim never deletes a job: it moves the id from its list to ``leases``, so a
worker that dies leaves its jobs there, and the next ``cycle`` of any worker
(one script: apply outcomes, move due jobs, recover expired leases, claim) puts
them back. The scripts that tell people where jobs are (status, info, listings,
actions) move due jobs first too, so a job whose time came is queued whether or
not a worker looked since. Scripts run atomically in Redis, so every due or
orphaned job moves exactly once. An outcome, heartbeat or progress save names the lease token of
its claim, and the script applies it only while ``owner`` still holds that token
(fencing: a worker that stalled past its lease cannot speak for the job any
more). Every time is Redis's own ``TIME``, read inside the scripts: the workers'
clocks never decide a lease or a due time. Not for Redis Cluster (the scripts
build key names).

Wake-ups: ``wake:<queue>`` is a list holding at most one token. Every script
that makes a job ready in a queue, or sets a new due time (a delayed push, a
retry), pushes the token if the list is empty; an idle worker waits for it with
one ``BLPOP`` on the wake lists of its queues, on a connection of its own (a
blocking command holds its connection; cycles go through the main client). Why
a list and not pub/sub: a token waits for its taker, so a worker busy between
its cycle and its ``BLPOP`` still gets it (a published message nobody is
subscribed to at that instant is gone), and ``BLPOP`` hands one token to one
worker, so a push wakes one idle worker, not the whole fleet. Each cycle ends
by pushing the token again for every queue it leaves ready jobs in (it had no
room for them), so a wake-up taken by a worker that filled up goes on to the
next. Delayed jobs: before it blocks, a worker reads the earliest due time of
``sched`` and ``retry`` (Redis's clock) and waits no longer than that; its
``BLPOP`` stays outstanding across that deadline, so an idle worker always has
exactly one blocking command in Redis.

::

    from batchy_contrib.jobs.redis import RedisBackend
    queue = batchy.jobs.Queue(RedisBackend("redis://localhost:6379/1"))
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._extras import extra

with extra(__name__, "'batchy[redis]'", "redis"):
    import redis
    import redis.asyncio as aioredis

from batchy.jobs import (
    DEAD_MAX,
    DEAD_MAX_AGE,
    Backend,
    Claimed,
    Claims,
    ConfigError,
    DeadJob,
    Envelope,
    JobStatus,
    Outcome,
    WorkerInfo,
)

from . import _redis_counts as _counts
from . import _redis_runs as _runs
from . import _redis_scripts as lua
from . import _redis_views as views
from ._locations import REDIS_PROTOCOL, redis_client
from ._redis_admin import RedisOperating

__all__ = ["RedisBackend"]

log = logging.getLogger("batchy.jobs")


@dataclass(slots=True)
class _Wait:
    """A worker's ``BLPOP`` on its wake lists, kept from one ``wait_for_work`` to the next."""

    task: asyncio.Future[Any]
    since: float  # the loop's time when it was sent


class RedisBackend(RedisOperating, views.RedisViews):
    """Jobs in Redis (redis-py's asyncio client); any number of workers on any machines.

    ``url`` is a Redis URL (use a database of its own, e.g. ``redis://host:6379/1``)
    or an existing ``redis.asyncio.Redis`` client made with ``decode_responses=True``
    (enqueueing without an event loop, ``push_sync``, needs a URL). Make it with
    ``protocol=2`` too, as the store makes its own: redis-py 8 speaks RESP3 by
    default, and then sends the first command after a Redis restart on the old,
    closed connection, which fails though the server is back.
    """

    def __init__(
        self,
        url: str | aioredis.Redis = "redis://localhost:6379/0",
        *,
        prefix: str = "batchy:",
        dead_max: int = DEAD_MAX,
        dead_max_age: float = DEAD_MAX_AGE,
    ) -> None:
        self.redis: aioredis.Redis = redis_client(url)
        self.url = url if isinstance(url, str) else repr(url)
        self.prefix = prefix
        self.dead_max = dead_max
        self.dead_max_age = dead_max_age
        # A blocking client for push_sync (enqueue from code without an event loop),
        # made on first use; the worker never needs it.
        self._sync: redis.Redis | None = None
        #: Queue entries dropped because their job had no payload (see ``cycle``).
        self.dropped = 0
        # Idle workers' BLPOPs, on a client of their own made on first use.
        self._blocker: aioredis.Redis | None = None
        self._waits: dict[str, _Wait] = {}
        self._due: dict[str, float] = {}  # per worker, the next due time last read
        self._heartbeat = "heartbeat"  # (see heartbeat)
        self._blpop_lost: dict[str, float] = {}  # per worker, when its BLPOP last dropped
        self._scripts = {
            name: self.redis.register_script(source)
            for name, source in (
                ("push", lua.PUSH),
                ("cycle", lua.CYCLE),
                ("heartbeat", lua.HEARTBEAT_OOM),
                ("heartbeat_before_7", lua.HEARTBEAT),
                ("status", lua.STATUS),
                ("info", views.INFO),
                ("dead_move", lua.DEAD_MOVE),
                ("save", lua.SAVE),
                ("keys", views.KEYS),
                ("next_due", lua.NEXT_DUE),
            )
        }

    def __repr__(self) -> str:
        return f"<RedisBackend {self.redact(self.url)} prefix={self.prefix!r}>"

    def describe(self) -> str:
        return f"Redis {self.redact(self.url)} prefix {self.prefix!r}"

    async def _run(self, script: str, *args: Any) -> Any:
        return await self._scripts[script](keys=[], args=[self.prefix, *args])

    @staticmethod
    def _push_args(envelopes: Sequence[Envelope], now: float) -> list[Any]:
        Backend.check_envelopes(envelopes)
        args: list[Any] = []
        for e in envelopes:
            # Only the offset crosses over: the script adds it to Redis's TIME.
            due = "" if e.due is None else repr(e.due - now)
            ttl = int(e.unique_ttl * 1000) if e.unique is not None else 0
            args += [e.id, e.queue, e.payload, due, e.unique or "", max(ttl, 1), e.key or ""]
        return args

    async def push(
        self, envelopes: Sequence[Envelope], now: float, *, connection: Any = None
    ) -> list[bool]:
        self.no_connection(connection)
        args = self._push_args(envelopes, now)
        with self._refusals(envelopes):
            return [bool(x) for x in await self._run("push", *args)]

    def push_sync(
        self, envelopes: Sequence[Envelope], now: float, *, connection: Any = None
    ) -> list[bool]:
        self.no_connection(connection)
        if self._sync is None:
            if not self.url.startswith(("redis", "unix")):
                # A redis.asyncio client works only in the event loop it runs in,
                # and cannot be copied into a blocking one (its retries, credential
                # providers and connect hooks are asyncio's): it failed with
                # redis-py's 'no running event loop'.
                raise ConfigError(
                    f"{self!r} cannot enqueue without an event loop: it was given a "
                    "redis.asyncio client, which needs one; give RedisBackend a URL (it "
                    "makes a blocking client for this), or enqueue from async code with "
                    "'await job.enqueue(...)'"
                )
            self._sync = redis.Redis.from_url(
                self.url, decode_responses=True, protocol=REDIS_PROTOCOL
            )
        script = self._sync.register_script(lua.PUSH)
        args = [self.prefix, *self._push_args(envelopes, now)]
        with self._refusals(envelopes):
            return [bool(x) for x in script(keys=[], args=args)]

    @contextlib.contextmanager
    def _refusals(self, envelopes: Sequence[Envelope]) -> Iterator[None]:
        """Redis's refusal of an enqueue for lack of memory, as a :class:`ConfigError`."""
        try:
            yield
        except redis.ResponseError as error:
            # (redis-py makes "OOM ..." an OutOfMemoryError, without the word.)
            if not isinstance(error, redis.exceptions.OutOfMemoryError):
                raise
            ids = ", ".join(repr(e.id) for e in envelopes[:3]) + ("..." if envelopes[3:] else "")
            raise ConfigError(
                f"{self!r}: cannot enqueue job(s) {ids}: Redis is out of memory (used memory "
                "is past maxmemory, and it refuses writes rather than evict). Raise maxmemory, "
                "or keep less in it (shorter keep_result=, a smaller dead set: dead_max=, "
                "dead_max_age=); keep maxmemory-policy noeviction, the only policy under which "
                "Redis never drops a job; nothing was enqueued"
            ) from error

    async def cycle(
        self,
        outcomes: Sequence[Outcome],
        queues: Sequence[str],
        limit: int,
        worker: str,
        lease: float,
        now: float,
    ) -> Claims:
        args: list[Any] = [lease, limit, self.dead_max, self.dead_max_age]
        args += [len(queues), *queues, worker]
        # Each outcome sends only the fields its kind uses (see the script): the
        # client packs every argument one by one, and most outcomes are "done".
        for o in self.screen_outcomes(outcomes):
            kind = o.kind
            if kind == "done":
                keep = int(o.keep * 1000)
                if keep > 0:
                    result = o.result if o.result is not None else ""  # not kept: no JSON
                    args += ("kept", o.id, o.token, result, keep)
                else:
                    args += ("done", o.id, o.token)
            elif kind == "retry":
                # Only a retry's due counts, sent as an offset the script adds to TIME.
                args += ("retry", o.id, o.token, o.queue, o.payload or "", repr(o.due - now))
            elif kind == "dead":
                grave = {"queue": o.queue, "reason": o.reason, "traceback": o.traceback}
                if o.payload is not None:  # (else the script keeps the claimed one)
                    grave["payload"] = o.payload
                args += ("dead", o.id, o.token, json.dumps(grave))
            else:
                args += (kind, o.id, o.token)
        flat, refused, dropped, cancel = await self._run("cycle", *args)
        for i in range(0, len(dropped), 2):
            self.dropped += 1
            log.warning(
                "queue %r held job id %r with no payload (its job hash entry was deleted by "
                "hand or evicted; configure Redis with maxmemory-policy noeviction); dropped "
                "it (%d such entries so far)",
                dropped[i + 1],
                dropped[i],
                self.dropped,
            )
        claimed = (Claimed(*flat[i : i + 4]) for i in range(0, len(flat), 4))
        pairs = ((cancel[i], cancel[i + 1]) for i in range(0, len(cancel), 2))
        return Claims(claimed, refused, pairs)

    async def heartbeat(
        self, worker: WorkerInfo, held: Sequence[tuple[str, str]], lease: float, now: float
    ) -> list[str]:
        pairs = [v for pair in held for v in pair]
        args = (worker.id, lease, worker.to_json(), *pairs)
        try:
            lost = await self._run(self._heartbeat, *args)
        except redis.ResponseError as error:
            if self._heartbeat != "heartbeat" or "#" not in str(error):
                raise
            # Redis before 7 reads no script flags (a "#!lua" line): the plain one.
            self._heartbeat = "heartbeat_before_7"
            lost = await self._run(self._heartbeat, *args)
        return list(lost)

    async def save_progress(
        self, job_id: str, token: str, payload: str, lease: float, now: float
    ) -> bool:
        return bool(await self._run("save", job_id, token, payload, lease))

    def _blocking(self) -> aioredis.Redis:
        """The client for BLPOPs: same server and options, its own connections."""
        if self._blocker is None:
            pool = self.redis.connection_pool
            # No socket timeout: BLPOP's own timeout bounds the wait.
            options = {**pool.connection_kwargs, "socket_timeout": None}
            self._blocker = aioredis.Redis(
                connection_pool=aioredis.ConnectionPool(
                    connection_class=pool.connection_class, **options
                )
            )
        return self._blocker

    async def _blpop(self, keys: list[str], timeout: float) -> Any:
        # redis-py types the timeout as an int; Redis takes seconds as a float.
        return await self._blocking().blpop(keys, timeout)  # type: ignore[arg-type,misc]

    async def wait_for_work(self, worker: str, queues: Sequence[str], timeout: float) -> None:
        loop = asyncio.get_running_loop()
        wait = self._waits.get(worker)
        if wait is not None and loop.time() - wait.since > 2 * timeout + 5.0:
            # No answer long after its own timeout: the connection died silently.
            wait.task.cancel()
            wait = None
        if wait is None:
            keys = [self.prefix + "wake:" + q for q in queues]
            blpop = self._blpop(keys, max(timeout, 0.01))
            wait = self._waits[worker] = _Wait(asyncio.ensure_future(blpop), loop.time())
        # The next due time (on the loop's clock) is read again only when it may
        # have changed: at first, after a 'd' token or a BLPOP timeout, once passed.
        due_at = self._due.get(worker)
        if due_at is None or due_at <= loop.time():
            due = await self._run("next_due")
            due_at = loop.time() + float(due[0]) if due else math.inf
            self._due[worker] = due_at
        # Redis times blocked commands out only to a tenth of a second (hz 10): too
        # coarse for due times, which are timed here. Without one, BLPOP's own
        # timeout ends the wait (a little grace for it: a BLPOP that outlived the
        # call would end the next one at once).
        due_in = due_at - loop.time()
        if due_in >= timeout:
            due_in = timeout + 0.25
        if due_in > 0:  # else a delayed job is due already: the next cycle moves it
            # asyncio.wait never cancels: when the due time comes first, the BLPOP
            # stays outstanding for the next call.
            await asyncio.wait([wait.task], timeout=due_in)
        if wait.task.done():
            if self._waits.get(worker) is wait:
                del self._waits[worker]
            try:
                token = wait.task.result()  # a failed BLPOP raises: the worker polls instead
            except redis.ConnectionError:
                # Its connection dropped (CLIENT KILL, a proxy's idle timeout): the
                # worker looks at the store now and waits again on a new one, which
                # fails too, and is raised, if Redis itself is gone.
                last = self._blpop_lost.get(worker, -math.inf)
                self._blpop_lost[worker] = loop.time()
                if loop.time() - last < 2 * timeout + 5.0:
                    raise
                token = None
            if token is None or token[1] not in ("1", b"1"):
                self._due.pop(worker, None)

    @staticmethod
    async def _end(wait: _Wait | None) -> None:
        if wait is None:
            return
        wait.task.cancel()
        await asyncio.wait([wait.task])
        if not wait.task.cancelled():
            wait.task.exception()  # retrieved: it ended on its own before the cancel

    async def forget_worker(self, worker_id: str) -> None:
        self._due.pop(worker_id, None)
        await self._end(self._waits.pop(worker_id, None))
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zrem(self.prefix + "workers", worker_id)
            pipe.delete(self.prefix + "worker:" + worker_id)
            await pipe.execute()

    async def status(self, job_id: str, now: float) -> JobStatus:
        return (await self.statuses([job_id], now))[0]

    async def statuses(self, job_ids: Sequence[str], now: float) -> list[JobStatus]:
        statuses = []
        for chunk in self.chunks(job_ids, self.status_chunk):
            found = await self._run("status", *chunk)
            for job_id, (state, *value) in zip(chunk, found, strict=True):
                if state == "dead":
                    reason = json.loads(value[0])["reason"]
                    statuses.append(JobStatus(job_id, "dead", reason=reason))
                elif state == "done":
                    statuses.append(JobStatus(job_id, "done", result=value[0] or None))
                else:
                    statuses.append(JobStatus(job_id, state))
        return statuses

    async def dead_jobs(self, limit: int = 100) -> list[DeadJob]:
        ids = await self.redis.zrevrange(self.prefix + "dead", 0, limit - 1, withscores=True)
        if not ids:
            return []
        infos: list[str | None] = await self.redis.hmget(  # type: ignore[misc]
            self.prefix + "deadinfo", [i for i, _ in ids]
        )
        out = []
        for (job_id, died), info in zip(ids, infos, strict=True):
            if info is not None:
                d = json.loads(info)
                out.append(
                    DeadJob(
                        job_id,
                        d["queue"],
                        d["payload"],
                        d["reason"],
                        d["traceback"],
                        died,
                        d.get("key") if isinstance(d.get("key"), str) else None,
                    )
                )
        return out

    async def retry_dead(self, ids: Sequence[str] | None, now: float) -> int:
        return int(await self._run("dead_move", 1, int(ids is None), *(ids or ())))

    async def delete_dead(self, ids: Sequence[str] | None) -> int:
        return int(await self._run("dead_move", 0, int(ids is None), *(ids or ())))

    async def add_counts(self, counts: Mapping[tuple[int, str], int], now: float) -> None:
        await _counts.add_counts(self.redis, self.prefix, counts)

    async def read_counts(self, since: int, now: float) -> dict[tuple[int, str], int]:
        return await _counts.read_counts(self.redis, self.prefix, since, now)

    async def note_run(self, name: str, run: str, now: float, keep: float) -> None:
        await _runs.note_run(self.redis, self.prefix, name, run, now, keep)

    async def runs(
        self, name: str, now: float, keep: float, limit: int = 50
    ) -> list[tuple[str, float]]:
        return await _runs.runs(self.redis, self.prefix, name, now, keep, limit)

    async def run_started(self, name: str, run: str) -> float | None:
        return await _runs.run_started(self.redis, self.prefix, name, run)

    def unreachable(self, error: BaseException) -> bool:
        # (AuthenticationError is a ConnectionError: a wrong password is an address too.)
        return isinstance(error, (redis.ConnectionError, redis.TimeoutError, OSError))

    async def close(self) -> None:
        if self._sync is not None:
            self._sync.close()
        waits, self._waits = list(self._waits.values()), {}
        for wait in waits:
            await self._end(wait)
        if self._blocker is not None:
            await self._blocker.aclose()
            await self._blocker.connection_pool.disconnect()
        await self.redis.aclose()
