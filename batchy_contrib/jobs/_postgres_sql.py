"""The PostgreSQL job store's schema: its tables and the functions every step runs in one call.

Each step of the store (push, cycle, heartbeat, retry of dead jobs) is one
PL/pgSQL function (the worker's, cycle and heartbeat, are in ``_postgres_cycle``),
so a step is one round trip and one transaction, like a Lua script in the Redis
store. Every time they compare or store is the server's (``clock()``:
``clock_timestamp()`` as Unix seconds); a time a worker hands in
arrives as an offset from the moment it was sent.

``{s}`` is the quoted schema, ``{chan}`` the NOTIFY channel (a string literal)
and ``{space}`` the advisory lock space of the schema's ordering keys.

Versions: :data:`VERSION` is the schema this release writes. A later release
that changes it appends to :data:`MIGRATIONS` the statements that take a schema
from the version before to its own; the table ``{s}.version`` says where a
database is.
"""

from __future__ import annotations

from ._postgres_cycle import ADVANCE, CYCLE, HEARTBEAT

__all__ = ["MIGRATIONS", "SCHEMA", "VERSION"]

#: The schema version this release creates and expects.
VERSION = 16

# Every function runs with the catalog alone on its search_path (version 16, below).
PINNED = "SET search_path = pg_catalog, pg_temp"

# The jobs table is a queue: rows are inserted, updated twice and deleted within
# seconds. Autovacuum's defaults (vacuum after 20% of the table is dead) let
# dead rows pile up under a steady load and slow every claim's index scan, so
# the tables that churn vacuum after 1% (or 1000 rows) and without throttling.
_CHURN = (
    "WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, "
    "autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0)"
)

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

# Ordering keys change heads under a per-key lock taken before any read of the
# key: a push that sees the head (and waits behind it) and the cycle that removes
# the head never pass each other. A key's lock is its hash's, so the locks are
# taken in hash order (in key order, two keys of one hash could be taken in
# opposite orders by two steps: a deadlock). Each is held until the transaction
# ends, in the server's lock table (max_locks_per_transaction per connection,
# shared by all sessions): see _postgres_push for a push that overflows it.
# Version 9 (and the current text of version 7's try_lock_keys).
KEY_LOCKS = """
CREATE OR REPLACE FUNCTION {s}.lock_keys(p_keys text[]) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE h int;
BEGIN
  FOR h IN SELECT DISTINCT hashtext(x) FROM unnest(p_keys) x WHERE x IS NOT NULL ORDER BY 1
  LOOP
    PERFORM pg_advisory_xact_lock({space}, h);
  END LOOP;
END $$;
-- The keys of p_keys that could not be locked now (each one taken is held until
-- the transaction ends, as lock_keys'; none is waited for, so none can deadlock).
CREATE OR REPLACE FUNCTION {s}.try_lock_keys(p_keys text[]) RETURNS text[]
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
  h int;
  busy int[] := ARRAY[]::int[];
BEGIN
  FOR h IN SELECT DISTINCT hashtext(x) FROM unnest(p_keys) x WHERE x IS NOT NULL ORDER BY 1
  LOOP
    IF NOT pg_try_advisory_xact_lock({space}, h) THEN busy := busy || h; END IF;
  END LOOP;
  RETURN ARRAY(SELECT DISTINCT x FROM unnest(p_keys) x WHERE hashtext(x) = ANY(busy));
END $$;
"""

# Version 7: a cycle need not wait for an ordering key held by an open
# transaction (try_lock_keys; 'w' rows; p_wait says when it does).
_TRY_LOCKS = (
    """
DROP FUNCTION IF EXISTS {s}.cycle(jsonb, text[], int, text, float8, int, float8, int);
"""
    + KEY_LOCKS
)

# Version 8 (the cycle only): outcomes that were all applied skip the id-by-id
# comparison; a full cycle names the queues with ready jobs left ('m' rows) and
# its caller passes the wake-up on (see _postgres_listen), where it NOTIFYed
# every process.

# A job holds a lease token exactly while it is claimed: the worker's steps find
# claims by token alone (see _postgres_cycle), so every write must keep this.
_CLAIMED = "CONSTRAINT jobs_claimed CHECK ((state = 1) = (token IS NOT NULL))"

