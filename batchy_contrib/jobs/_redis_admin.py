"""What an operator reads and does in the Redis job store: pages of jobs, one job, actions.

Every listing walks a structure the store keeps anyway, from the cursor on, and
never scans the keyspace: a queue's list (``LRANGE`` from the cursor's place,
found again with ``LINDEX``, or ``LPOS`` within the places before it when the
list moved), the ``sched``, ``retry``, ``leases`` and ``dead`` sorted sets and
``results`` (kept results by expiry, written by the cycle, each done job's
record in ``done:<id>``) from the cursor's rank, an ordering key's list, and
for blocked jobs the ``okey`` hash (whole, by id, while it holds at most
``budget`` jobs or is a listpack; else with ``HSCAN``, whose pages end where its batches do: see
the script). A call examines at most ``budget`` entries beyond the page:
filters the structure does not index (a queue among scheduled jobs) may end a
page short, with a cursor to go on from. Deleting a queued job is an ``LREM`` on its
queue's list, which reads the list up to the job: the price of keeping queues
as lists, which make every claim O(1).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import redis.asyncio as aioredis

from batchy.jobs import Backend, StoredJob

from ._redis_scripts import LIB

__all__ = ["RedisOperating"]

# Where a job is, and its record, as the listings and actions read it: as of now,
# once the jobs whose time came are moved to their queues (see move_due).
_WHERE = r"""
move_due(clock())
wake_left({})
local function where(id)
  if redis.call('HEXISTS', p..'jobs', id) == 0 then
    if redis.call('ZSCORE', p..'dead', id) then return 'dead', '', nil end
    return nil
  end
  local q = qof(id) or ''
  local key = redis.call('HGET', p..'okey', id)
  if redis.call('ZSCORE', p..'leases', id) then return 'running', q, key end
  if redis.call('ZSCORE', p..'retry', id) then return 'retrying', q, key end
  if redis.call('ZSCORE', p..'sched', id) then return 'scheduled', q, key end
  if key and redis.call('LINDEX', p..'k:'..key, 0) ~= id then return 'blocked', q, key end
  return 'queued', q, key
end
local function dead_record(id)
  return {'dead', id, redis.call('HGET', p..'deadinfo', id), redis.call('ZSCORE', p..'dead', id)}
end
local function record(id)
  local state, q, key = where(id)
  if not state then return nil end
  if state == 'dead' then return dead_record(id) end
  local m = redis.call('HGET', p..'meta', id) or '\t0'
  local due, worker, lease = string.sub(m, string.find(m, '\t', 1, true) + 1), '', '0'
  if state == 'retrying' or state == 'scheduled' then
    due = redis.call('ZSCORE', p..(state == 'retrying' and 'retry' or 'sched'), id)
  elseif state == 'running' then
    lease = redis.call('ZSCORE', p..'leases', id)
    local tok = redis.call('HGET', p..'owner', id) or ''
    local at = string.find(tok, '@', 1, true)
    if at then worker = string.sub(tok, at + 1) end
  end
  return {'job', id, q, state, redis.call('HGET', p..'jobs', id), key or '', due, worker, lease}
end
local function done_record(id)
  -- done:<id> holds the result and what the job was; result:<id>, from releases
  -- before that, the result alone.
  local r = p..'done:'..id
  local done, was = redis.call('GET', r), nil
  if done then
    was = unpack_done(done)
  else
    r = p..'result:'..id
    was = {redis.call('GET', r), '', '', ''}
    if not was[1] then return nil end
  end
  local expires = redis.call('ZSCORE', p..'results', id)
  if not expires then  -- kept before results were indexed: its expiry from its TTL
    expires = string.format('%.6f', clock() + redis.call('PTTL', r) / 1000)
  end
  return {'done', id, was[1], expires, was[2] or '', was[3] or '', was[4] or ''}
end
"""

# ARGV: prefix, state, queue, key, limit, budget, cursor (3 values, '' for none).
# Returns {rows, cursor (empty: the last page), Redis's clock}.
LIST = (
    LIB
    + _WHERE
    + r"""
