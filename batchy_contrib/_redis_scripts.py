"""The Lua scripts of the Redis job store; each runs atomically in Redis (see redis_jobs)."""

from __future__ import annotations

__all__ = ["PUSH", "CYCLE", "HEARTBEAT", "STATUS", "INFO", "DEAD_MOVE", "SAVE", "KEYS"]

LIB = """
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
local function promote(id, now)
  local m = redis.call('HGET', p..'meta', id)
  if not m then return end
  local tab = string.find(m, '\t', 1, true)
  local q, at = string.sub(m, 1, tab - 1), tonumber(string.sub(m, tab + 1))
  if at > now then redis.call('ZADD', p..'sched', at, id) else ready(id, q, now, false) end
end
-- A job left the store: if it headed its key, the key's next job becomes the head.
local function leave(id, now)
  local key = redis.call('HGET', p..'okey', id)
  if not key then return nil end
  redis.call('HDEL', p..'okey', id)
  local line = p..'k:'..key
  local head = redis.call('LINDEX', line, 0)
  redis.call('LREM', line, 1, id)
  if head == id then
    local nxt = redis.call('LINDEX', line, 0)
    if nxt then promote(nxt, now) end
  end
  return key
end
-- A keyed job joins the end of its key's line; true when it must wait behind a head.
local function join(id, key)
  if key == nil or key == '' then return false end
  redis.call('HSET', p..'okey', id, key)
  return redis.call('RPUSH', p..'k:'..key, id) > 1
end
"""

PUSH = (
    LIB
    + """
local now = tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV, 7 do
  local id, q, payload, due = ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3]
  local uniq, ttl, key = ARGV[i+4], ARGV[i+5], ARGV[i+6]
  local ok = 1
  if redis.call('HEXISTS', p..'jobs', id) == 1 then ok = 0 end
  if ok == 1 and uniq ~= '' and not redis.call('SET', p..'uniq:'..uniq, '1', 'NX', 'PX', ttl) then
    ok = 0
  end
  if ok == 1 then
    redis.call('HSET', p..'jobs', id, payload)
    redis.call('SADD', p..'queues', q)
    if join(id, key) then
      local at = now
      if due ~= '' then at = tonumber(due) end
      redis.call('HSET', p..'meta', id, q..'\t'..at)
    elseif due ~= '' and tonumber(due) > now then
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

CYCLE = (
    LIB
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
    leave(id, now)
    if tonumber(keep) > 0 then redis.call('SET', p..'result:'..id, result, 'PX', keep) end
  elseif kind == 'retry' then
    redis.call('HSET', p..'jobs', id, payload)
    local qq = qof(id) or q
    redis.call('HSET', p..'meta', id, qq..'\\t'..due)
    redis.call('ZADD', p..'retry', due, id)
  elseif kind == 'dead' then
    redis.call('HDEL', p..'jobs', id)
    redis.call('HDEL', p..'meta', id)
    local key = leave(id, now)
    if key then
      local d = cjson.decode(extra)
      d.key = key
      extra = cjson.encode(d)
    end
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

HEARTBEAT = (
    LIB
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

STATUS = (
    LIB
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

INFO = (
    LIB
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

DEAD_MOVE = (
    LIB
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
      if type(d.key) == 'string' and join(id, d.key) then
        redis.call('HSET', p..'meta', id, d.queue..'\t'..now)
      else
        ready(id, d.queue, now, false)
      end
    end
  end
end
return n
"""
)


SAVE = """
local p, id, worker, payload = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if redis.call('HGET', p..'owner', id) ~= worker or redis.call('HEXISTS', p..'jobs', id) == 0 then
  return 0
end
redis.call('HSET', p..'jobs', id, payload)
redis.call('ZADD', p..'leases', ARGV[5], id)
return 1
"""

# An operator's view (`batchy info`): it reads every keyed job; no claim ever does.
KEYS = (
    LIB
    + """
local counts, order = {}, {}
local all = redis.call('HGETALL', p..'okey')
for i = 2, #all, 2 do
  local k = all[i]
  if not counts[k] then counts[k] = 0; order[#order+1] = k end
  counts[k] = counts[k] + 1
end
local out = {}
for _, k in ipairs(order) do
  local head = redis.call('LINDEX', p..'k:'..k, 0)
  if head then
    local m = redis.call('HGET', p..'meta', head) or '\t0'
    local tab = string.find(m, '\t', 1, true)
    local lease = redis.call('ZSCORE', p..'leases', head)
    local retry = redis.call('ZSCORE', p..'retry', head)
    local sched = redis.call('ZSCORE', p..'sched', head)
    local due = retry or sched or string.sub(m, tab + 1)
    out[#out+1] = {k, string.sub(m, 1, tab - 1), counts[k], head,
                   lease and '1' or '0', lease or '0', tostring(due), retry and '1' or '0'}
  end
end
return out
"""
)