# Version 9: the check above, worker steps that look claims up by id and token,
# and keys' heads by key, whatever the statistics (see _postgres_cycle), and key
# locks taken in hash order (KEY_LOCKS).
# NOT VALID: no version wrote a row against it, and checking the rows there would
# hold the table (ACCESS EXCLUSIVE) for a scan while every worker waits.
_CLAIMS_BY_TOKEN = f"ALTER TABLE {{s}}.jobs ADD {_CLAIMED} NOT VALID;"

# Version 10: the functions that read jobs run with enable_seqscan = off (see
# _postgres_cycle: statistics of a nearly empty table made a scan of every job
# look cheaper than a probe per key or id), and a turn reads its outcomes' keys
# by id alone. The functions made only by SCHEMA get the setting here.
_NO_SCANS = """
ALTER FUNCTION {s}.push(text[], text[], text[], float8[], text[], float8[], text[])
  SET enable_seqscan = off SET jit = off;
ALTER FUNCTION {s}.next_due(text[]) SET enable_seqscan = off SET jit = off;
ALTER FUNCTION {s}.retry_dead(text[]) SET enable_seqscan = off SET jit = off;
"""

# Version 11: a push (and a retry of dead jobs) waits at most KEY_WAIT for an
# ordering key that another transaction holds, then fails with a message, where it
# waited for ever: for a transaction of the caller's own, which cannot end until
# the push returns, too. The heartbeat skips the rows a turn holds, and a retry of
# all dead jobs leaves a dead job whose id is a live job's again in the dead set.
KEY_WAIT_SECONDS = 10

#: Seconds psycopg_pool tries to replace a lost connection before it leaves it to
#: the next call that needs one, and that a call waits for a connection while
#: connects fail (the store's pools: _postgres_pools).
RECONNECT_WITHIN = 2.0
KEY_WAIT = f"'{KEY_WAIT_SECONDS}s'"
_KEY_WAIT = f"""
ALTER FUNCTION {{s}}.push(text[], text[], text[], float8[], text[], float8[], text[])
  SET lock_timeout = {KEY_WAIT};
"""

RETRY_DEAD = f"""
-- Dead jobs back on their queues (all when p_ids is NULL); how many moved.
CREATE OR REPLACE FUNCTION {{s}}.retry_dead(p_ids text[]) RETURNS int LANGUAGE plpgsql
SET enable_seqscan = off SET jit = off SET lock_timeout = {KEY_WAIT} {PINNED} AS $$
#variable_conflict use_column
DECLARE
  t float8 := {{s}}.clock();
  r record;
  n int := 0;
  st smallint;
BEGIN
  PERFORM {{s}}.lock_keys(ARRAY(SELECT d.okey FROM {{s}}.dead d
                                WHERE p_ids IS NULL OR d.id = ANY(p_ids)));
  -- A dead job whose id is a live job's again (enqueued anew) stays dead: the
  -- insert below would not replace the live job, and the dead one was lost.
  FOR r IN DELETE FROM {{s}}.dead d WHERE (p_ids IS NULL OR d.id = ANY(p_ids))
             AND NOT EXISTS (SELECT 1 FROM {{s}}.jobs j WHERE j.id = d.id)
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

# Version 13: a skipped envelope takes nothing. Its unique key was taken before
# its id was looked at, so an enqueue of a live job's id took the key, and the
# next enqueue under that key, of another id, was skipped too; and every
# envelope's queue was listed, stored or not. Now the job goes in first and
# takes its unique key only then (a row another transaction inserts with the same
# id is waited for by the insert, so no race takes the key either), and only the
# queues of stored jobs are noted.
PUSH_STEP = f"""
CREATE OR REPLACE FUNCTION {{s}}.push(
  p_ids text[], p_queues text[], p_payloads text[], p_offsets float8[], p_uniques text[],
  p_ttls float8[], p_keys text[]
) RETURNS boolean[] LANGUAGE plpgsql SET enable_seqscan = off SET jit = off
SET lock_timeout = {KEY_WAIT} {PINNED} AS $$
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
    at := t + coalesce(p_offsets[i], 0);
    st := 0;
    IF p_keys[i] IS NOT NULL AND EXISTS (SELECT 1 FROM {{s}}.jobs WHERE okey = p_keys[i]) THEN
      st := 2;
    END IF;
    INSERT INTO {{s}}.jobs (id, queue, payload, due, okey, state)
      VALUES (p_ids[i], p_queues[i], p_payloads[i], at, p_keys[i], st)
      ON CONFLICT (id) DO NOTHING;
    ok := FOUND;
    IF ok AND p_uniques[i] IS NOT NULL THEN
      INSERT INTO {{s}}.uniques AS u (key, expires) VALUES (p_uniques[i], t + p_ttls[i])
        ON CONFLICT (key) DO UPDATE SET expires = excluded.expires WHERE u.expires <= t;
      ok := FOUND;
      IF NOT ok THEN  -- the key is taken: the envelope is skipped, its row removed
        DELETE FROM {{s}}.jobs WHERE id = p_ids[i];
      END IF;
    END IF;
    IF ok AND st = 0 THEN
      PERFORM {{s}}.wake(p_queues[i], at > t);  -- sent on commit, folded per queue
    END IF;
    pushed := pushed || ok;
  END LOOP;
  INSERT INTO {{s}}.queues SELECT DISTINCT q FROM unnest(p_queues, pushed) AS u(q, ok) WHERE ok
    ON CONFLICT DO NOTHING;
  RETURN pushed;