local state, queue, key = ARGV[2], ARGV[3], ARGV[4]
local limit, budget = tonumber(ARGV[5]), tonumber(ARGV[6])
local c1, c2, c3 = ARGV[7], ARGV[8], ARGV[9]
local rows, marks, examined, lastmark = {}, {}, 0, nil
-- One examined entry, with the cursor that resumes after it; `r` false or nil
-- when it is not listed. The page is full at limit + 1 (that one only says there
-- is more), and the call is done at `budget` entries examined.
local function take(r, mark)
  examined, lastmark = examined + 1, mark
  if r and r[1] == 'done' and ((queue ~= '' and r[5] ~= queue) or (key ~= '' and r[6] ~= key)) then
    r = false
  end
  if r and (queue == '' or r[1] ~= 'job' or r[3] == queue) then
    rows[#rows+1] = r; marks[#marks+1] = mark
  end
  return #rows > limit or examined >= budget
end
local function only(r, wanted)
  if r and r[1] == 'job' and r[4] ~= wanted then return false end
  return r
end
-- The place after the cursor (c2 its index, c3 its id) in list `l`: where it was,
-- or before it (claims took the list's head), or up to a budget after it (jobs
-- handed back go to the head), or the start.
local function resume(l)
  if c2 == '' then return 0 end
  local idx = tonumber(c2)
  if redis.call('LINDEX', l, idx) == c3 then return idx + 1 end
  local pos = redis.call('LPOS', l, c3, 'MAXLEN', idx + 1 + budget)
  return pos and pos + 1 or 0
end
if key ~= '' and state ~= 'dead' and state ~= 'done' then
  -- Every state of one key, in push order, from the key's own list.
  local l = p..'k:'..key
  local start = resume(l)
  for i, id in ipairs(redis.call('LRANGE', l, start, start + budget - 1)) do
    if take(only(record(id), state), {'', tostring(start + i - 1), id}) then break end
  end
elseif state == 'queued' then
  local names = {queue}
  if queue == '' then names = redis.call('SMEMBERS', p..'queues'); table.sort(names) end
  for _, q in ipairs(names) do
    if c1 == '' or q >= c1 then
      local l = p..'q:'..q
      local start = (q == c1) and resume(l) or 0
      local full = false
      for i, id in ipairs(redis.call('LRANGE', l, start, start + limit - #rows)) do
        full = take(record(id), {q, tostring(start + i - 1), id})
        if full then break end
      end
      if full then break end
    end
  end
elseif state == 'scheduled' or state == 'retrying' or state == 'dead' or state == 'done' then
  local z = p..({scheduled = 'sched', retrying = 'retry', dead = 'dead', done = 'results'})[state]
  local desc = state == 'dead' or state == 'done'
  local from = 0
  if c2 ~= '' then
    local rank = redis.call(desc and 'ZREVRANK' or 'ZRANK', z, c2)
    if rank and redis.call('ZSCORE', z, c2) == c1 then
      from = rank + 1
    else
      -- The cursor's member left: its place, found again from its score and id
      -- (Redis orders members of one score by their bytes). Not by counting the
      -- members passed over: some of those may leave too, and as many unlisted
      -- ones would be skipped.
      from = redis.call('ZCOUNT', z, desc and '('..c1 or '-inf', desc and '+inf' or '('..c1)
      local hi = from + redis.call('ZCOUNT', z, c1, c1)
      while from < hi do
        local mid = math.floor((from + hi) / 2)
        local m = redis.call(desc and 'ZREVRANGE' or 'ZRANGE', z, mid, mid)[1]
        if (desc and m < c2) or (not desc and m > c2) then hi = mid else from = mid + 1 end
      end
    end
  end
  local found = redis.call(desc and 'ZREVRANGE' or 'ZRANGE', z, from, from + budget - 1,
                           'WITHSCORES')
  for i = 1, #found, 2 do
    local id, r = found[i], nil
    -- The dead set's entry itself, not where its id is: an id enqueued anew is
    -- live too, and the dead listing must show the entry it kept.
    if state == 'done' then r = done_record(id)
    elseif state == 'dead' then r = dead_record(id)
    else r = only(record(id), state) end
    if r and state == 'dead' and r[1] == 'dead' and (queue ~= '' or key ~= '') then
      local d = cjson.decode(r[3])
      if (queue ~= '' and d.queue ~= queue) or (key ~= '' and d.key ~= key) then r = false end
    end
    if take(r, {found[i + 1], id, ''}) then break end
  end
elseif state == 'running' then
  local ids = redis.call('ZRANGE', p..'leases', 0, -1)  -- as many as jobs run: few
  table.sort(ids)
  for _, id in ipairs(ids) do
    if (c1 == '' or id > c1) and take(record(id), {id, '', ''}) then break end
  end
elseif state == 'blocked' then
  -- The keyed jobs (okey) that are not their key's head. c2, when c3 is 'id': the
  -- greatest id a page read in id order listed (every job up to it was listed
  -- then). A cursor whose c3 is empty is an earlier release's, whose c2 counted
  -- places in the HSCAN batch at c1: read as an id, it skipped the jobs whose ids
  -- sort before that number. It resumes at its batch's start instead (jobs of that
  -- batch listed twice, none missed).
  local floor = c3 == 'id' and c2 or ''
  local whole = false
  if c1 == '' or c1 == '0' then
    -- A small hash (a listpack) is returned whole by every HSCAN, whatever its
    -- COUNT: read it whole and by id too, or a page ran to hundreds past limit.
    whole = redis.call('HLEN', p..'okey') <= budget
      or redis.call('OBJECT', 'ENCODING', p..'okey') ~= 'hashtable'
  end
  if whole then
    -- Few keyed jobs: all of them read and sorted by id, so a page may end after
    -- any job, as exactly as in a sorted set.
    local ids = redis.call('HKEYS', p..'okey')
    table.sort(ids)
    for _, id in ipairs(ids) do
      if (floor == '' or id > floor) and take(only(record(id), 'blocked'), {'0', id, 'id'}) then
        break
      end
    end
  else
    -- More: HSCAN, whose cursor alone keeps its promise that a job there
    -- throughout the listing is returned (maybe twice, when the hash shrinks). No
    -- place inside a batch can be resumed: read again after deletions, a batch is
    -- another one (COUNT reads on to make up for them). So a page ends where a
    -- batch does, a few jobs past `limit` maybe, and only a row that ends a batch
    -- has a cursor of its own (the others, none: no page may end there).
    local scan = c1 == '' and '0' or c1
    repeat
      local count = math.max(1, math.min(limit - #rows, budget - examined))
      local batch = redis.call('HSCAN', p..'okey', scan, 'COUNT', count)
      local before = #rows
      scan = batch[1]
      for i = 1, #batch[2], 2 do
        local id = batch[2][i]
        take((floor == '' or id > floor) and only(record(id), 'blocked'), {})
      end
      if #rows > before and scan ~= '0' then marks[#rows] = {scan, floor, 'id'} end
    until scan == '0' or #rows >= limit or examined >= budget
    local nxt = scan == '0' and {} or {scan, floor, 'id'}
    return {rows, marks, nxt, exact(clock())}
  end
end
local nxt = {}
if #rows > limit then
  nxt = marks[limit]
  rows[limit + 1], marks[limit + 1] = nil, nil
elseif examined >= budget and lastmark then
  nxt = lastmark
end
return {rows, marks, nxt, exact(clock())}
"""
)

# ARGV: prefix, ids. Returns {a record or empty for each id, in order; Redis's clock}.
JOB = (
    LIB
    + _WHERE
    + r"""
local found = {}
for i = 2, #ARGV do found[#found + 1] = record(ARGV[i]) or done_record(ARGV[i]) or {} end
return {found, exact(clock())}
"""
)

# ARGV: prefix, action, the states it applies to (comma-separated), ids. All or
# none: returns the refused ids with their states, and changed nothing if any.
ACT = (
    LIB
    + _WHERE
    + r"""
local action, allowed = ARGV[2], ',' .. ARGV[3] .. ','
local refused, found = {}, {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local state, q, key = where(id)
  if not state and redis.call('EXISTS', p..'done:'..id, p..'result:'..id) > 0 then
    state = 'done'
  end
  -- A dead job's id enqueued anew is both: Backend.refusals says which one an action means.
  if state and state ~= 'dead' and redis.call('ZSCORE', p..'dead', id) then
    if action == 'delete_dead' then state = 'dead'
    elseif action == 'retry_dead' then state = 'dead and ' .. state end
  end
  state = state or 'unknown'
  if not string.find(allowed, ',' .. state .. ',', 1, true) then
    refused[#refused+1] = id; refused[#refused+1] = state
  end
  found[id] = {state, q}
end
-- The dead set's actions are the store's dead_move, once nothing was refused.
if #refused > 0 or action == 'retry_dead' or action == 'delete_dead' then return refused end
local now = clock()
for i = 4, #ARGV do
  local id = ARGV[i]
  local state, q = found[id][1], found[id][2]
  if action == 'cancel' then
    redis.call('HSET', p..'cancel', id, redis.call('HGET', p..'owner', id))
  elseif action == 'run_now' then
    zrem('sched', id, q)
    zrem('retry', id, q)
    ready(id, q, now, false)
  elseif action == 'delete' then
    -- Its state now: a job that was blocked is queued if its head went just before.
    if where(id) == 'queued' then redis.call('LREM', p..'q:'..q, 1, id) end
    zrem('sched', id, q)
    zrem('retry', id, q)
    redis.call('HDEL', p..'jobs', id)
    redis.call('HDEL', p..'meta', id)
    leave(id, now)  -- a key's head: its next job becomes the head
  end
end
wake_left({})
return refused
"""
)


class RedisOperating:
    """The operating methods of :class:`RedisBackend` (a mixin: see the module's docstring)."""

    redis: aioredis.Redis
    prefix: str
    #: Entries a page examines at most beyond the page.
    page_budget = 500
    # Ids one script reads at most. Redis serves no other client while a script
    # runs, and it spends about 1.6 us on a status, 4 us on a record (measured:
    # 20,000 statuses in one script held every other client 44 ms, as many records
    # 103 ms); a chunk costs it about 2 ms. Longer lists take a script per chunk,
    # one after the other, the answers kept in order (each chunk read at its moment).
    #: Ids of one ``statuses()`` script.
    status_chunk = 1000
    #: Ids of one ``jobs()`` script.
    record_chunk = 500

    @staticmethod
    def chunks(ids: Sequence[str], size: int) -> Iterator[Sequence[str]]:
        """``ids`` in slices of ``size`` (none for no ids: no round trip for nothing)."""
        for start in range(0, len(ids), size):
            yield ids[start : start + size]

    def _admin_script(self, name: str) -> Any:
        scripts: dict[str, Any] | None = getattr(self, "_admin_scripts", None)
        if scripts is None:
            sources = {"list": LIST, "job": JOB, "act": ACT}
            scripts = {n: self.redis.register_script(s) for n, s in sources.items()}
            self._admin_scripts = scripts
        return scripts[name]

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
        tag = state + "@key" if key is not None and state not in ("dead", "done") else state
        cursor = ["", "", ""] if after is None else Backend.read_cursor(after, tag, 3, self)
        if queue == "" or key == "":
            # The script reads '' as no filter; no job is in a queue '' (a push refuses
            # it) or has the key '' (a push stores it as no key).
            return [], None
        budget = max(self.page_budget, limit + 1)
        args = [self.prefix, state, queue or "", key or "", limit, budget, *cursor]
        rows, marks, nxt, store_now = await self._admin_script("list")(keys=[], args=args)
        shift = now - float(store_now)  # Redis's times are reported on the caller's clock
        jobs = [
            replace(self._record(r, shift), after=Backend.make_cursor(tag, mark) if mark else None)
            for r, mark in zip(rows, marks, strict=True)
        ]
        return jobs, (Backend.make_cursor(tag, nxt) if nxt else None)

    async def jobs(self, job_ids: Sequence[str], now: float) -> list[StoredJob | None]:
        found: list[StoredJob | None] = []
        for chunk in self.chunks(job_ids, self.record_chunk):
            rows, store_now = await self._admin_script("job")(keys=[], args=[self.prefix, *chunk])
            shift = now - float(store_now)  # Redis's times are reported on the caller's clock
            found += [self._record(row, shift) if row else None for row in rows]
        return found

    async def act(self, action: str, ids: Sequence[str], now: float) -> dict[str, str]:
        allowed = ",".join(Backend.actions[action])
        args = [self.prefix, action, allowed, *ids]
        flat = await self._admin_script("act")(keys=[], args=args)
        refused = {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}
        if not refused and action == "retry_dead":
            await self.retry_dead(ids, now)
        elif not refused and action == "delete_dead":
            await self.delete_dead(ids)
        return refused

    async def retry_dead(self, ids: Sequence[str] | None, now: float) -> int:
        raise NotImplementedError  # the store's own

    async def delete_dead(self, ids: Sequence[str] | None) -> int:
        raise NotImplementedError  # the store's own

    @staticmethod
    def _record(row: list[Any], shift: float) -> StoredJob:
        kind, job_id = row[0], row[1]
        if kind == "dead":
            d = json.loads(row[2])
            key = d.get("key") if isinstance(d.get("key"), str) else None
            return StoredJob(
                job_id, d["queue"], "dead", d["payload"], key, reason=d["reason"],
                traceback=d["traceback"], died_at=float(row[3]) + shift,
            )  # fmt: skip
        if kind == "done":
            _, _, result, expires, queue, key, payload = row
            return StoredJob(
                job_id, queue, "done", payload, key or None, result=result or None,
                expires=float(expires) + shift,
            )  # fmt: skip
        _, _, queue, state, payload, key, due, worker, lease = row
        running = state == "running"
        return StoredJob(
            job_id, queue, state, payload or "", key or None, float(due) + shift,
            worker or None if running else None, float(lease) + shift if running else 0.0,
        )  # fmt: skip
