-- PostgreSQL fragments: SQL that several queries share, written once. A query uses one as
-- {{name}} or {{name(argument, ...)}}; in a fragment {{parameter}} is its argument. Expanded when
-- the queries load (rota/stores/sqlstore/queries.py); tests/test_queries.py checks that each is
-- used and that every fragment a query names exists.

-- fragment: schema_suffix
-- The suffix of the schema's NOTIFY channel: the channel is scoped to the schema of rota's
-- tables (current_schema(), what this connection resolves them with), so apps in other schemas
-- of the database neither wake nor cancel each other's runs: `rota` for public (the channel of
-- earlier releases), `rota:<schema>` otherwise, `rota:<md5 of schema>` past the 63-byte
-- identifier limit. notify and notify_due send on it, notify_channel names it for listen().
CASE
    WHEN current_schema() = 'public' THEN ''
    WHEN octet_length(current_schema()) <= 58 THEN ':' || current_schema()
    ELSE ':' || md5(current_schema()) END

-- fragment: lock_schedules(names)
-- The schedules `names` (a subquery), locked in name order, as a CTE's body: the
-- rota_run_finished trigger updates a schedule when one of its runs ends, and two statements
-- taking them in the order of their runs' ids would deadlock.
SELECT s.name FROM rota_schedules s
WHERE s.name IN ({{names}})
ORDER BY s.name
FOR UPDATE OF s

-- fragment: lock_dependents(parents)
-- The waiting dependents of the runs `parents` (an array of ids), locked in id order, as a
-- CTE's body: the rota_run_settled trigger updates them row by row in the order of their
-- parents, and two statements whose parents' dependents cross would lock them in opposite
-- orders. Found by key (`= ANY(ARRAY(...))`): an IN here lets the planner hash every pending run.
SELECT c.id FROM rota_runs c
WHERE c.id = ANY(ARRAY(SELECT d.child FROM rota_deps d WHERE d.parent = ANY({{parents}})))
  AND (c.status = 'pending') IS TRUE
ORDER BY c.id
FOR UPDATE OF c

-- fragment: tell_limit_freed
-- A limited run of the batch `v` frees a slot: wake the workers once, and tell the
-- rota_limit_freed trigger so (its WHEN skips the rows of this transaction: no function call
-- per row). A CTE's body, read before any run is updated (a one-time filter). The batch's
-- limited runs are found through the index of running limited runs: a probe of an empty index
-- while no limited run runs, so a drain without limits pays nothing.
SELECT set_config('rota.limit_told', 'on', true),  -- (two columns: both evaluated, in no order that matters)
       pg_notify('rota' || {{schema_suffix}}, 'run')
WHERE EXISTS (SELECT 1 FROM rota_runs WHERE status = 'running' AND limit_name IS NOT NULL
              AND id = ANY(ARRAY(SELECT id FROM v)))

-- fragment: unlog_rate_starts
-- The batch `v`'s rated runs' starts out of their rate's log (a refused or disowned run: no
-- handler started, so it uses no room of its rate), as a CTE's body: one logged start per run,
-- its key's and its start time's (runs claimed together share their start time, so as many
-- rows as runs; the log has no run id). Run to its end whether or not the UPDATE reads it;
-- both see the rows as they were before.
DELETE FROM rota_rate_starts s
WHERE s.ctid = ANY(ARRAY(
    SELECT x.ctid FROM (
        SELECT r.rate_name, r.rate_key, r.started_at, count(*) AS n FROM rota_runs r
        WHERE r.id = ANY(ARRAY(SELECT id FROM v)) AND (r.id, r.token) IN (SELECT id, token FROM v)
          AND r.status = 'running' AND r.rate_name IS NOT NULL AND r.started_at IS NOT NULL
        GROUP BY r.rate_name, r.rate_key, r.started_at) g
    CROSS JOIN LATERAL (
        SELECT l.ctid FROM rota_rate_starts l
        WHERE l.name = g.rate_name AND l.key = g.rate_key AND l.started_at = g.started_at
        LIMIT g.n) x))