END $$;
"""

# Version 15: an operator's pages of dead and done jobs seek an index in their
# listing's order, (died, id) and (expires, id): every dead or done job sharing
# the cursor's time (a turn's outcomes share one) was read and sorted again on
# each page. (Running jobs get no index of their own: every claim would write it;
# their page reads jobs_lease, see _postgres_admin.)
# The indexes are built in the migration's transaction: CREATE INDEX CONCURRENTLY
# cannot run in one; run after it, the version would be stamped before its indexes
# exist, and a build that failed would leave an invalid index IF NOT EXISTS keeps.
# A plain build keeps writers of its table waiting while it reads the table (a few
# seconds for millions of kept results), so, as for every migration that alters a
# table, an attempt does not begin while an old transaction holds it (see
# _postgres_schema). The replaced indexes are dropped last: the ACCESS EXCLUSIVE
# lock of a drop (readers wait too) is then held only until the commit.
_LISTINGS = """
CREATE INDEX IF NOT EXISTS dead_died_id ON {s}.dead (died, id);
CREATE INDEX IF NOT EXISTS results_expires_id ON {s}.results (expires, id);
DROP INDEX IF EXISTS {s}.dead_died;
DROP INDEX IF EXISTS {s}.results_expires;
"""


def _clock_wake(create: str) -> str:
    """The store's two SQL functions, made by ``create`` (``CREATE OR REPLACE`` in a migration).

    Each names the catalog's functions and types in full rather than run with a
    ``search_path`` of its own, as every other function does (see version 16):
    a function with a setting of its own is never inlined into its caller, and
    a push calls ``wake`` once per job (a push of 1,000 jobs took a quarter longer).
    """
    return f"""
-- The store's clock: the only one that decides leases and due times.
{create} FUNCTION {{s}}.clock() RETURNS pg_catalog.float8 LANGUAGE sql VOLATILE
AS $$ SELECT extract(epoch FROM pg_catalog.clock_timestamp())::pg_catalog.float8 $$;
-- Wake-ups: '1<queue>' jobs are ready, 'd<queue>' a new due time was set.
{create} FUNCTION {{s}}.wake(p_queue pg_catalog.text, p_due pg_catalog.bool)
RETURNS void LANGUAGE sql AS $$
  SELECT pg_catalog.pg_notify({{chan}},
    CASE WHEN p_due THEN 'd' ELSE '1' END OPERATOR(pg_catalog.||) p_queue)
