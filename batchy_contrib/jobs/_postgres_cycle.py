"""The PostgreSQL job store's worker steps: the cycle (outcomes in, claims out), heartbeat, advance.

Both run on every worker's every turn, so their plans matter more than any
other statement's. A note on those plans: a claimed job is found by its id and
its lease token alone. A job holds a token exactly while it is claimed (state 1;
the ``jobs_claimed`` check holds every write to that), so a token that matches
says the claim still holds. Saying ``state = 1`` as well would let the planner
read the jobs through ``jobs_lease``, the partial index of every running job,
once ANALYZE saw few running jobs (a queue that was idle, or had a backlog
waiting): then each outcome was compared with every job all workers run, three
times per turn (``tests/jobs/test_postgres_plans.py`` counts the rows). In the
same way a key's next job is found by its key, in the key's index, never by
``state = 2`` (the index of every job waiting behind a head).

These functions (and the push, ``next_due`` and ``retry_dead`` of
``_postgres_sql``) run with ``enable_seqscan = off``. Statistics taken while the
table was nearly empty (a new queue, analyzed before its first backlog) make a
scan of the table look cheaper than a hundred probes of its primary key, and
each turn, heartbeat and keyed push then read every job (20,000 rows to renew
100 leases; 5.8 million for a push of 200 keyed jobs, a scan per key). Every
statement here has an index made for it; the setting only stops the
planner from trading those probes for a scan that grows with the table. And
``jit = off``: a statement whose only plan is a scan (of a small table, the
workers') costs more than JIT's threshold with scans disabled, and compiling
it took 25 ms on each run.

Like every function of the store's, they run with the catalog alone on their
``search_path`` (see ``_postgres_sql``).

``{s}`` is the quoted schema, ``{chan}`` the NOTIFY channel and ``{space}`` the
advisory lock space of ordering keys (see ``_postgres_sql``).
"""

from __future__ import annotations

__all__ = ["ADVANCE", "CYCLE", "HEARTBEAT"]