-- fragment: claim_candidates(due, queues, start)
-- The plain runs a claim takes (`picked`: their row versions' addresses), due by `due`, of
-- the queues `queues` (a condition, or nothing for every queue), locked SKIP LOCKED in claim
-- order, never a held one, one past its misfire deadline, one asked to cancel or one in a
-- paused queue; after `start` in the claim index (a condition, or nothing: from the front).
-- The claim order is rota_runs_claim_from's key, (-priority, due_at, id) ascending (0023):
-- the same order as priority descending, due_at, id, in which a row comparison is a start
-- position (see rota.stores.postgres.claim_from).
WITH picked AS MATERIALIZED (
    SELECT ARRAY(
        SELECT ctid FROM rota_runs
        WHERE status = 'pending' AND NOT held AND due_at <= {{due}}
          AND (misfire_at IS NULL OR misfire_at >= {now})
          AND limit_name IS NULL AND rate_name IS NULL  -- limited and rated runs: flow_*
          {{queues}}
          AND NOT cancel_requested
          AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)  -- paused queues (0018)
          {{start}}
        ORDER BY (-priority::bigint), due_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED) AS tids
)

-- fragment: claim_update
-- The claim of `picked`: running, owned, a new token each; the first `start` started.
UPDATE rota_runs r
SET status = 'running', owner = %(owner)s, token = nextval('rota_token_seq'),
    -- (a run at the column's maximum is not counted: it is claimed, and its worker fails it
    -- as damaged; rota.quarantine. The arithmetic of one bad row never fails the batch.)
    attempt = CASE WHEN r.ctid = ANY((SELECT tids[:%(start)s] FROM picked)::tid[]) AND r.attempt < 2147483647
                   THEN r.attempt + 1 ELSE r.attempt END,
    -- the statement's time, not the transaction's: in finish_and_claim this runs after the
    -- finishes, which may wait for a schedule's row lock (a start recorded before the end
    -- of the exclusive run it waited for)
    started_at = CASE WHEN r.ctid = ANY((SELECT tids[:%(start)s] FROM picked)::tid[])
                      THEN coalesce(%(now)s::timestamptz, statement_timestamp()) END,
    misfire_at = NULL,
    lease_until = {now} + make_interval(secs => %(lease)s)
WHERE r.ctid = ANY((SELECT tids FROM picked)::tid[])
RETURNING {{claimed_columns}}

-- fragment: claim_ahead_update
-- The claim ahead of `picked`: running, owned, a new token each, held (not started).
UPDATE rota_runs r
SET status = 'running', owner = %(owner)s, token = nextval('rota_token_seq'), misfire_at = NULL,
    started_at = NULL, lease_until = {now} + make_interval(secs => %(lease)s)
WHERE r.ctid = ANY((SELECT tids FROM picked)::tid[])
RETURNING {{claimed_columns}}

-- fragment: claimed_columns
-- What a claim returns of each run it took (rota.stores.records.claimed_rows reads them);
-- the last: whether the run has saved steps (no: its handler's first step reads none).
r.id, r.task, r.args, r.kwargs, r.attempt, r.max_attempts, r.token, r.timeout,
          r.backoff, r.schedule, r.scheduled_for, r.started_at, r.lease_until,
          r.priority, extract(epoch FROM r.due_at)::float8,
          EXISTS (SELECT 1 FROM rota_steps s WHERE s.run_id = r.id)

-- fragment: schedule_insert
-- A schedule's row inserted, or on a conflict the start of its update (upsert_code_schedule,
-- insert_schedule: each goes on with what it sets besides).
INSERT INTO rota_schedules AS s (
    name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, run_immediately,
    queue, priority, max_attempts, timeout, backoff, jitter, source, app, definition, next_run_at,
    created_at, updated_at)
VALUES (%(name)s, %(task)s, %(cron)s, %(every)s, %(tz)s, %(args)s, %(kwargs)s, %(overlap)s,
        %(misfire)s, %(misfire_grace)s, %(run_immediately)s, %(queue)s, %(priority)s,
        %(max_attempts)s, %(timeout)s, %(backoff)s, %(jitter)s, %(source)s, %(app)s, %(definition)s,
        %(next_run_at)s, {now}, {now})
ON CONFLICT (name) DO UPDATE SET
    task = EXCLUDED.task, cron = EXCLUDED.cron, every = EXCLUDED.every, tz = EXCLUDED.tz,
    args = EXCLUDED.args, kwargs = EXCLUDED.kwargs, overlap = EXCLUDED.overlap,
    misfire = EXCLUDED.misfire, misfire_grace = EXCLUDED.misfire_grace,
    run_immediately = EXCLUDED.run_immediately, queue = EXCLUDED.queue,
    priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts, jitter = EXCLUDED.jitter,

