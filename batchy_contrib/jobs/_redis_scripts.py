"""The Lua scripts of the Redis job store; each runs atomically in Redis (see redis_jobs).

Every time they compare or store comes from Redis's own ``TIME`` (``clock()``),
never from the calling worker, whose clock may be off: a time a caller hands in
arrives as an offset from the moment it was sent.
"""

from __future__ import annotations

__all__ = ["LIB", "PUSH", "CYCLE", "HEARTBEAT", "STATUS", "DEAD_MOVE", "SAVE", "NEXT_DUE"]

LIB = """
local p = ARGV[1]
-- The store's clock: the only one that decides leases and due times.
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
-- A done job's record, `done:<id>`: queue, key and payload, each after its length
-- and a colon, then the result: {result, queue, key, payload}.
local function unpack_done(s)
  local parts, at = {}, 1
  for n = 1, 3 do
    local colon = string.find(s, ':', at, true)
    local len = tonumber(string.sub(s, at, colon - 1))
    parts[n] = string.sub(s, colon + 1, colon + len)
    at = colon + len + 1
  end
  return {string.sub(s, at), parts[1], parts[2], parts[3]}
end
-- A time as text that reads back as the same number: a number joined to a string
-- keeps 14 digits (0.1 ms), and the times in meta are compared with the clock (a
-- blocked job's due time when its head leaves, a head's in `keys`), as are the
-- times a script reports on the caller's clock, shifted by its own (`keys`, `info`).
local function exact(t) return string.format('%.17g', t) end
local function qof(id)
  local m = redis.call('HGET', p..'meta', id)
  if not m then return nil end
  return string.sub(m, 1, string.find(m, '\\t', 1, true) - 1)
end
-- The scheduled and retrying sets with a count per queue beside each (the
-- hashes n:sched and n:retry), kept by every change, so `info` never reads the
-- sets: a million delayed jobs would block Redis for as long as that read.
local function zadd(zset, at, id, q)
  if redis.call('ZADD', p..zset, at, id) == 1 then redis.call('HINCRBY', p..'n:'..zset, q, 1) end
end
local function zrem(zset, id, q)
  if redis.call('ZREM', p..zset, id) == 1 and q and q ~= '' then
    redis.call('HINCRBY', p..'n:'..zset, q, -1)
  end
end
-- Wake-ups (see redis_jobs): wake:<queue> holds at most one token, which an idle
-- worker of the queue takes with BLPOP: '1' (jobs are ready) or 'd' (also a new
-- due time: the worker reads the next one again). The queues made ready here:
local touched = {}
local function wake(q, due)
  local k = p..'wake:'..q
  if redis.call('LLEN', k) == 0 then
    redis.call('RPUSH', k, due and 'd' or '1')
  elseif due then
    redis.call('LSET', k, 0, 'd')
  end
end
-- At the end of a script: a token for each queue that has ready jobs left, among
-- those touched and `also` (the queues a worker just claimed from: when it had no
-- room for all, the wake-up it may have taken goes on to another worker).
local function wake_left(also)
  for _, q in ipairs(also) do touched[q] = true end
  for q in pairs(touched) do
    if redis.call('LLEN', p..'q:'..q) > 0 then wake(q) end
  end
end
local function ready(id, q, at, front)
  redis.call('HSET', p..'meta', id, q..'\\t'..exact(at))
  if front then redis.call('LPUSH', p..'q:'..q, id) else redis.call('RPUSH', p..'q:'..q, id) end
  touched[q] = true
end
local function promote(id, now)
  local m = redis.call('HGET', p..'meta', id)
  if not m then return end
  local tab = string.find(m, '\t', 1, true)
  local q, at = string.sub(m, 1, tab - 1), tonumber(string.sub(m, tab + 1))
  if at > now then
    zadd('sched', at, id, q)
    wake(q, true)  -- a new due time: a waiting worker re-reads its deadline
  else
    ready(id, q, now, false)
  end
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
  -- klen: each key by minus its jobs, so ZRANGE gives the busiest first (ties by
  -- name) and `keys` never reads every keyed job.
  if tonumber(redis.call('ZINCRBY', p..'klen', 1, key)) >= 0 then
    redis.call('ZREM', p..'klen', key)
  end
  return key
end
-- Due delayed jobs and retries join their queue, at most 1000 of each per call.
-- The cycle moves them before it claims, and every script that reads a job's
-- state for people (status, info, listings, actions) before it reads: a job
-- whose time came is queued, whether or not a worker looked since.
local function move_due(now)
  for _, zset in ipairs({'sched', 'retry'}) do
    for _, id in ipairs(redis.call('ZRANGEBYSCORE', p..zset, '-inf', now, 'LIMIT', 0, 1000)) do
      local q = qof(id)
      zrem(zset, id, q)
      if q then ready(id, q, now, false) end
    end
  end
end
-- A keyed job joins the end of its key's line; true when it must wait behind a head.
local function join(id, key)
  if key == nil or key == '' then return false end
  redis.call('HSET', p..'okey', id, key)
  local n = redis.call('RPUSH', p..'k:'..key, id)
  redis.call('ZADD', p..'klen', -n, key)
  return n > 1
end
"""

