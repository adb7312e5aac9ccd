"""The PostgreSQL job store's schema: its tables and the functions every step runs in one call.

Each step of the store (push, cycle, heartbeat, retry of dead jobs) is one
PL/pgSQL function, so a step is one round trip and one transaction, like a Lua
script in the Redis store. Every time they compare or store is the server's
(``clock()``: ``clock_timestamp()`` as Unix seconds); a time a worker hands in
arrives as an offset from the moment it was sent.

``{s}`` is the quoted schema, ``{chan}`` the NOTIFY channel (a string literal)
and ``{space}`` the advisory lock space of the schema's ordering keys.

Versions: :data:`VERSION` is the schema this release writes. A later release
that changes it appends to :data:`MIGRATIONS` the statements that take a schema
from the version before to its own; the table ``{s}.version`` says where a
database is.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS", "SCHEMA", "VERSION"]

#: The schema version this release creates and expects.
VERSION = 8

# The jobs table is a queue: rows are inserted, updated twice and deleted within
# seconds. Autovacuum's defaults (vacuum after 20% of the table is dead) let
# dead rows pile up under a steady load and slow every claim's index scan, so
# the tables that churn vacuum after 1% (or 1000 rows) and without throttling.
_CHURN = (
    "WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, "
    "autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0)"
)

# The worker's step. A migration that changes it runs its current text (CREATE OR
# REPLACE): keep it working on the tables of every version it migrates from.
_CYCLE = """
-- Outcomes in, claims out: rows ('c', id, queue, payload, token) for claims,
-- ('r', id) for refused outcomes, ('x', id, token) for the claims of this worker
-- an operator cancelled and ('m', NULL, queue) for queues with ready jobs left.
-- Only rows whose token still holds are touched.
-- p_outcomes is a JSON array of [kind, id, token, queue, payload, offset, result,
-- keep, reason, traceback]: one parameter the client writes in one C call, where
-- ten text arrays cost it more than the rest of a no-op job.
-- ('w', id) rows: outcomes not applied yet, their ordering key being held by a
-- push whose transaction is still open (an application's); the caller sends them
-- again (see _postgres_later) with p_wait: then the cycle waits for such keys in
-- the lock's fair queue (a key that open transactions hold one after another
-- would never be free at a try).
CREATE OR REPLACE FUNCTION {s}.cycle(
  p_outcomes jsonb, p_queues text[], p_limit int, p_worker text, p_lease float8,
  p_dead_max int, p_dead_age float8, p_prune int, p_wait boolean
) RETURNS TABLE (kind text, id text, queue text, payload text, token text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  t float8 := {s}.clock();
  o_ids text[];
  later text[] := ARRAY[]::text[];
  busy text[];
  applied text[];
  gone text[];
  buried int;
  tok text;
  got int := 0;
  n int;
  q text;
  woke text[];
  r record;
BEGIN
  -- A cycle lost in a server crash loses claims and outcomes of the last moment:
  -- their jobs run again, as after a worker's crash (at least once holds). So its
  -- commit need not wait for the disk; a push's does (an enqueued job is never lost).
  PERFORM set_config('synchronous_commit', 'off', true);
  IF jsonb_array_length(p_outcomes) > 0 THEN
    o_ids := ARRAY(SELECT e->>1 FROM jsonb_array_elements(p_outcomes) e);
    -- Keys of the jobs that may leave, locked before they leave (see lock_keys);
    -- no look-up at all while no job has a key: min() is one probe of the partial
    -- index whatever the statistics say (EXISTS may scan the table for none).
    -- A key held by an open transaction (a push in an application's transaction
    -- holds it until that ends) is not waited for: the rest of the turn goes on.
    IF (SELECT min(j.okey) FROM {s}.jobs j) IS NOT NULL THEN
      busy := ARRAY(SELECT j.okey FROM {s}.jobs j WHERE j.id = ANY(o_ids) AND j.okey IS NOT NULL);
      IF p_wait THEN
        PERFORM {s}.lock_keys(busy);
      ELSE
        busy := {s}.try_lock_keys(busy);
        IF cardinality(busy) > 0 THEN
          later := ARRAY(SELECT j.id FROM {s}.jobs j
                         WHERE j.id = ANY(o_ids) AND j.okey = ANY(busy));
        END IF;
      END IF;
    END IF;
    WITH o AS (SELECT e->>0 AS kind, e->>1 AS id, e->>2 AS token, e->>3 AS queue,
                      e->>4 AS payload, (e->>5)::float8 AS off, e->>6 AS result,
                      (e->>7)::float8 AS keep, e->>8 AS reason, e->>9 AS tb
               FROM jsonb_array_elements(p_outcomes) e WHERE NOT (e->>1) = ANY(later)),
    done AS (
      DELETE FROM {s}.jobs j USING o
      WHERE o.kind = 'done' AND j.id = o.id AND j.token = o.token AND j.state = 1
      RETURNING j.id, j.okey, j.queue, j.payload, o.result, o.keep),
    kept AS (
      INSERT INTO {s}.results (id, result, expires, queue, okey, payload)
      SELECT d.id, d.result, t + d.keep, d.queue, d.okey, d.payload FROM done d WHERE d.keep > 0
      ON CONFLICT (id) DO UPDATE SET result = excluded.result, expires = excluded.expires,
        queue = excluded.queue, okey = excluded.okey, payload = excluded.payload),
    died AS (
      DELETE FROM {s}.jobs j USING o
      WHERE o.kind = 'dead' AND j.id = o.id AND j.token = o.token AND j.state = 1
      RETURNING j.id, j.okey, coalesce(nullif(o.queue, ''), j.queue) AS queue,
                coalesce(o.payload, '') AS payload, o.reason, o.tb),
    grave AS (
      INSERT INTO {s}.dead SELECT d.id, d.queue, d.payload, d.reason, d.tb, t, d.okey
      FROM died d
      ON CONFLICT (id) DO UPDATE SET queue = excluded.queue, payload = excluded.payload,
        reason = excluded.reason, traceback = excluded.traceback, died = t,
        okey = excluded.okey),
    again AS (
      UPDATE {s}.jobs j SET state = 0, owner = NULL, lease = NULL, token = NULL,
        retrying = (o.kind = 'retry'),
        payload = CASE WHEN o.kind = 'retry' THEN o.payload ELSE j.payload END,
        due = CASE WHEN o.kind = 'retry' THEN t + o.off ELSE j.due END
      FROM o
      WHERE o.kind IN ('retry', 'release') AND j.id = o.id AND j.token = o.token
        AND j.state = 1
      RETURNING j.id, j.queue, o.kind)
    SELECT
      ARRAY(SELECT x.id FROM done x UNION ALL SELECT x.id FROM died x
            UNION ALL SELECT x.id FROM again x),
      ARRAY(SELECT x.okey FROM done x WHERE x.okey IS NOT NULL
            UNION ALL SELECT x.okey FROM died x WHERE x.okey IS NOT NULL),
      (SELECT count(*) FROM died),
      ARRAY(SELECT DISTINCT x.queue FROM again x)
    INTO applied, gone, buried, woke;
    -- A retry sets a new due time and a release makes a job ready: wake its queue.
    FOREACH q IN ARRAY woke LOOP PERFORM {s}.wake(q, true); END LOOP;
    -- (Usually every outcome was applied: then there is nothing to compare, id by id.)
    IF cardinality(applied) + cardinality(later) < cardinality(o_ids) THEN
      RETURN QUERY SELECT 'r'::text, x, NULL::text, NULL::text, NULL::text FROM unnest(o_ids) x
        WHERE NOT x = ANY(applied) AND NOT x = ANY(later);
    END IF;
    RETURN QUERY SELECT 'w'::text, x, NULL::text, NULL::text, NULL::text FROM unnest(later) x;
    IF buried > 0 THEN
      DELETE FROM {s}.dead WHERE died < t - p_dead_age;
      DELETE FROM {s}.dead d WHERE d.id IN (
        SELECT x.id FROM {s}.dead x ORDER BY x.died DESC OFFSET p_dead_max);
    END IF;
    IF array_length(gone, 1) > 0 THEN PERFORM {s}.advance(gone, t); END IF;
  END IF;
  -- An expired lease means its worker died or stalled: give the job back, once
  -- (SKIP LOCKED: two cycles never wait on each other for the same rows).
  FOR r IN UPDATE {s}.jobs j SET state = 0, owner = NULL, lease = NULL, token = NULL
      WHERE j.id IN (SELECT x.id FROM {s}.jobs x WHERE x.state = 1 AND x.lease < t
                     ORDER BY x.lease LIMIT 1000 FOR UPDATE SKIP LOCKED)
        AND j.state = 1 AND j.lease < t
      RETURNING j.queue LOOP
    PERFORM {s}.wake(r.queue, false);
  END LOOP;
  -- One fresh token per cycle: a job's next claim is always another cycle's.
  tok := md5(random()::text || clock_timestamp()::text || p_worker);
  FOREACH q IN ARRAY p_queues LOOP
    EXIT WHEN got >= p_limit;
    RETURN QUERY
      WITH c AS (
        UPDATE {s}.jobs j SET state = 1, owner = p_worker, lease = t + p_lease,
          retrying = false, token = tok
        -- By id, not by the locked rows' addresses (ctid): a row updated after this
        -- statement's snapshot is locked in its newest version, which a look-up
        -- by address does not see, so it would stay locked and unclaimed.
        WHERE j.id IN (SELECT x.id FROM {s}.jobs x
                       WHERE x.queue = q AND x.state = 0 AND x.due <= t
                       ORDER BY x.due, x.seq LIMIT p_limit - got FOR UPDATE SKIP LOCKED)
        RETURNING j.id, j.queue, j.payload, j.due, j.seq)
      SELECT 'c'::text, c.id, c.queue, c.payload, tok FROM c ORDER BY c.due, c.seq;
    GET DIAGNOSTICS n = ROW_COUNT;
    got := got + n;
  END LOOP;
  -- Full: ready jobs may be left that this worker had no room for. ('m', queue)
  -- rows name their queues, and the caller passes the wake-up on in its own
  -- process: every other process heard the NOTIFY that made them ready.
  IF got >= p_limit THEN
    FOREACH q IN ARRAY p_queues LOOP
      IF EXISTS (SELECT 1 FROM {s}.jobs x WHERE x.queue = q AND x.state = 0 AND x.due <= t)
      THEN RETURN QUERY SELECT 'm'::text, NULL::text, q, NULL::text, NULL::text;
      END IF;
    END LOOP;
  END IF;
  IF p_prune > 0 THEN
    -- Expired rows go in batches: no cycle ever holds a long delete.
    DELETE FROM {s}.results x WHERE x.ctid = ANY(ARRAY(
      SELECT y.ctid FROM {s}.results y WHERE y.expires < t LIMIT p_prune));
    DELETE FROM {s}.uniques x WHERE x.ctid = ANY(ARRAY(
      SELECT y.ctid FROM {s}.uniques y WHERE y.expires < t LIMIT p_prune));
    DELETE FROM {s}.workers x WHERE x.expires < t;
    DELETE FROM {s}.cancels x WHERE NOT EXISTS (  -- their claim ended some other way
      SELECT 1 FROM {s}.jobs j WHERE j.id = x.id AND j.token = x.token AND j.state = 1);
  END IF;
  -- An operator's cancels of this worker's runs (a small table, mostly empty).
  RETURN QUERY SELECT 'x'::text, c.id, NULL::text, NULL::text, c.token FROM {s}.cancels c
    JOIN {s}.jobs j ON j.id = c.id AND j.token = c.token AND j.state = 1
    WHERE c.owner = p_worker;
END $$;

"""

# Version 2: what an operator needs (batchy.jobs.Admin): cancels of running jobs,
# each for one claim, and blocked jobs (behind their key's head) by push order.
_OPERATING = """
CREATE TABLE IF NOT EXISTS {s}.cancels (
    id text PRIMARY KEY, owner text NOT NULL, token text NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_blocked ON {s}.jobs (seq) WHERE state = 2;
"""

# Version 3: the workers' per-minute activity counters (see _postgres_counts),
# which release 2 made outside the versioned tables on a worker's first write.
_COUNTS = """
CREATE TABLE IF NOT EXISTS {s}.counts (
    minute bigint NOT NULL, name text NOT NULL, n bigint NOT NULL, PRIMARY KEY (minute, name)
);
"""

# Version 4: the runs of sharded jobs, so they are listed without a scan (see _postgres_runs).
_RUNS = """
CREATE TABLE IF NOT EXISTS {s}.runs (
    name text NOT NULL, run text NOT NULL, started float8 NOT NULL, PRIMARY KEY (name, run)
);
"""

# Version 5: a done job is kept with what it was (queue, ordering key, payload)
# beside its result, so done jobs are listed by queue, type and key and shown with
# their arguments; the cycle writes them.
_DONE_JOBS = """
ALTER TABLE {s}.results ADD COLUMN IF NOT EXISTS queue text,
  ADD COLUMN IF NOT EXISTS okey text, ADD COLUMN IF NOT EXISTS payload text;
"""

# Version 6: the cycle takes its outcomes as one JSON parameter (and commits
# without waiting for the disk); the step of versions 1-5, ten arrays of outcome
# fields, goes: a schema keeps the one step its release calls.
_JSON_OUTCOMES = """
DROP FUNCTION IF EXISTS {s}.cycle(text[], text[], text[], text[], text[], float8[], text[],
  float8[], text[], text[], text[], int, text, float8, int, float8, int);
"""

# Version 8 (the cycle only): outcomes that were all applied skip the id-by-id
# comparison; a full cycle names the queues with ready jobs left ('m' rows) and
# its caller passes the wake-up on (see _postgres_listen), where it NOTIFYed
# every process.

# Version 7: a cycle need not wait for an ordering key held by an open
# transaction (try_lock_keys; 'w' rows; p_wait says when it does).
_TRY_LOCKS = """
DROP FUNCTION IF EXISTS {s}.cycle(jsonb, text[], int, text, float8, int, float8, int);
-- The keys of p_keys that could not be locked now (each one taken is held until
-- the transaction ends, as lock_keys'; none is waited for, so none can deadlock).
CREATE OR REPLACE FUNCTION {s}.try_lock_keys(p_keys text[]) RETURNS text[]
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  k text;
  busy text[] := ARRAY[]::text[];
BEGIN
  FOR k IN SELECT DISTINCT x FROM unnest(p_keys) x WHERE x IS NOT NULL ORDER BY x LOOP
    IF NOT pg_try_advisory_xact_lock({space}, hashtext(k)) THEN busy := busy || k; END IF;
  END LOOP;
  RETURN busy;
END $$;
"""

#: The current schema: tables, indexes and the step functions.
SCHEMA = f"""
CREATE TABLE {{s}}.jobs (
    seq bigint GENERATED ALWAYS AS IDENTITY,  -- push order, for ordering keys
    id text PRIMARY KEY,
    queue text NOT NULL,
    payload text NOT NULL,
    state smallint NOT NULL DEFAULT 0,  -- 0 waiting, 1 running, 2 behind its key's head
    due float8 NOT NULL,
    retrying boolean NOT NULL DEFAULT false,
    owner text,
    lease float8,
    token text,
    okey text
) {_CHURN};
CREATE INDEX jobs_ready ON {{s}}.jobs (queue, due, seq) WHERE state = 0;
CREATE INDEX jobs_lease ON {{s}}.jobs (lease) WHERE state = 1;
CREATE INDEX jobs_okey ON {{s}}.jobs (okey, seq) WHERE okey IS NOT NULL;
CREATE TABLE {{s}}.results (
    id text PRIMARY KEY, result text, expires float8 NOT NULL,
    queue text, okey text, payload text  -- what the done job was (version 5)
) {_CHURN};
CREATE INDEX results_expires ON {{s}}.results (expires);
CREATE TABLE {{s}}.dead (
    id text PRIMARY KEY, queue text NOT NULL, payload text NOT NULL, reason text NOT NULL,
    traceback text NOT NULL, died float8 NOT NULL, okey text
);
CREATE INDEX dead_died ON {{s}}.dead (died);
CREATE TABLE {{s}}.uniques (key text PRIMARY KEY, expires float8 NOT NULL) {_CHURN};
CREATE INDEX uniques_expires ON {{s}}.uniques (expires);
CREATE TABLE {{s}}.workers (id text PRIMARY KEY, info text NOT NULL, expires float8 NOT NULL);
CREATE TABLE {{s}}.queues (name text PRIMARY KEY);
{_OPERATING}
{_COUNTS}
{_RUNS}
-- The store's clock: the only one that decides leases and due times.
CREATE FUNCTION {{s}}.clock() RETURNS float8 LANGUAGE sql VOLATILE
AS $$ SELECT extract(epoch FROM clock_timestamp())::float8 $$;

-- Ordering keys change heads under a per-key lock taken before any read of the
-- key, in sorted order (no deadlocks): a push that sees the head (and waits
-- behind it) and the cycle that removes the head never pass each other.
CREATE FUNCTION {{s}}.lock_keys(p_keys text[]) RETURNS void LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE k text;
BEGIN
  FOR k IN SELECT DISTINCT x FROM unnest(p_keys) x WHERE x IS NOT NULL ORDER BY x LOOP
    PERFORM pg_advisory_xact_lock({{space}}, hashtext(k));
  END LOOP;
END $$;

-- Wake-ups: '1<queue>' jobs are ready, 'd<queue>' a new due time was set.
CREATE FUNCTION {{s}}.wake(p_queue text, p_due boolean) RETURNS void LANGUAGE sql AS $$
  SELECT pg_notify({{chan}}, CASE WHEN p_due THEN 'd' ELSE '1' END || p_queue)
$$;

-- A key's head left: its oldest remaining job becomes claimable (and wakes its queue).
CREATE FUNCTION {{s}}.advance(p_keys text[], t float8) RETURNS void LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE r record;
BEGIN
  FOR r IN UPDATE {{s}}.jobs j SET state = 0
      FROM (SELECT okey, min(seq) AS seq FROM {{s}}.jobs
            WHERE okey = ANY(p_keys) GROUP BY okey) h
      WHERE j.okey = h.okey AND j.seq = h.seq AND j.state = 2
      RETURNING j.queue, j.due LOOP
    PERFORM {{s}}.wake(r.queue, r.due > t);
  END LOOP;
END $$;

CREATE FUNCTION {{s}}.push(
  p_ids text[], p_queues text[], p_payloads text[], p_offsets float8[], p_uniques text[],
  p_ttls float8[], p_keys text[]
) RETURNS boolean[] LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  t float8 := {{s}}.clock();
  pushed boolean[] := ARRAY[]::boolean[];
  ok boolean;
  st smallint;
  at float8;
BEGIN
  PERFORM {{s}}.lock_keys(p_keys);
  FOR i IN 1 .. coalesce(array_length(p_ids, 1), 0) LOOP
    ok := true;
    IF p_uniques[i] IS NOT NULL THEN
      INSERT INTO {{s}}.uniques AS u (key, expires) VALUES (p_uniques[i], t + p_ttls[i])
        ON CONFLICT (key) DO UPDATE SET expires = excluded.expires WHERE u.expires <= t;
      ok := FOUND;
    END IF;
    IF ok THEN
      at := t + coalesce(p_offsets[i], 0);
      st := 0;
      IF p_keys[i] IS NOT NULL AND EXISTS (SELECT 1 FROM {{s}}.jobs WHERE okey = p_keys[i]) THEN
        st := 2;
      END IF;
      INSERT INTO {{s}}.jobs (id, queue, payload, due, okey, state)
        VALUES (p_ids[i], p_queues[i], p_payloads[i], at, p_keys[i], st)
        ON CONFLICT (id) DO NOTHING;
      ok := FOUND;
      IF ok AND st = 0 THEN
        PERFORM {{s}}.wake(p_queues[i], at > t);  -- sent on commit, folded per queue
      END IF;
    END IF;
    pushed := pushed || ok;
  END LOOP;
  INSERT INTO {{s}}.queues SELECT DISTINCT q FROM unnest(p_queues) q ON CONFLICT DO NOTHING;
  RETURN pushed;
END $$;

{_TRY_LOCKS}
{_CYCLE}
-- Renew the leases still held; return the ids that were not.
CREATE FUNCTION {{s}}.heartbeat(
  p_worker text, p_info text, p_lease float8, p_ids text[], p_tokens text[]
) RETURNS SETOF text LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  t float8 := {{s}}.clock();
  renewed text[];
BEGIN
  WITH h AS (
    UPDATE {{s}}.jobs j SET lease = t + p_lease
    FROM unnest(p_ids, p_tokens) AS h(id, token)
    WHERE j.id = h.id AND j.token = h.token AND j.state = 1 RETURNING j.id)
  SELECT ARRAY(SELECT h.id FROM h) INTO renewed;
  INSERT INTO {{s}}.workers VALUES (p_worker, p_info, t + p_lease)
    ON CONFLICT (id) DO UPDATE SET info = excluded.info, expires = excluded.expires;
  RETURN QUERY SELECT x FROM unnest(p_ids) x WHERE NOT x = ANY(renewed);
END $$;

-- Seconds until the first delayed or retry job of p_queues falls due, or the
-- first lease runs out (its job comes back, and nobody rings for that).
CREATE FUNCTION {{s}}.next_due(p_queues text[]) RETURNS float8 LANGUAGE sql AS $$
  SELECT least(
    (SELECT min(d.due) FROM unnest(p_queues) q, LATERAL (
       SELECT x.due FROM {{s}}.jobs x WHERE x.queue = q AND x.state = 0
       ORDER BY x.due LIMIT 1) d),
    (SELECT min(x.lease) FROM {{s}}.jobs x WHERE x.state = 1)) - {{s}}.clock()
$$;

-- Dead jobs back on their queues (all when p_ids is NULL); how many moved.
CREATE FUNCTION {{s}}.retry_dead(p_ids text[]) RETURNS int LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  t float8 := {{s}}.clock();
  r record;
  n int := 0;
  st smallint;
BEGIN
  PERFORM {{s}}.lock_keys(ARRAY(SELECT d.okey FROM {{s}}.dead d
                                WHERE p_ids IS NULL OR d.id = ANY(p_ids)));
  FOR r IN DELETE FROM {{s}}.dead d WHERE p_ids IS NULL OR d.id = ANY(p_ids)
           RETURNING d.id, d.queue, d.payload, d.okey LOOP
    st := 0;
    IF r.okey IS NOT NULL AND EXISTS (SELECT 1 FROM {{s}}.jobs WHERE okey = r.okey) THEN
      st := 2;
    END IF;
    INSERT INTO {{s}}.jobs (id, queue, payload, due, okey, state)
      VALUES (r.id, r.queue, r.payload, t, r.okey, st) ON CONFLICT (id) DO NOTHING;
    INSERT INTO {{s}}.queues VALUES (r.queue) ON CONFLICT DO NOTHING;
    IF st = 0 THEN PERFORM {{s}}.wake(r.queue, false); END IF;
    n := n + 1;
  END LOOP;
  RETURN n;
END $$;
"""

#: ``MIGRATIONS[v]`` takes a schema from version ``v`` to ``v + 1``.
MIGRATIONS: dict[int, str] = {
    1: _OPERATING + _CYCLE,
    2: _COUNTS,
    3: _RUNS,
    4: _DONE_JOBS + _CYCLE,
    5: _JSON_OUTCOMES + _CYCLE,
    6: _TRY_LOCKS + _CYCLE,
    7: _CYCLE,
}
