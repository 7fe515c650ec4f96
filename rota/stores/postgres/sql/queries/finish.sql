-- PostgreSQL queries: a run's end: the finish batches and a transactional handler's success.
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- name: finish_succeeded
-- transition: finish
WITH v AS MATERIALIZED (
    -- the batch, parsed once; every row below is fetched by its key
    SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token, e->>2 AS result,
           (e->>3)::float8 AS started
    FROM json_array_elements(%(rows)s::json) AS e
),
sched AS MATERIALIZED (
    -- The batch's runs of a schedule: they are finished in place (`updated`), the others move.
    -- Found by key: every index the planner could pick here has `id` in its key, so no plan
    -- walks all running runs (and the dead entries a burst leaves among them).
    SELECT id, schedule FROM rota_runs
    WHERE id = ANY(ARRAY(SELECT id FROM v)) AND schedule IS NOT NULL AND (status = 'running') IS TRUE
),
locked AS (
    -- The schedules of these runs, locked in name order before any run is updated: the
    -- rota_run_finished trigger updates them, and two finishers taking them in the order of
    -- their runs' ids would deadlock. (Evaluated first: a one-time filter below.)
    {{lock_schedules(SELECT schedule FROM sched)}}
),
told AS MATERIALIZED (
    -- A limited run of the batch frees a slot: wake the workers once, here, and tell the
    -- rota_limit_freed trigger so (its WHEN skips the rows of this transaction: no function
    -- call per row). Before any run is updated: a one-time filter below.
    {{tell_limit_freed}}
),
deps AS (
    -- The waiting dependents of these runs, locked in id order next: the rota_run_settled
    -- trigger updates them row by row in the order of their parents, and two finishers
    -- whose parents' dependents cross would lock them in opposite orders. Found by key
    -- (`= ANY(ARRAY(...))`): an IN here lets the planner hash every pending run.
    {{lock_dependents(ARRAY(SELECT id FROM v))}}
),
moved AS (
    -- A run of no schedule leaves rota_runs for rota_history (schema 17): its row deleted
    -- here, inserted final below. The rota_run_moved trigger releases its dependents.
    DELETE FROM rota_runs r USING v
    WHERE r.id = ANY(ARRAY(SELECT id FROM v))
      AND r.id = v.id AND r.token = v.token AND (r.status = 'running') IS TRUE AND r.schedule IS NULL
      AND (SELECT count(*) FROM locked) + (SELECT count(*) FROM deps) + (SELECT count(*) FROM told) >= 0
    RETURNING r.*, v.result AS v_result, v.started AS v_started
),
kept AS (
    -- every column of rota_runs, in its order (tests/test_history_table.py checks the list)
    INSERT INTO rota_history (id, task, queue, priority, status, args, kwargs, key, schedule, tick,
        exclusive, held, scheduled_for, due_at, attempt, max_attempts, timeout, backoff, owner, token,
        lease_until, cancel_requested, created_at, started_at, finished_at, result, error, attempts,
        retry_of, misfire_at, waiting_on, has_dependents, after_depth, backfill, limit_name,
        limit_key, rate_name, rate_key, rate_waited, refused_at, traceparent)
    SELECT id, task, queue, priority, 'succeeded', args, kwargs, key, schedule, tick,
        exclusive, held, scheduled_for, due_at,
        -- a held run started (v_started seconds ago) and ended before its start was written
        CASE WHEN v_started IS NOT NULL AND started_at IS NULL THEN attempt + 1 ELSE attempt END,
        max_attempts, timeout, backoff, owner, token,
        NULL, cancel_requested, created_at,
        coalesce(started_at, {now} - make_interval(secs => v_started)), {now}, v_result, NULL, attempts,
        retry_of, misfire_at, waiting_on, has_dependents, after_depth, backfill, limit_name,
        limit_key, rate_name, rate_key, rate_waited, refused_at, traceparent
    FROM moved
    RETURNING id
),
updated AS (
    -- a run of a schedule stays (one run per tick is an index of rota_runs): finished in place
    UPDATE rota_runs r
    SET status = 'succeeded', result = v.result, error = NULL, finished_at = {now}, lease_until = NULL,
        attempt = CASE WHEN v.started IS NOT NULL AND r.started_at IS NULL THEN r.attempt + 1 ELSE r.attempt END,
        started_at = coalesce(r.started_at, {now} - make_interval(secs => v.started))
    FROM v
    WHERE r.id = ANY(ARRAY(SELECT id FROM sched))  -- (a schedule never changes: the same runs)
      AND r.id = v.id AND r.token = v.token AND (r.status = 'running') IS TRUE AND r.schedule IS NOT NULL
      AND (SELECT count(*) FROM locked) + (SELECT count(*) FROM deps) + (SELECT count(*) FROM told) >= 0
    RETURNING r.id
)
SELECT id FROM kept UNION ALL SELECT id FROM updated