PUSH = (
    LIB
    + """
local now = clock()
local out = {}
for i = 2, #ARGV, 7 do
  -- off: seconds from now until the job is due ('' for now), on Redis's clock.
  local id, q, payload, off = ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3]
  local uniq, ttl, key = ARGV[i+4], ARGV[i+5], ARGV[i+6]
  local at = now
  if off ~= '' then at = now + tonumber(off) end
  local ok = 1
  if redis.call('HEXISTS', p..'jobs', id) == 1 then ok = 0 end
  if ok == 1 and uniq ~= '' and not redis.call('SET', p..'uniq:'..uniq, '1', 'NX', 'PX', ttl) then
    ok = 0
  end
  if ok == 1 then
    redis.call('HSET', p..'jobs', id, payload)
    redis.call('SADD', p..'queues', q)
    if join(id, key) then
      redis.call('HSET', p..'meta', id, q..'\t'..exact(at))
    elseif at > now then
      redis.call('HSET', p..'meta', id, q..'\\t'..exact(at))
      zadd('sched', at, id, q)
      wake(q, true)  -- a new due time: a waiting worker re-reads its deadline
    else
      ready(id, q, now, false)
    end
  end
  out[#out+1] = ok
end
wake_left({})
return out
"""
)

CYCLE = (
    LIB
    + """
local now = clock()
local lease, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local dead_max, dead_age, nq = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local queues = {}
for i = 1, nq do queues[i] = ARGV[6 + i] end
local worker = ARGV[7 + nq]
local buried, kept = false, false
local refused = {}
-- Outcomes, each as long as its kind needs: done|release id token; kept id token
-- result keep_ms; retry id token queue payload offset; dead id token grave_json.
local i = 8 + nq
while i <= #ARGV do
  local kind, id, token = ARGV[i], ARGV[i+1], ARGV[i+2]
  local q, payload, off, result, keep, extra
  if kind == 'kept' then
    kind, result, keep = 'done', ARGV[i+3], tonumber(ARGV[i+4])
    i = i + 5
  elseif kind == 'retry' then
    q, payload, off = ARGV[i+3], ARGV[i+4], ARGV[i+5]
    i = i + 6
  elseif kind == 'dead' then
    extra = ARGV[i+3]
    i = i + 4
  else
    i = i + 3
  end
  -- Fencing: only the holder of the job's current lease token may speak for it.
  if redis.call('HGET', p..'owner', id) ~= token then
    refused[#refused+1] = id
    kind = 'refused'
  else
    redis.call('ZREM', p..'leases', id)
    redis.call('HDEL', p..'owner', id)
  end
  if kind == 'done' then
    local wq, wp  -- what the job was, kept beside its result
    if keep then wq, wp = qof(id) or '', redis.call('HGET', p..'jobs', id) or '' end
    redis.call('HDEL', p..'jobs', id)
    redis.call('HDEL', p..'meta', id)
    local key = leave(id, now)
    if keep then
      -- One string, each part after its length (see unpack_done): one SET, no PEXPIRE.
      local k = key or ''
      redis.call('SET', p..'done:'..id, #wq..':'..wq..#k..':'..k..#wp..':'..wp..result, 'PX', keep)
      -- Kept results by expiry, so an operator can page through done jobs.
      redis.call('ZADD', p..'results', now + keep / 1000, id)
      kept = true
    end
  elseif kind == 'retry' then
    local due = now + tonumber(off)
    redis.call('HSET', p..'jobs', id, payload)
    local qq = qof(id) or q
    redis.call('HSET', p..'meta', id, qq..'\\t'..exact(due))
    zadd('retry', due, id, qq)
    wake(qq, true)  -- a new due time: a waiting worker re-reads its deadline
  elseif kind == 'dead' then
    local d = cjson.decode(extra)
    -- Without a queue or a payload of its own, it keeps the one it was claimed with.
    if d.queue == '' then d.queue = qof(id) or '' end
    if d.payload == nil then d.payload = redis.call('HGET', p..'jobs', id) or '' end
    redis.call('HDEL', p..'jobs', id)
    redis.call('HDEL', p..'meta', id)
    d.key = leave(id, now)
    extra = cjson.encode(d)
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
move_due(now)
for _, id in ipairs(redis.call('ZRANGEBYSCORE', p..'leases', '-inf', now, 'LIMIT', 0, 1000)) do
  redis.call('ZREM', p..'leases', id)
  redis.call('HDEL', p..'owner', id)
  local q = qof(id)
  if q then ready(id, q, now, true) end
end
local out, dropped = {}, {}
local got = 0
-- A fresh lease token per cycle, from a counter that never goes back: a job's
-- next claim is always another cycle's, so its token is always another.
local token
for _, q in ipairs(queues) do
  if got >= limit then break end
  local ids = redis.call('LPOP', p..'q:'..q, limit - got)
  if ids then
    for _, id in ipairs(ids) do
      local payload = redis.call('HGET', p..'jobs', id)
      if payload then
        -- '<n>@<worker>': the lease holder can be read off the token.
        token = token or (redis.call('INCR', p..'claims')..'@'..worker)
        redis.call('ZADD', p..'leases', now + lease, id)
        redis.call('HSET', p..'owner', id, token)
        out[#out+1] = id; out[#out+1] = q; out[#out+1] = payload; out[#out+1] = token
        got = got + 1
      else
        -- An id whose payload is gone (deleted by hand, evicted): nothing to run.
        -- Drop what is left of it, free its key, and tell the caller, who logs it.
        redis.call('HDEL', p..'meta', id)
        leave(id, now)
        dropped[#dropped+1] = id; dropped[#dropped+1] = q
      end
    end
  end
end
if kept then redis.call('ZREMRANGEBYSCORE', p..'results', '-inf', now) end
-- An operator's cancels of this worker's runs (a small hash, mostly empty).
local cancel = {}
if redis.call('HLEN', p..'cancel') > 0 then
  local asked = redis.call('HGETALL', p..'cancel')
  for j = 1, #asked, 2 do
    local id, tok = asked[j], asked[j+1]
    if redis.call('HGET', p..'owner', id) ~= tok then
      redis.call('HDEL', p..'cancel', id)  -- that claim ended: the request goes with it
    else
      local at = string.find(tok, '@', 1, true)
      if at and string.sub(tok, at + 1) == worker then
        cancel[#cancel+1] = id; cancel[#cancel+1] = tok
      end
    end
  end
end
wake_left(queues)
return {out, refused, dropped, cancel}
"""
)

