"""The Redis store of :mod:`batchy.jobs`: workers on many machines, each step one Lua script.

Keys (all under ``prefix``, default ``batchy:``):

- ``q:<queue>`` a list of ready job ids; ``queues`` the set of queue names;
- ``jobs`` a hash id -> payload; ``meta`` a hash id -> ``queue<TAB>ready time``;
- ``sched`` / ``retry`` sorted sets of delayed / retrying ids by due time;
- ``leases`` a sorted set of claimed ids by lease expiry, ``owner`` id -> worker;
- ``dead`` a sorted set by death time, ``deadinfo`` id -> JSON; ``result:<id>``;
- ``uniq:<key>`` unique enqueue keys; ``workers`` and ``worker:<id>`` live workers;
- ``okey`` a hash id -> ordering key, and ``k:<key>`` a list of the key's ids in push
  order, for keyed jobs only. Only a key's head (the list's first id) is ever in a
  queue list or a due set; the others wait in ``jobs`` until the head leaves (done or
  dead), when the same script moves the next id up. Redis drops a list when it is
  empty, so a key with no jobs leaves nothing behind.

A claim never deletes a job: it moves the id from its list to ``leases``, so a
worker that dies leaves its jobs there, and the next ``cycle`` of any worker
(one script: apply outcomes, move due jobs, recover expired leases, claim) puts
them back. Scripts run atomically in Redis, so every due or orphaned job moves
exactly once. Not for Redis Cluster (the scripts build key names).

::

    from batchy_contrib.redis_jobs import RedisBackend
    queue = batchy.jobs.Queue(RedisBackend("redis://localhost:6379/1"))
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import redis
import redis.asyncio as aioredis

from batchy.jobs import (
    DEAD_MAX,
    DEAD_MAX_AGE,
    Backend,
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

from . import _redis_scripts as lua

__all__ = ["RedisBackend"]


class RedisBackend(Backend):
    """Jobs in Redis (redis-py's asyncio client); any number of workers on any machines.

    ``url`` is a Redis URL (use a database of its own, e.g. ``redis://host:6379/1``)
    or an existing ``redis.asyncio.Redis`` client.
    """

    def __init__(
        self,
        url: str | aioredis.Redis = "redis://localhost:6379/0",
        *,
        prefix: str = "batchy:",
        dead_max: int = DEAD_MAX,
        dead_max_age: float = DEAD_MAX_AGE,
    ) -> None:
        self.redis: aioredis.Redis = (
            aioredis.Redis.from_url(url, decode_responses=True) if isinstance(url, str) else url
        )
        self.url = url if isinstance(url, str) else repr(url)
        self.prefix = prefix
        self.dead_max = dead_max
        self.dead_max_age = dead_max_age
        # A blocking client for push_sync (enqueue from code without an event loop),
        # made on first use; the worker never needs it.
        self._sync: redis.Redis | None = None
        self._scripts = {
            name: self.redis.register_script(source)
            for name, source in (
                ("push", lua.PUSH),
                ("cycle", lua.CYCLE),
                ("heartbeat", lua.HEARTBEAT),
                ("status", lua.STATUS),
                ("info", lua.INFO),
                ("dead_move", lua.DEAD_MOVE),
                ("save", lua.SAVE),
                ("keys", lua.KEYS),
            )
        }

    def __repr__(self) -> str:
        return f"<RedisBackend {self.url} prefix={self.prefix!r}>"

    async def _run(self, script: str, *args: Any) -> Any:
        return await self._scripts[script](keys=[], args=[self.prefix, *args])

    @staticmethod
    def _push_args(envelopes: Sequence[Envelope], now: float) -> list[Any]:
        args: list[Any] = [now]
        for e in envelopes:
            due = "" if e.due is None else repr(e.due)
            ttl = int(e.unique_ttl * 1000) if e.unique is not None else 0
            args += [e.id, e.queue, e.payload, due, e.unique or "", max(ttl, 1), e.key or ""]
        return args

    async def push(self, envelopes: Sequence[Envelope], now: float) -> list[bool]:
        return [bool(x) for x in await self._run("push", *self._push_args(envelopes, now))]

    def push_sync(self, envelopes: Sequence[Envelope], now: float) -> list[bool]:
        if self._sync is None:
            if not isinstance(self.url, str) or not self.url.startswith(("redis", "unix")):
                return super().push_sync(envelopes, now)
            self._sync = redis.Redis.from_url(self.url, decode_responses=True)
        script = self._sync.register_script(lua.PUSH)
        return [
            bool(x) for x in script(keys=[], args=[self.prefix, *self._push_args(envelopes, now)])
        ]

    async def cycle(
        self,
        outcomes: Sequence[Outcome],
        queues: Sequence[str],
        limit: int,
        worker: str,
        lease: float,
        now: float,
    ) -> list[Claimed]:
        args: list[Any] = [now, worker, lease, limit, self.dead_max, self.dead_max_age]
        args += [len(queues), *queues]
        for o in outcomes:
            extra = ""
            if o.kind == "dead":
                extra = json.dumps(
                    {
                        "queue": o.queue,
                        "payload": o.payload or "",
                        "reason": o.reason,
                        "traceback": o.traceback,
                    }
                )
            result = o.result if o.result is not None else "null"
            args += [
                o.kind,
                o.id,
                o.queue,
                o.payload or "",
                repr(o.due),
                result,
                int(o.keep * 1000),
                extra,
            ]
        flat = await self._run("cycle", *args)
        return [Claimed(flat[i], flat[i + 1], flat[i + 2]) for i in range(0, len(flat), 3)]

    async def heartbeat(
        self, worker: WorkerInfo, ids: Sequence[str], lease: float, now: float
    ) -> list[str]:
        lost = await self._run("heartbeat", now, worker.id, lease, worker.to_json(), *ids)
        return list(lost)

    async def save_progress(
        self, job_id: str, worker: str, payload: str, lease: float, now: float
    ) -> bool:
        return bool(await self._run("save", job_id, worker, payload, now + lease))

    async def keys(self, now: float, limit: int = 10) -> tuple[list[KeyInfo], list[KeyInfo]]:
        found = [
            KeyInfo.of_head(
                key,
                queue,
                int(n),
                head,
                running=leased == "1",
                lease=float(lease),
                due=float(due),
                retrying=retry == "1",
                now=now,
            )
            for key, queue, n, head, leased, lease, due, retry in await self._run("keys")
        ]
        return self.rank_keys(found, limit)

    async def forget_worker(self, worker_id: str) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zrem(self.prefix + "workers", worker_id)
            pipe.delete(self.prefix + "worker:" + worker_id)
            await pipe.execute()

    async def status(self, job_id: str, now: float) -> JobStatus:
        found = await self._run("status", job_id, now)
        state = found[0]
        if state == "dead":
            return JobStatus(job_id, "dead", reason=json.loads(found[1])["reason"])
        if state == "done":
            return JobStatus(job_id, "done", result=found[1])
        return JobStatus(job_id, state)

    async def info(self, now: float) -> Info:
        rows, dead, workers = await self._run("info", now)
        queues = [
            QueueInfo(
                name,
                int(size),
                max(0.0, now - float(at)) if at else 0.0,
                int(running),
                int(scheduled),
                int(retrying),
            )
            for name, size, at, running, scheduled, retrying in rows
        ]
        queues.sort(key=lambda q: q.name)
        return Info(tuple(queues), int(dead), tuple(WorkerInfo.from_json(w) for w in workers))

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
        return int(await self._run("dead_move", now, 1, int(ids is None), *(ids or ())))

    async def delete_dead(self, ids: Sequence[str] | None) -> int:
        return int(await self._run("dead_move", 0, 0, int(ids is None), *(ids or ())))

    async def close(self) -> None:
        if self._sync is not None:
            self._sync.close()
        await self.redis.aclose()
