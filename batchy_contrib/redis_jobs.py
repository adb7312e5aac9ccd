"""The Redis store of :mod:`batchy.jobs`: workers on many machines, each step one Lua script.

Keys (all under ``prefix``, default ``batchy:``):

- ``q:<queue>`` a list of ready job ids; ``queues`` the set of queue names;
- ``jobs`` a hash id -> payload; ``meta`` a hash id -> ``queue<TAB>ready time``;
- ``sched`` / ``retry`` sorted sets of delayed / retrying ids by due time;
- ``leases`` a sorted set of claimed ids by lease expiry, ``owner`` id -> worker;
- ``dead`` a sorted set by death time, ``deadinfo`` id -> JSON; ``result:<id>``;
- ``uniq:<key>`` unique enqueue keys; ``workers`` and ``worker:<id>`` live workers.

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
    Outcome,
    QueueInfo,
    WorkerInfo,
)

__all__ = ["RedisBackend"]

_LIB = """
local p = ARGV[1]
local function qof(id)
  local m = redis.call('HGET', p..'meta', id)
  if not m then return nil end
  return string.sub(m, 1, string.find(m, '\\t', 1, true) - 1)
end
local function ready(id, q, at, front)
  redis.call('HSET', p..'meta', id, q..'\\t'..at)
  if front then redis.call('LPUSH', p..'q:'..q, id) else redis.call('RPUSH', p..'q:'..q, id) end
end
"""

_PUSH = (
    _LIB
    + """
local now = tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV, 6 do
  local id, q, payload, due = ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3]
  local uniq, ttl = ARGV[i+4], ARGV[i+5]
  local ok = 1
  if redis.call('HEXISTS', p..'jobs', id) == 1 then ok = 0 end
  if ok == 1 and uniq ~= '' and not redis.call('SET', p..'uniq:'..uniq, '1', 'NX', 'PX', ttl) then
    ok = 0
  end
  if ok == 1 then
    redis.call('HSET', p..'jobs', id, payload)
    redis.call('SADD', p..'queues', q)
    if due ~= '' and tonumber(due) > now then
      redis.call('HSET', p..'meta', id, q..'\\t'..due)
      redis.call('ZADD', p..'sched', due, id)
    else
      ready(id, q, now, false)
    end
  end
  out[#out+1] = ok
end
return out
"""
)

_CYCLE = (
    _LIB
    + """
local now, worker, lease, limit = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local dead_max, dead_age, nq = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local queues = {}
for i = 1, nq do queues[i] = ARGV[8 + i] end
local buried = false
for i = 9 + nq, #ARGV, 8 do
  local kind, id, q, payload, due, result, keep, extra =
    ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3], ARGV[i+4], ARGV[i+5], ARGV[i+6], ARGV[i+7]
  redis.call('ZREM', p..'leases', id)
  redis.call('HDEL', p..'owner', id)
  if kind == 'done' then
    redis.call('HDEL', p..'jobs', id)
    redis.call('HDEL', p..'meta', id)
    if tonumber(keep) > 0 then redis.call('SET', p..'result:'..id, result, 'PX', keep) end
  elseif kind == 'retry' then
    redis.call('HSET', p..'jobs', id, payload)
    local qq = qof(id) or q
    redis.call('HSET', p..'meta', id, qq..'\\t'..due)
    redis.call('ZADD', p..'retry', due, id)
  elseif kind == 'dead' then
    redis.call('HDEL', p..'jobs', id)
    redis.call('HDEL', p..'meta', id)
    redis.call('ZADD', p..'dead', now, id)
    redis.call('HSET', p..'deadinfo', id, extra)
    buried = true
  elseif kind == 'release' then
    local qq = qof(id)
    if qq and redis.call('HEXISTS', p..'jobs', id) == 1 then ready(id, qq, now, true) end
  end
