"""The Redis job store's summaries for operators: counts per queue and live workers, ordering keys.

``info`` reads no set whole that grows with the queue: queue lengths are
``LLEN``, the scheduled and retrying jobs of each queue are counters that the
scripts keep beside those sets (``n:sched``, ``n:retry``; see ``LIB``), and
only the leases are read one by one, as many as jobs run now. A store written
by a release without the counters gets them on its first ``info``, which counts
once (marked by ``n:ok``). ``keys`` neither: the scripts keep ``klen``, each
ordering key scored by minus its number of jobs, so the busiest keys are the
start of a sorted set; the stalled ones are found among the expired leases and
retrying jobs, oldest first, at most ``stall_budget`` of each (a key stalled
behind more of those than that is missed until they clear). A store written
before ``klen`` existed counts its keys on its first ``keys`` (``klen:ok``).
"""

from __future__ import annotations

from typing import Any

from batchy.jobs import Backend, Info, KeyInfo, QueueInfo, WorkerInfo

from ._redis_scripts import LIB

__all__ = ["INFO", "KEYS", "RedisViews"]

INFO = (
    LIB
    + """
local now = clock()
if redis.call('EXISTS', p..'n:ok') == 0 then
  -- Counters made by a store that had none yet: count the sets once.
  redis.call('DEL', p..'n:sched', p..'n:retry')
  for _, zset in ipairs({'sched', 'retry'}) do
    for _, id in ipairs(redis.call('ZRANGE', p..zset, 0, -1)) do
      local q = qof(id)
      if q then redis.call('HINCRBY', p..'n:'..zset, q, 1) end
    end
  end
  redis.call('SET', p..'n:ok', '1')
end
move_due(now)  -- a job whose time came counts as queued (see move_due)
wake_left({})
-- Running jobs per queue, and who holds each lease now (the token names its
-- worker): live, not as of heartbeats.
local running, held = {}, {}
for _, id in ipairs(redis.call('ZRANGE', p..'leases', 0, -1)) do
  local q = qof(id)
  if q then running[q] = (running[q] or 0) + 1 end
  local tok = redis.call('HGET', p..'owner', id)
  local at = tok and string.find(tok, '@', 1, true)
  if at then held[#held+1] = string.sub(tok, at + 1); held[#held+1] = id end
end
local out = {}
for _, q in ipairs(redis.call('SMEMBERS', p..'queues')) do
  local first = redis.call('LINDEX', p..'q:'..q, 0)
  local at = ''
  if first then
    local m = redis.call('HGET', p..'meta', first)
    if m then at = string.sub(m, string.find(m, '\\t', 1, true) + 1) end
  end
  out[#out+1] = {q, redis.call('LLEN', p..'q:'..q), at, running[q] or 0,
                 redis.call('HGET', p..'n:sched', q) or 0, redis.call('HGET', p..'n:retry', q) or 0}
end
redis.call('ZREMRANGEBYSCORE', p..'workers', '-inf', now)
local workers = {}
for _, w in ipairs(redis.call('ZRANGE', p..'workers', 0, -1)) do
  local info = redis.call('GET', p..'worker:'..w)
  if info then workers[#workers+1] = info end
end
return {out, redis.call('ZCARD', p..'dead'), workers, exact(now), held}
"""
)

KEYS = (
    LIB
    + """
local limit, budget, now = tonumber(ARGV[2]), tonumber(ARGV[3]), clock()
if redis.call('EXISTS', p..'klen:ok') == 0 then
  -- A store written before klen existed: count its keys once.
  redis.call('DEL', p..'klen')
  local all, seen = redis.call('HGETALL', p..'okey'), {}
  for i = 2, #all, 2 do seen[all[i]] = true end
  for k in pairs(seen) do redis.call('ZADD', p..'klen', -redis.call('LLEN', p..'k:'..k), k) end
  redis.call('SET', p..'klen:ok', '1')
end
local picked, order = {}, {}
local function pick(k)
  if k and not picked[k] then picked[k] = true; order[#order+1] = k end
end
-- The busiest keys, then the keys whose head may be stalled: leases run out
-- and jobs waiting to retry, the oldest first, at most `budget` of each.
for _, k in ipairs(redis.call('ZRANGE', p..'klen', 0, limit - 1)) do pick(k) end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', p..'leases', '-inf', now, 'LIMIT', 0, budget)) do
  pick(redis.call('HGET', p..'okey', id))
end
for _, id in ipairs(redis.call('ZRANGE', p..'retry', 0, budget - 1)) do
  pick(redis.call('HGET', p..'okey', id))
end
local out = {}
for _, k in ipairs(order) do
  local head = redis.call('LINDEX', p..'k:'..k, 0)
  if head then
    local m = redis.call('HGET', p..'meta', head) or '\\t0'
    local tab = string.find(m, '\\t', 1, true)
    local lease = redis.call('ZSCORE', p..'leases', head)
    local retry = redis.call('ZSCORE', p..'retry', head)
    local sched = redis.call('ZSCORE', p..'sched', head)
    local due = retry or sched or string.sub(m, tab + 1)
    out[#out+1] = {k, string.sub(m, 1, tab - 1), redis.call('LLEN', p..'k:'..k), head,
                   lease and '1' or '0', lease or '0', tostring(due), retry and '1' or '0'}
  end
end
return {out, exact(now)}
"""
)


class RedisViews(Backend):
    """``info`` and ``keys`` of :class:`RedisBackend` (a mixin: see the module's docstring)."""

    async def _run(self, script: str, *args: Any) -> Any:
        raise NotImplementedError  # RedisBackend's: runs one of its scripts

    async def info(self, now: float) -> Info:
        rows, dead, workers, store_now, held = await self._run("info")
        queues = [
            QueueInfo(
                name,
                int(size),
                max(0.0, float(store_now) - float(at)) if at else 0.0,
                int(running),
                int(scheduled),
                int(retrying),
            )
            for name, size, at, running, scheduled, retrying in rows
        ]
        queues.sort(key=lambda q: q.name)
        live = self.with_running(
            (WorkerInfo.from_json(w) for w in workers),
            ((held[i], held[i + 1]) for i in range(0, len(held), 2)),
        )
        return Info(tuple(queues), int(dead), live)

    #: Expired leases and retrying jobs ``keys`` examines for stalled heads, each.
    stall_budget = 500

    async def keys(self, now: float, limit: int = 10) -> tuple[list[KeyInfo], list[KeyInfo]]:
        rows, store_now = await self._run("keys", limit, self.stall_budget)
        shift = now - float(store_now)  # Redis's times are reported on the caller's clock
        found = [
            KeyInfo.of_head(
                key,
                queue,
                int(n),
                head,
                running=leased == "1",
                lease=float(lease) + shift,
                due=float(due) + shift,
                retrying=retry == "1",
                now=now,
            )
            for key, queue, n, head, leased, lease, due, retry in rows
        ]
        return self.rank_keys(found, limit)