# The worker's turn. A migration that changes it runs its current text (CREATE OR
# REPLACE): keep it working on the tables of every version it migrates from.
CYCLE = """
-- Outcomes in, claims out: rows ('c', id, queue, payload, token) for claims,
-- ('r', id) for refused outcomes, ('x', id, token) for the claims of this worker
-- an operator cancelled and ('m', NULL, queue) for queues with ready jobs left.
-- Only rows whose token still holds are touched, found by id and token alone (see
-- the module's note on plans: no statement here that looks up a claim says state = 1).
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
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off
SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
  t float8 := {s}.clock();
  o_ids text[];
  k_ids text[];  -- the outcomes' jobs that have an ordering key, and their keys
  k_keys text[];
  later text[] := ARRAY[]::text[];
  busy text[];
  applied bigint[];  -- the outcomes applied, by position: a call may name a job twice
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
      -- Read by id alone, the keys kept by FILTER: "okey IS NOT NULL" in the WHERE
      -- lets the planner read them through jobs_okey, every keyed job there is, on
      -- every turn, when statistics taken before a keyed backlog say it is empty.
      SELECT coalesce(array_agg(j.id) FILTER (WHERE j.okey IS NOT NULL), '{{}}'),
             coalesce(array_agg(j.okey) FILTER (WHERE j.okey IS NOT NULL), '{{}}')
        INTO k_ids, k_keys FROM {s}.jobs j WHERE j.id = ANY(o_ids);
      IF p_wait THEN
        PERFORM {s}.lock_keys(k_keys);
      ELSE
        busy := {s}.try_lock_keys(k_keys);
        IF cardinality(busy) > 0 THEN
          later := ARRAY(SELECT u.i FROM unnest(k_ids, k_keys) u(i, k) WHERE u.k = ANY(busy));
        END IF;
      END IF;
    END IF;
    WITH o AS (SELECT e->>0 AS kind, e->>1 AS id, e->>2 AS token, e->>3 AS queue,
                      e->>4 AS payload, (e->>5)::float8 AS off, e->>6 AS result,
                      (e->>7)::float8 AS keep, e->>8 AS reason, e->>9 AS tb, x.n
               FROM jsonb_array_elements(p_outcomes) WITH ORDINALITY AS x(e, n)
               WHERE NOT (e->>1) = ANY(later)),
    done AS (
      DELETE FROM {s}.jobs j USING o
      WHERE o.kind = 'done' AND j.id = o.id AND j.token = o.token
      RETURNING j.id, j.okey, j.queue, j.payload, o.result, o.keep, o.n),
    kept AS (
      INSERT INTO {s}.results (id, result, expires, queue, okey, payload)
      SELECT d.id, d.result, t + d.keep, d.queue, d.okey, d.payload FROM done d WHERE d.keep > 0
      ON CONFLICT (id) DO UPDATE SET result = excluded.result, expires = excluded.expires,
        queue = excluded.queue, okey = excluded.okey, payload = excluded.payload),
    died AS (
      DELETE FROM {s}.jobs j USING o
      WHERE o.kind = 'dead' AND j.id = o.id AND j.token = o.token
      -- Without a payload of its own, it keeps the one it was claimed with.
      RETURNING j.id, j.okey, coalesce(nullif(o.queue, ''), j.queue) AS queue,
                coalesce(o.payload, j.payload) AS payload, o.reason, o.tb, o.n),
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
      RETURNING j.id, j.queue, o.kind, o.n)
    SELECT
      ARRAY(SELECT x.n FROM done x UNION ALL SELECT x.n FROM died x
            UNION ALL SELECT x.n FROM again x),
      ARRAY(SELECT x.okey FROM done x WHERE x.okey IS NOT NULL
            UNION ALL SELECT x.okey FROM died x WHERE x.okey IS NOT NULL),
      (SELECT count(*) FROM died),
      ARRAY(SELECT DISTINCT x.queue FROM again x)
    INTO applied, gone, buried, woke;
    -- A retry sets a new due time and a release makes a job ready: wake its queue.
    FOREACH q IN ARRAY woke LOOP PERFORM {s}.wake(q, true); END LOOP;
    -- (Usually every outcome was applied: then there is nothing to compare, one by one.)
    IF cardinality(applied) + cardinality(later) < cardinality(o_ids) THEN
      RETURN QUERY SELECT 'r'::text, x.i, NULL::text, NULL::text, NULL::text
        FROM unnest(o_ids) WITH ORDINALITY AS x(i, n)
        WHERE NOT x.n = ANY(applied) AND NOT x.i = ANY(later);
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
  -- (SKIP LOCKED: two cycles never wait on each other for the same rows; an
  -- array of ids, as for claims below, so no plan scans the table for them).
  FOR r IN UPDATE {s}.jobs j SET state = 0, owner = NULL, lease = NULL, token = NULL
      WHERE j.id = ANY(ARRAY(SELECT x.id FROM {s}.jobs x WHERE x.state = 1 AND x.lease < t
                             ORDER BY x.lease LIMIT 1000 FOR UPDATE SKIP LOCKED))
        AND j.lease < t  -- (only a claimed job has a lease: no state = 1, see above)
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
        -- by address does not see, so it would stay locked and unclaimed. And
        -- as an array: "id IN (...)" may be planned as a hash join over a scan
        -- of the whole table, which costs more than the claim as soon as it
        -- holds a few thousand jobs.
        WHERE j.id = ANY(ARRAY(SELECT x.id FROM {s}.jobs x
                       WHERE x.queue = q AND x.state = 0 AND x.due <= t
                       ORDER BY x.due, x.seq LIMIT p_limit - got FOR UPDATE SKIP LOCKED))
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
      -- The queue's first due time, from the index in due order (an EXISTS may be
      -- planned as a scan of the table that reads every row of a queue with none due).
      IF (SELECT x.due FROM {s}.jobs x WHERE x.queue = q AND x.state = 0
          ORDER BY x.due LIMIT 1) <= t
      THEN RETURN QUERY SELECT 'm'::text, NULL::text, q, NULL::text, NULL::text;
      END IF;
    END LOOP;
  END IF;
  IF p_prune > 0 THEN
    -- Expired rows go in batches: no cycle ever holds a long delete. A row another
    -- transaction holds is left for a later prune: an expired unique key taken over
    -- by a push in an application's open transaction held this turn's claims (and,
    -- the process's turns being one at a time, every job of the process) until that
    -- transaction ended.
    DELETE FROM {s}.results x WHERE x.ctid = ANY(ARRAY(
      SELECT y.ctid FROM {s}.results y WHERE y.expires < t LIMIT p_prune
      FOR UPDATE SKIP LOCKED));
    DELETE FROM {s}.uniques x WHERE x.ctid = ANY(ARRAY(
      SELECT y.ctid FROM {s}.uniques y WHERE y.expires < t LIMIT p_prune
      FOR UPDATE SKIP LOCKED));
    DELETE FROM {s}.workers x WHERE x.expires < t;
    DELETE FROM {s}.cancels x WHERE NOT EXISTS (  -- their claim ended some other way
      SELECT 1 FROM {s}.jobs j WHERE j.id = x.id AND j.token = x.token);
  END IF;
  -- An operator's cancels of this worker's runs (a small table, mostly empty).
  RETURN QUERY SELECT 'x'::text, c.id, NULL::text, NULL::text, c.token FROM {s}.cancels c
    JOIN {s}.jobs j ON j.id = c.id AND j.token = c.token
    WHERE c.owner = p_worker;
END $$;

"""