HEARTBEAT = (
    LIB
    + """
local now, worker, lease, info = clock(), ARGV[2], tonumber(ARGV[3]), ARGV[4]
local lost = {}
for i = 5, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i+1]
  if redis.call('HGET', p..'owner', id) == token then
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

# The heartbeat for Redis 7 and later, allowed past maxmemory: its writes only
# renew what exists. A full store refused the plain one (its first write, ZADD, is
# one Redis refuses then) but not the cycle (whose first write frees memory), so
# leases ran out on live workers and their jobs were claimed again and again.
HEARTBEAT_OOM = "#!lua flags=allow-oom\n" + HEARTBEAT

# Each id's {state, dead info or result} (the ids: ARGV[2] on), in one round trip
# however many jobs result()'s waiters wait on.
STATUS = (
    LIB
    + """
local now = clock()
move_due(now)
wake_left({})
local function status(id)
  if redis.call('ZSCORE', p..'leases', id) then return {'running'} end
  if redis.call('ZSCORE', p..'retry', id) then return {'retrying'} end
  if redis.call('ZSCORE', p..'sched', id) then return {'scheduled'} end
  if redis.call('HEXISTS', p..'jobs', id) == 1 then
    -- A job behind its key's head is scheduled until its own due time (in meta).
    local key = redis.call('HGET', p..'okey', id)
    local m = redis.call('HGET', p..'meta', id)
    if key and m and redis.call('LINDEX', p..'k:'..key, 0) ~= id
       and tonumber(string.sub(m, string.find(m, '\t', 1, true) + 1)) > now then
      return {'scheduled'}
    end
    return {'queued'}
  end
  local dead = redis.call('HGET', p..'deadinfo', id)
  if dead then return {'dead', dead} end
  local done = redis.call('GET', p..'done:'..id)
  if done then return {'done', unpack_done(done)[1]} end
  local result = redis.call('GET', p..'result:'..id)  -- kept by an earlier release
  if result then return {'done', result} end
  return {'unknown'}
end
local found = {}
for i = 2, #ARGV do found[#found + 1] = status(ARGV[i]) end
return found
"""
)

DEAD_MOVE = (
    LIB
    + """
local now, retry, all = clock(), ARGV[2] == '1', ARGV[3] == '1'
local ids = {}
if all then ids = redis.call('ZRANGE', p..'dead', 0, -1) else
  for i = 4, #ARGV do ids[#ids+1] = ARGV[i] end
end
local n = 0
for _, id in ipairs(ids) do
  local info = redis.call('HGET', p..'deadinfo', id)
  -- A dead job whose id is a live job's again (enqueued anew) stays dead.
  if info and not (retry and redis.call('HEXISTS', p..'jobs', id) == 1) then
    n = n + 1
    redis.call('ZREM', p..'dead', id)
    redis.call('HDEL', p..'deadinfo', id)
    if retry then
      local d = cjson.decode(info)
      redis.call('HSET', p..'jobs', id, d.payload)
      redis.call('SADD', p..'queues', d.queue)
      if type(d.key) == 'string' and join(id, d.key) then
        redis.call('HSET', p..'meta', id, d.queue..'\t'..exact(now))
      else
        ready(id, d.queue, now, false)
      end
    end
  end
end
wake_left({})
return n
"""
)


SAVE = (
    LIB
    + """
local id, token, payload, lease = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
if redis.call('HGET', p..'owner', id) ~= token or redis.call('HEXISTS', p..'jobs', id) == 0 then
  return 0
end
redis.call('HSET', p..'jobs', id, payload)
redis.call('ZADD', p..'leases', clock() + lease, id)
return 1
"""
)

# Seconds until the earliest delayed or retry job falls due or lease runs out (on
# Redis's clock: an expired lease gives its job back, and nobody rings for that),
# and that time; nothing when none is waiting.
NEXT_DUE = (
    LIB
    + """
local best
for _, zset in ipairs({'sched', 'retry', 'leases'}) do
  local first = redis.call('ZRANGE', p..zset, 0, 0, 'WITHSCORES')
  if first[2] and (not best or tonumber(first[2]) < best) then best = tonumber(first[2]) end
end
if not best then return {} end
return {string.format('%.6f', best - clock()), string.format('%.6f', best)}
"""
)