-- fragment: waiting_keys
-- The limit keys (lkeys) and rate keys (rkeys) of the waiting runs, by a loose index scan:
-- one probe per distinct key, however many runs wait (flow_heads, flow_heads_walk).
lkeys AS (
    (SELECT limit_name AS name, limit_key AS key FROM rota_runs
     WHERE status = 'pending' AND NOT held AND limit_name IS NOT NULL
     ORDER BY limit_name, limit_key LIMIT 1)
    UNION ALL
    SELECT n.name, n.key FROM lkeys CROSS JOIN LATERAL (
        SELECT limit_name AS name, limit_key AS key FROM rota_runs
        WHERE status = 'pending' AND NOT held AND limit_name IS NOT NULL
          AND (limit_name, limit_key) > (lkeys.name, lkeys.key)
        ORDER BY limit_name, limit_key LIMIT 1) n
),
rkeys AS (
    (SELECT rate_name AS name, rate_key AS key FROM rota_runs
     WHERE status = 'pending' AND NOT held AND rate_name IS NOT NULL
     ORDER BY rate_name, rate_key LIMIT 1)
    UNION ALL
    SELECT n.name, n.key FROM rkeys CROSS JOIN LATERAL (
        SELECT rate_name AS name, rate_key AS key FROM rota_runs
        WHERE status = 'pending' AND NOT held AND rate_name IS NOT NULL
          AND (rate_name, rate_key) > (rkeys.name, rkeys.key)
        ORDER BY rate_name, rate_key LIMIT 1) n
)

-- fragment: key_heads
-- Each waiting key's first due run in the claim's order (for the workers of %(queues)s).
SELECT 'l' AS kind, k.name, k.key, h.priority, h.due_at, h.id FROM lkeys k
JOIN LATERAL (SELECT r.priority, r.due_at, r.id FROM rota_runs r
              WHERE r.limit_name = k.name AND r.limit_key = k.key AND r.limit_name IS NOT NULL
                AND r.status = 'pending' AND NOT r.held AND r.due_at <= {now}
                AND (%(queues)s::text[] IS NULL OR r.queue = ANY(%(queues)s::text[])) AND coalesce(r.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
              ORDER BY r.priority DESC, r.due_at, r.id LIMIT 1) h ON true
UNION ALL
SELECT 'r' AS kind, k.name, k.key, h.priority, h.due_at, h.id FROM rkeys k
JOIN LATERAL (SELECT r.priority, r.due_at, r.id FROM rota_runs r
              WHERE r.rate_name = k.name AND r.rate_key = k.key AND r.rate_name IS NOT NULL
                AND r.status = 'pending' AND NOT r.held AND r.due_at <= {now}
                AND (%(queues)s::text[] IS NULL OR r.queue = ANY(%(queues)s::text[])) AND coalesce(r.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
              ORDER BY r.priority DESC, r.due_at, r.id LIMIT 1) h ON true

-- fragment: key_room
-- A key's free slots (a limit) or room (a rate) as this statement's snapshot sees them, as
-- `f.free` (`count(r.id)`: an index scan that visits the rows, which marks the index entries
-- of row versions gone as dead; an index-only scan never does). A damaged limit or rate has
-- no room. The body of a `CROSS JOIN LATERAL (`, which it closes (`OFFSET 0`: not inlined).
SELECT CASE WHEN h.kind = 'l'
            THEN (SELECT l.max FROM rota_limits l WHERE l.name = h.name AND l.max BETWEEN 1 AND 1000000)
                 - (SELECT count(r.id) FROM rota_runs r WHERE r.status = 'running'
                    AND r.limit_name = h.name AND r.limit_key = h.key)
            ELSE (SELECT CASE WHEN t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400  -- else damaged: no room
                               THEN t.max - (SELECT count(*) FROM rota_rate_starts s
                                  WHERE s.name = h.name AND s.key = h.key
                                    AND s.started_at > {now} - make_interval(secs => t.per)
                                    AND s.started_at <= {now} + make_interval(secs => t.per)) ELSE 0 END
                  FROM rota_rates t WHERE t.name = h.name) END AS free OFFSET 0) f

-- fragment: take_key
-- The transaction-level advisory try-lock of the key `h` (kind, name, key): a key another
-- claimer holds is skipped, as SKIP LOCKED skips a row.
pg_try_advisory_xact_lock(1919907937, hashtext(current_schema() || h.kind || h.name || chr(31) || h.key))