HEARTBEAT = """
-- Renew the leases still held; return the (id, token) pairs that were not. A row another
-- transaction holds is skipped, not waited for: that is this worker's own turn
-- handing in its outcome (it renews finished jobs too, until their outcomes are
-- in), or another worker's recovery of an expired lease. Waiting for it was a
-- deadlock: the turn locks its rows in the order its jobs finished, this in the
-- order they were claimed. A skipped job still held in this statement's snapshot
-- is not lost; it is renewed at the next beat if it is still held then.
-- (Dropped first: until version 14 it returned ids alone, and a function's
-- result type changes only by a drop; every migration that writes it runs this.)
DROP FUNCTION IF EXISTS {s}.heartbeat(text, text, float8, text[], text[]);
CREATE OR REPLACE FUNCTION {s}.heartbeat(
  p_worker text, p_info text, p_lease float8, p_ids text[], p_tokens text[]
) RETURNS TABLE (lost_id text, lost_token text)
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off
SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
  t float8 := {s}.clock();
  renewed text[];
BEGIN
  WITH h AS (
    UPDATE {s}.jobs j SET lease = t + p_lease
    WHERE j.id = ANY(ARRAY(
      SELECT x.id FROM unnest(p_ids, p_tokens) AS h(id, token)
        JOIN {s}.jobs x ON x.id = h.id AND x.token = h.token
      FOR UPDATE OF x SKIP LOCKED))
    RETURNING j.id)
  SELECT ARRAY(SELECT h.id FROM h) INTO renewed;
  INSERT INTO {s}.workers VALUES (p_worker, p_info, t + p_lease)
    ON CONFLICT (id) DO UPDATE SET info = excluded.info, expires = excluded.expires;
  IF cardinality(renewed) < cardinality(p_ids) THEN
    -- Pair by pair: a call may name a job twice, the live claim and an ended one.
    RETURN QUERY SELECT u.id, u.token FROM unnest(p_ids, p_tokens) AS u(id, token)
      WHERE NOT EXISTS (SELECT 1 FROM {s}.jobs j WHERE j.id = u.id AND j.token = u.token);
  END IF;
END $$;
"""

ADVANCE = """
-- A key's head left: its oldest remaining job becomes claimable (and wakes its
-- queue). Each key's oldest job, one probe of the key's index; its state is read
-- there, not asked of the row updated (see the note on plans above). Callers hold
-- the keys' locks, so no head of these keys changes meanwhile.
CREATE OR REPLACE FUNCTION {s}.advance(p_keys text[], t float8) RETURNS void
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off
SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE r record;
BEGIN
  FOR r IN UPDATE {s}.jobs j SET state = 0
      FROM (SELECT DISTINCT k FROM unnest(p_keys) k WHERE k IS NOT NULL) ks,
        LATERAL (SELECT x.id, x.state FROM {s}.jobs x WHERE x.okey = ks.k
                 ORDER BY x.seq LIMIT 1) h
      WHERE j.id = h.id AND h.state = 2
      RETURNING j.queue, j.due LOOP
    PERFORM {s}.wake(r.queue, r.due > t);
  END LOOP;
END $$;
"""