$$;
"""


# Version 16: every function runs with the catalog alone on its search_path. They
# ran with the caller's: a push in an application's transaction with the app's, and
# a function of another schema that matched its arguments more closely than the
# catalog's (array_length(text[], int), unnest(text[])) was called instead: a push
# that stored nothing and said it was done, a cycle that claimed nothing. The
# store's tables are all named with their schema, so nothing else is looked up.
# (Each function's text says it too: a migration that replaces one keeps it.) The
# two SQL functions name the catalog's in full instead (see _clock_wake).
_PINNED = _clock_wake("CREATE OR REPLACE") + "".join(
    f"ALTER FUNCTION {{s}}.{f} {PINNED};\n"
    for f in (
        "lock_keys(text[])",
        "try_lock_keys(text[])",
        "advance(text[], float8)",
        "push(text[], text[], text[], float8[], text[], float8[], text[])",
        "cycle(jsonb, text[], int, text, float8, int, float8, int, boolean)",
        "heartbeat(text, text, float8, text[], text[])",
        "next_due(text[])",
        "retry_dead(text[])",
    )
)

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
    okey text,
    {_CLAIMED}
) {_CHURN};
CREATE INDEX jobs_ready ON {{s}}.jobs (queue, due, seq) WHERE state = 0;
CREATE INDEX jobs_lease ON {{s}}.jobs (lease) WHERE state = 1;
CREATE INDEX jobs_okey ON {{s}}.jobs (okey, seq) WHERE okey IS NOT NULL;
CREATE TABLE {{s}}.results (
    id text PRIMARY KEY, result text, expires float8 NOT NULL,
    queue text, okey text, payload text  -- what the done job was (version 5)
) {_CHURN};
CREATE INDEX results_expires_id ON {{s}}.results (expires, id);
CREATE TABLE {{s}}.dead (
    id text PRIMARY KEY, queue text NOT NULL, payload text NOT NULL, reason text NOT NULL,
    traceback text NOT NULL, died float8 NOT NULL, okey text
);
CREATE INDEX dead_died_id ON {{s}}.dead (died, id);
CREATE TABLE {{s}}.uniques (key text PRIMARY KEY, expires float8 NOT NULL) {_CHURN};
CREATE INDEX uniques_expires ON {{s}}.uniques (expires);
CREATE TABLE {{s}}.workers (id text PRIMARY KEY, info text NOT NULL, expires float8 NOT NULL);
CREATE TABLE {{s}}.queues (name text PRIMARY KEY);
{_OPERATING}
{_COUNTS}
{_RUNS}
{_clock_wake("CREATE")}
{KEY_LOCKS}

{ADVANCE}
{PUSH_STEP}
{CYCLE}
{HEARTBEAT}
-- Seconds until the first delayed or retry job of p_queues falls due, or the
-- first lease runs out (its job comes back, and nobody rings for that).
CREATE FUNCTION {{s}}.next_due(p_queues text[]) RETURNS float8 LANGUAGE sql
SET enable_seqscan = off SET jit = off {PINNED} AS $$
  SELECT least(
    (SELECT min(d.due) FROM unnest(p_queues) q, LATERAL (
       SELECT x.due FROM {{s}}.jobs x WHERE x.queue = q AND x.state = 0
       ORDER BY x.due LIMIT 1) d),
    (SELECT min(x.lease) FROM {{s}}.jobs x WHERE x.state = 1)) - {{s}}.clock()
$$;

{RETRY_DEAD}"""

#: ``MIGRATIONS[v]`` takes a schema from version ``v`` to ``v + 1``.
MIGRATIONS: dict[int, str] = {
    1: _OPERATING + CYCLE,
    2: _COUNTS,
    3: _RUNS,
    4: _DONE_JOBS + CYCLE,
    5: _JSON_OUTCOMES + CYCLE,
    6: _TRY_LOCKS + CYCLE,
    7: CYCLE,
    8: _CLAIMS_BY_TOKEN + KEY_LOCKS + CYCLE + HEARTBEAT + ADVANCE,
    9: CYCLE + HEARTBEAT + ADVANCE + _NO_SCANS,
    10: HEARTBEAT + RETRY_DEAD + _KEY_WAIT,
    11: CYCLE,  # version 12: the prune skips rows another transaction holds
    12: PUSH_STEP,  # version 13: a skipped envelope takes nothing
    # Version 14: outcomes and heartbeats are answered claim by claim (a call may name
    # a job twice), and a death without a payload keeps the one the job was claimed with.
    13: CYCLE + HEARTBEAT,
    14: _LISTINGS,  # version 15: pages of dead and done jobs seek (time, id)
    15: _PINNED,  # version 16: functions run with the catalog alone on their search_path
}