end
if buried then
  local old = redis.call('ZRANGEBYSCORE', p..'dead', '-inf', now - dead_age)
  local n = redis.call('ZCARD', p..'dead')
  if n > dead_max then
    for _, id in ipairs(redis.call('ZRANGE', p..'dead', 0, n - dead_max - 1)) do
      old[#old+1] = id
    end
  end
  for _, id in ipairs(old) do
    redis.call('ZREM', p..'dead', id)
    redis.call('HDEL', p..'deadinfo', id)
  end
end
-- Due delayed jobs and retries join their queue; expired leases go back to the front.
for _, zset in ipairs({'sched', 'retry'}) do
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', p..zset, '-inf', now, 'LIMIT', 0, 1000)) do
    redis.call('ZREM', p..zset, id)
    local q = qof(id)
    if q then ready(id, q, now, false) end
  end
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', p..'leases', '-inf', now, 'LIMIT', 0, 1000)) do
  redis.call('ZREM', p..'leases', id)
  redis.call('HDEL', p..'owner', id)
  local q = qof(id)
  if q then ready(id, q, now, true) end
end
local out = {}
local got = 0
for _, q in ipairs(queues) do
  if got >= limit then break end
  local ids = redis.call('LPOP', p..'q:'..q, limit - got)
  if ids then
    for _, id in ipairs(ids) do
      local payload = redis.call('HGET', p..'jobs', id)
      if payload then
        redis.call('ZADD', p..'leases', now + lease, id)
        redis.call('HSET', p..'owner', id, worker)
        out[#out+1] = id; out[#out+1] = q; out[#out+1] = payload
        got = got + 1
      end
    end
  end
end
return out
"""
)

_HEARTBEAT = (
    _LIB
    + """
local now, worker, lease, info = tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), ARGV[5]
local lost = {}
for i = 6, #ARGV do
  local id = ARGV[i]
  if redis.call('HGET', p..'owner', id) == worker then
    redis.call('ZADD', p..'leases', now + lease, id)
  else
    lost[#lost+1] = id
  end
end
redis.call('SET', p..'worker:'..worker, info, 'PX', math.floor(lease * 1000))
redis.call('ZADD', p..'workers', now + lease, worker)
return lost
"""
)

_STATUS = (
    _LIB
    + """
local id, now = ARGV[2], tonumber(ARGV[3])
if redis.call('ZSCORE', p..'leases', id) then return {'running'} end
if redis.call('ZSCORE', p..'retry', id) then return {'retrying'} end
if redis.call('ZSCORE', p..'sched', id) then return {'scheduled'} end
if redis.call('HEXISTS', p..'jobs', id) == 1 then return {'queued'} end
local dead = redis.call('HGET', p..'deadinfo', id)
if dead then return {'dead', dead} end
local result = redis.call('GET', p..'result:'..id)
if result then return {'done', result} end
return {'unknown'}
"""
)

_INFO = (
    _LIB
    + """
local now = tonumber(ARGV[2])
local counts = {}
local function bump(zset, slot)
  for _, id in ipairs(redis.call('ZRANGE', p..zset, 0, -1)) do
    local q = qof(id)
    if q then
      counts[q] = counts[q] or {0, 0, 0}
      counts[q][slot] = counts[q][slot] + 1
    end
  end
end
bump('leases', 1); bump('sched', 2); bump('retry', 3)
local out = {}
for _, q in ipairs(redis.call('SMEMBERS', p..'queues')) do
  local c = counts[q] or {0, 0, 0}
  local first = redis.call('LINDEX', p..'q:'..q, 0)
  local at = ''
  if first then
    local m = redis.call('HGET', p..'meta', first)
    if m then at = string.sub(m, string.find(m, '\\t', 1, true) + 1) end
  end
  out[#out+1] = {q, redis.call('LLEN', p..'q:'..q), at, c[1], c[2], c[3]}
end
redis.call('ZREMRANGEBYSCORE', p..'workers', '-inf', now)
local workers = {}
for _, w in ipairs(redis.call('ZRANGE', p..'workers', 0, -1)) do
  local info = redis.call('GET', p..'worker:'..w)
  if info then workers[#workers+1] = info end
end
return {out, redis.call('ZCARD', p..'dead'), workers}
"""
)

_DEAD_MOVE = (
    _LIB
    + """
local now, retry, all = tonumber(ARGV[2]), ARGV[3] == '1', ARGV[4] == '1'
local ids = {}
if all then ids = redis.call('ZRANGE', p..'dead', 0, -1) else
  for i = 5, #ARGV do ids[#ids+1] = ARGV[i] end
end
local n = 0
for _, id in ipairs(ids) do
  local info = redis.call('HGET', p..'deadinfo', id)
  if info then
    n = n + 1
    redis.call('ZREM', p..'dead', id)
    redis.call('HDEL', p..'deadinfo', id)
    if retry then
      local d = cjson.decode(info)
      redis.call('HSET', p..'jobs', id, d.payload)
      redis.call('SADD', p..'queues', d.queue)
      ready(id, d.queue, now, false)
    end
  end
end
return n
"""
)


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
                ("push", _PUSH),
                ("cycle", _CYCLE),
                ("heartbeat", _HEARTBEAT),
                ("status", _STATUS),
                ("info", _INFO),
                ("dead_move", _DEAD_MOVE),
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
            args += [e.id, e.queue, e.payload, due, e.unique or "", max(ttl, 1)]
        return args

    async def push(self, envelopes: Sequence[Envelope], now: float) -> list[bool]:
        return [bool(x) for x in await self._run("push", *self._push_args(envelopes, now))]

    def push_sync(self, envelopes: Sequence[Envelope], now: float) -> list[bool]:
        if self._sync is None:
            if not isinstance(self.url, str) or not self.url.startswith(("redis", "unix")):
                return super().push_sync(envelopes, now)
            self._sync = redis.Redis.from_url(self.url, decode_responses=True)
        script = self._sync.register_script(_PUSH)
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
                    DeadJob(job_id, d["queue"], d["payload"], d["reason"], d["traceback"], died)
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