-- name: finish
-- transition: finish, retry
WITH v AS MATERIALIZED (
    SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token, e->>2 AS status, e->>3 AS result,
           e->>4 AS error, (e->>5)::float8 AS retry_in, e->>6 AS history, (e->>7)::float8 AS started
    FROM json_array_elements(%(rows)s::json) AS e
),
locked AS (
    -- as in finish_succeeded: schedules locked in name order first
    {{lock_schedules(SELECT schedule FROM rota_runs
                     WHERE id = ANY(ARRAY(SELECT id FROM v))
                       AND schedule IS NOT NULL AND (status = 'running') IS TRUE)}}
),
told AS MATERIALIZED (
    -- as in finish_succeeded: one wake-up for the batch's freed limit slots
    {{tell_limit_freed}}
),
deps AS (
    -- as in finish_succeeded: the waiting dependents locked in id order next
    {{lock_dependents(ARRAY(SELECT id FROM v))}}
)
UPDATE rota_runs r
SET status = CASE WHEN v.status = 'pending' AND r.cancel_requested THEN 'cancelled' ELSE v.status END,
    result = v.result, error = v.error, lease_until = NULL,
    finished_at = CASE WHEN v.status = 'pending' AND NOT r.cancel_requested THEN NULL ELSE {now} END,
    attempt = CASE WHEN v.started IS NOT NULL AND r.started_at IS NULL THEN r.attempt + 1 ELSE r.attempt END,
    started_at = coalesce(r.started_at, {now} - make_interval(secs => v.started)),
    due_at = CASE WHEN v.status = 'pending' THEN {now} + make_interval(secs => v.retry_in)
                  ELSE r.due_at END,
    attempts = CASE WHEN v.history IS NULL THEN r.attempts
                    ELSE r.attempts || jsonb_build_array(v.history::jsonb) END,
    refused_at = NULL  -- a handler ran: a later refusal (a retry on an old worker) counts anew
FROM v
WHERE r.id = ANY(ARRAY(SELECT id FROM v))
  AND r.id = v.id AND r.token = v.token AND (r.status = 'running') IS TRUE
  AND (SELECT count(*) FROM locked) + (SELECT count(*) FROM deps) + (SELECT count(*) FROM told) >= 0
RETURNING r.id

-- name: finished_parents
-- As on SQLite (unused here: the rota_run_settled trigger sends NOTIFY when it releases one).
SELECT 1 FROM rota_runs WHERE id = ANY(%(ids)s::bigint[]) AND has_dependents LIMIT 1

-- name: lock_finished_schedules
-- The schedules of a whole batch's runs, locked in name order first, when one transaction
-- writes the batch in two statements (finish_succeeded, then finish, then the claim): each
-- statement locks its own runs' schedules in name order, but across the two the order could
-- invert ({A succeeded, B failed} against {B succeeded, A failed}) and two finishers deadlock.
-- Then, for the same reason, the waiting dependents of the batch's runs, in id order (see
-- finish_succeeded). One row: the counts.
WITH locked AS (
    {{lock_schedules(SELECT schedule FROM rota_runs
                     WHERE id = ANY(%(ids)s::bigint[]) AND schedule IS NOT NULL AND (status = 'running') IS TRUE)}}
),
deps AS (
    {{lock_dependents(%(ids)s::bigint[])}}
)
SELECT (SELECT count(*) FROM locked), (SELECT count(*) FROM deps)

-- name: handler_outcome
-- A transactional handler's commit whose reply was lost, read back: the run's status and
-- token (FOR SHARE waits for that transaction while the server still runs it).
SELECT status, token FROM rota_runs WHERE id = %(id)s FOR SHARE

-- name: finish_transactional
-- transition: finish
-- a transactional handler's success, in the handler's own transaction (rota.transactional):
-- the run's schedule locked first, as finish does; the time is the commit's, not the
-- transaction's start (now())
WITH locked AS (
    SELECT s.name FROM rota_schedules s
    WHERE s.name = (SELECT schedule FROM rota_runs WHERE id = %(id)s AND status = 'running')
    FOR UPDATE OF s
)
UPDATE rota_runs r
SET status = 'succeeded', result = %(result)s, error = NULL,
    finished_at = coalesce(%(now)s::timestamptz, clock_timestamp()), lease_until = NULL,
    -- a held run started by its worker whose start was not written yet: the commit records it
    attempt = CASE WHEN r.started_at IS NULL THEN r.attempt + 1 ELSE r.attempt END,
    started_at = coalesce(r.started_at, %(now)s::timestamptz, clock_timestamp())
WHERE r.id = %(id)s AND r.token = %(token)s AND r.status = 'running'
  AND (SELECT count(*) FROM locked) >= 0
RETURNING r.id
