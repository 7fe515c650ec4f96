-- Named queries of the PostgreSQL store. Every backend defines the same names (a test checks).
-- `{now}` stands for the store's clock: the configured clock if any, else now().
-- Batch writes take one JSON parameter `rows`; `r.id = ANY(ARRAY(...))` makes the planner
-- fetch those rows by key instead of hashing every running run.

-- name: insert_run
INSERT INTO rota_runs (id, task, queue, priority, status, args, kwargs, key, schedule, tick,
                       exclusive, held, scheduled_for, due_at, max_attempts, timeout, backoff,
                       error, finished_at, retry_of)
VALUES (coalesce(%(id)s::bigint, nextval('rota_run_id_seq')), %(task)s, %(queue)s, %(priority)s,
        %(status)s, %(args)s, %(kwargs)s, %(key)s,
        %(schedule)s, %(tick)s, %(exclusive)s, %(held)s,
        coalesce(%(scheduled_for)s, {now} + make_interval(secs => %(delay)s)),
        coalesce(%(scheduled_for)s, {now} + make_interval(secs => %(delay)s)),
        %(max_attempts)s, %(timeout)s, %(backoff)s, %(error)s,
        CASE WHEN %(status)s = 'skipped' THEN {now} END, %(retry_of)s)
ON CONFLICT DO NOTHING
RETURNING id

-- name: insert_runs_bulk
-- COPY: plain runs in bulk (ids from next_run_ids, times computed by the caller)
COPY rota_runs (id, task, queue, priority, args, kwargs, scheduled_for, due_at, max_attempts, timeout, backoff)
FROM STDIN

-- name: next_run_ids
SELECT nextval('rota_run_id_seq') FROM generate_series(1, %(n)s)

-- name: find_keyed
SELECT id FROM rota_runs
WHERE task = %(task)s AND key = %(key)s AND status IN ('pending', 'running')

-- name: notify
SELECT pg_notify(%(channel)s, %(payload)s)

-- name: claim
WITH token AS (SELECT nextval('rota_token_seq') AS value),
candidates AS (
    SELECT id FROM rota_runs
    WHERE status = 'pending' AND NOT held AND due_at <= {now}
    ORDER BY priority DESC, due_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE rota_runs r
SET status = 'running', owner = %(owner)s, token = token.value, attempt = r.attempt + 1,
    started_at = {now},
    lease_until = {now} + make_interval(secs => %(lease)s)
FROM candidates, token
WHERE r.id = candidates.id
RETURNING r.id, r.task, r.args, r.kwargs, r.attempt, r.max_attempts, r.token, r.timeout,
          r.backoff, r.schedule, r.scheduled_for, r.started_at, r.lease_until

-- name: claim_in_queues
WITH token AS (SELECT nextval('rota_token_seq') AS value),
candidates AS (
    SELECT id FROM rota_runs
    WHERE status = 'pending' AND NOT held AND due_at <= {now}
      AND queue = ANY(%(queues)s::text[])
    ORDER BY priority DESC, due_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE rota_runs r
SET status = 'running', owner = %(owner)s, token = token.value, attempt = r.attempt + 1,
    started_at = {now},
    lease_until = {now} + make_interval(secs => %(lease)s)
FROM candidates, token
WHERE r.id = candidates.id
RETURNING r.id, r.task, r.args, r.kwargs, r.attempt, r.max_attempts, r.token, r.timeout,
          r.backoff, r.schedule, r.scheduled_for, r.started_at, r.lease_until

-- name: heartbeat
UPDATE rota_runs r SET lease_until = {now} + make_interval(secs => %(lease)s)
FROM (SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token
      FROM json_array_elements(%(rows)s::json) AS e) AS v
WHERE r.id = ANY(ARRAY(SELECT (e->>0)::bigint FROM json_array_elements(%(rows)s::json) AS e))
  AND r.id = v.id AND r.token = v.token AND r.status = 'running'
RETURNING r.id, r.cancel_requested

-- name: finish_succeeded
UPDATE rota_runs r
SET status = 'succeeded', result = v.result, error = NULL, finished_at = {now}, lease_until = NULL
FROM (SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token, e->>2 AS result
      FROM json_array_elements(%(rows)s::json) AS e) AS v
WHERE r.id = ANY(ARRAY(SELECT (e->>0)::bigint FROM json_array_elements(%(rows)s::json) AS e))
  AND r.id = v.id AND r.token = v.token AND r.status = 'running'
RETURNING r.id

-- name: finish
UPDATE rota_runs r
SET status = v.status, result = v.result, error = v.error, lease_until = NULL,
    finished_at = CASE WHEN v.status = 'pending' THEN NULL ELSE {now} END,
    due_at = CASE WHEN v.status = 'pending' THEN {now} + make_interval(secs => v.retry_in)
                  ELSE r.due_at END,
    attempts = CASE WHEN v.history IS NULL THEN r.attempts
                    ELSE r.attempts || jsonb_build_array(v.history::jsonb) END
FROM (SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token, e->>2 AS status, e->>3 AS result,
             e->>4 AS error, (e->>5)::float8 AS retry_in, e->>6 AS history
      FROM json_array_elements(%(rows)s::json) AS e) AS v
WHERE r.id = ANY(ARRAY(SELECT (e->>0)::bigint FROM json_array_elements(%(rows)s::json) AS e))
  AND r.id = v.id AND r.token = v.token AND r.status = 'running'
RETURNING r.id

-- name: hand_back
UPDATE rota_runs r
SET status = 'pending', attempt = r.attempt - 1, due_at = {now}, lease_until = NULL,
    started_at = NULL,
    attempts = r.attempts || jsonb_build_array(jsonb_build_object(
        'attempt', r.attempt, 'worker', r.owner, 'started_at', to_char(r.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'finished_at', to_char({now} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), 'status', 'handed back', 'error',
        jsonb_build_object('type', 'HandedBack', 'message', %(reason)s::text)))
FROM (SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token
      FROM json_array_elements(%(rows)s::json) AS e) AS v
WHERE r.id = ANY(ARRAY(SELECT (e->>0)::bigint FROM json_array_elements(%(rows)s::json) AS e))
  AND r.id = v.id AND r.token = v.token AND r.status = 'running'
RETURNING r.id

-- name: any_expired
SELECT 1 FROM rota_runs
WHERE status = 'running' AND lease_until < {now}
LIMIT 1

-- name: rescue
WITH lost AS (
    SELECT id FROM rota_runs
    WHERE status = 'running' AND lease_until < {now}
    ORDER BY lease_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
decided AS (
    SELECT r.id, r.owner, r.lease_until, r.attempt, r.started_at,
           CASE WHEN r.cancel_requested THEN 'cancelled'
                WHEN r.attempt < r.max_attempts THEN 'pending'
                ELSE 'failed' END AS status,
           jsonb_build_object(
               'type', 'WorkerLost',
               'message', 'worker ' || coalesce(r.owner, '?') || ' was lost: its lease expired at '
                          || to_char(r.lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
                          || ' (attempt ' || r.attempt || ' of ' || r.max_attempts || ')',
               'traceback', NULL) AS error
    FROM rota_runs r JOIN lost ON lost.id = r.id
)
UPDATE rota_runs r
SET status = d.status, due_at = {now}, lease_until = NULL,
    finished_at = CASE WHEN d.status = 'pending' THEN NULL ELSE {now} END,
    error = d.error::text,
    attempts = CASE WHEN d.status = 'pending'
                    THEN r.attempts || jsonb_build_array(jsonb_build_object(
                        'attempt', d.attempt, 'worker', d.owner, 'started_at', to_char(d.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                        'finished_at', to_char({now} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), 'status', 'lost', 'error', d.error))
                    ELSE r.attempts END
FROM decided d
WHERE r.id = d.id
RETURNING r.id, r.task, r.status, d.owner, d.error::text

-- name: poll_state
SELECT {now},
       (SELECT min(due_at) FROM rota_runs
        WHERE status = 'pending' AND NOT held),
       (SELECT min(next_run_at) FROM rota_schedules WHERE active AND NOT paused)

-- name: poll_state_in_queues
SELECT {now},
       (SELECT min(due_at) FROM rota_runs
        WHERE status = 'pending' AND NOT held
          AND queue = ANY(%(queues)s::text[])),
       (SELECT min(next_run_at) FROM rota_schedules WHERE active AND NOT paused)

-- name: now
SELECT {now}

-- name: upsert_code_schedule
INSERT INTO rota_schedules AS s (
    name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, run_immediately,
    queue, priority, max_attempts, timeout, backoff, source, app, definition, next_run_at,
    created_at, updated_at)
VALUES (%(name)s, %(task)s, %(cron)s, %(every)s, %(tz)s, %(args)s, %(kwargs)s, %(overlap)s,
        %(misfire)s, %(misfire_grace)s, %(run_immediately)s, %(queue)s, %(priority)s,
        %(max_attempts)s, %(timeout)s, %(backoff)s, %(source)s, %(app)s, %(definition)s,
        %(next_run_at)s, {now}, {now})
ON CONFLICT (name) DO UPDATE SET
    task = EXCLUDED.task, cron = EXCLUDED.cron, every = EXCLUDED.every, tz = EXCLUDED.tz,
    args = EXCLUDED.args, kwargs = EXCLUDED.kwargs, overlap = EXCLUDED.overlap,
    misfire = EXCLUDED.misfire, misfire_grace = EXCLUDED.misfire_grace,
    run_immediately = EXCLUDED.run_immediately, queue = EXCLUDED.queue,
    priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts,
    timeout = EXCLUDED.timeout, backoff = EXCLUDED.backoff, source = EXCLUDED.source,
    app = EXCLUDED.app, definition = EXCLUDED.definition, active = true, updated_at = {now},
    next_run_at = CASE WHEN s.run_count = 0 AND s.last_run_at IS NULL AND EXCLUDED.run_immediately
                       THEN least(s.next_run_at, EXCLUDED.next_run_at)
                       ELSE %(first_tick)s END
WHERE s.definition IS DISTINCT FROM EXCLUDED.definition OR NOT s.active

-- name: deactivate_code_schedules
UPDATE rota_schedules SET active = false, updated_at = {now}
WHERE source = 'code' AND app = %(app)s AND active AND NOT (name = ANY(%(names)s::text[]))
RETURNING name

-- name: insert_schedule
INSERT INTO rota_schedules AS s (
    name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, run_immediately,
    queue, priority, max_attempts, timeout, backoff, source, app, definition, next_run_at,
    created_at, updated_at)
VALUES (%(name)s, %(task)s, %(cron)s, %(every)s, %(tz)s, %(args)s, %(kwargs)s, %(overlap)s,
        %(misfire)s, %(misfire_grace)s, %(run_immediately)s, %(queue)s, %(priority)s,
        %(max_attempts)s, %(timeout)s, %(backoff)s, %(source)s, %(app)s, %(definition)s,
        %(next_run_at)s, {now}, {now})
ON CONFLICT (name) DO UPDATE SET
    task = EXCLUDED.task, cron = EXCLUDED.cron, every = EXCLUDED.every, tz = EXCLUDED.tz,
    args = EXCLUDED.args, kwargs = EXCLUDED.kwargs, overlap = EXCLUDED.overlap,
    misfire = EXCLUDED.misfire, misfire_grace = EXCLUDED.misfire_grace,
    run_immediately = EXCLUDED.run_immediately, queue = EXCLUDED.queue,
    priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts,
    timeout = EXCLUDED.timeout, backoff = EXCLUDED.backoff, source = EXCLUDED.source,
    app = EXCLUDED.app, definition = EXCLUDED.definition, active = true, paused = false,
    next_run_at = EXCLUDED.next_run_at, updated_at = {now}
WHERE NOT s.active
RETURNING name

-- name: update_schedule
UPDATE rota_schedules SET
    task = %(task)s, cron = %(cron)s, every = %(every)s, tz = %(tz)s, args = %(args)s,
    kwargs = %(kwargs)s, overlap = %(overlap)s, misfire = %(misfire)s,
    misfire_grace = %(misfire_grace)s, run_immediately = %(run_immediately)s, queue = %(queue)s,
    priority = %(priority)s, max_attempts = %(max_attempts)s, timeout = %(timeout)s,
    backoff = %(backoff)s, definition = %(definition)s,
    next_run_at = coalesce(%(next_run_at)s, next_run_at), updated_at = {now}
WHERE name = %(name)s AND active
RETURNING name

-- name: deactivate_schedule
UPDATE rota_schedules SET active = false, updated_at = {now}
WHERE name = %(name)s AND active
RETURNING name

-- name: cancel_schedule_pending
UPDATE rota_runs
SET status = 'cancelled', finished_at = {now},
    error = %(error)s
WHERE schedule = %(name)s AND status = 'pending'
RETURNING id

-- name: set_paused
UPDATE rota_schedules
SET paused = %(paused)s, next_run_at = coalesce(%(next_run_at)s, next_run_at), updated_at = {now}
WHERE name = %(name)s AND active
RETURNING name

-- name: due_schedules
SELECT name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, queue,
       priority, max_attempts, timeout, backoff, next_run_at
FROM rota_schedules
WHERE active AND NOT paused AND next_run_at <= {now}
ORDER BY next_run_at
LIMIT %(limit)s

-- name: advance_schedule
UPDATE rota_schedules
SET next_run_at = %(new)s, skip_count = skip_count + %(skipped_more)s
WHERE name = %(name)s AND next_run_at = %(old)s AND active AND NOT paused
RETURNING name

-- name: tick_exists
SELECT 1 FROM rota_runs WHERE schedule = %(schedule)s AND tick = %(tick)s

-- name: active_run
SELECT id, status FROM rota_runs
WHERE schedule = %(schedule)s AND exclusive AND NOT held AND status IN ('pending', 'running')

-- name: cancel_active_pending
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = %(error)s
WHERE id = %(id)s AND status = 'pending'
RETURNING id

-- name: request_cancel
UPDATE rota_runs SET cancel_requested = true
WHERE id = %(id)s AND status = 'running'
RETURNING id, owner

-- name: cancel_held
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = %(error)s
WHERE schedule = %(schedule)s AND held AND status = 'pending'
RETURNING id

-- name: promote_held
UPDATE rota_runs SET held = false
WHERE id = (SELECT id FROM rota_runs
            WHERE schedule = %(schedule)s AND held AND status = 'pending'
            ORDER BY scheduled_for, id LIMIT 1)
  AND NOT EXISTS (SELECT 1 FROM rota_runs
                  WHERE schedule = %(schedule)s AND exclusive AND NOT held
                    AND status IN ('pending', 'running'))
RETURNING id

-- name: lock_schedule
-- The schedule's row lock: whoever ends a run of it (the rota_run_finished trigger) takes
-- it too, so holding it orders a hand-over of the slot with our inserts.
SELECT name FROM rota_schedules WHERE name = %(schedule)s FOR UPDATE

-- name: schedule_columns
SELECT name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, queue, priority,
       max_attempts, timeout, source, active, paused, next_run_at, last_run_at, last_status,
       run_count, success_count, failure_count, skip_count, run_immediately, backoff, app,
       definition
FROM rota_schedules

-- name: run_columns
SELECT id, task, status, queue, priority, args, kwargs, key, schedule, scheduled_for, due_at,
       attempt, max_attempts, timeout, owner, token, lease_until, cancel_requested, created_at,
       started_at, finished_at, result, error, attempts::text, retry_of, held
FROM rota_runs

-- name: count_by_status
SELECT status, count(*) FROM rota_runs GROUP BY status

-- name: cancel_pending
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = %(error)s
WHERE id = %(id)s AND status = 'pending'
RETURNING status

-- name: run_status
SELECT status FROM rota_runs WHERE id = %(id)s

-- name: register_worker
INSERT INTO rota_workers (id, host, pid, concurrency, queues, state, started_at, last_seen)
VALUES (%(id)s, %(host)s, %(pid)s, %(concurrency)s, %(queues)s, 'running', {now}, {now})
ON CONFLICT (id) DO UPDATE SET state = 'running', last_seen = {now}

-- name: worker_seen
UPDATE rota_workers SET last_seen = {now}, state = %(state)s WHERE id = %(id)s

-- name: list_workers
SELECT id, host, pid, concurrency, queues, state, started_at, last_seen,
       last_seen >= {now} - make_interval(secs => %(stale_after)s) AND state <> 'stopped'
FROM rota_workers
WHERE last_seen >= {now} - make_interval(secs => %(stale_after)s * 10) OR state <> 'stopped'
ORDER BY started_at

-- name: lock_acquire
INSERT INTO rota_locks AS l (name, owner, token, acquired_at, expires_at)
VALUES (%(name)s, %(owner)s, 1, {now}, {now} + make_interval(secs => %(ttl)s))
ON CONFLICT (name) DO UPDATE
SET owner = EXCLUDED.owner, token = l.token + 1, acquired_at = EXCLUDED.acquired_at,
    expires_at = EXCLUDED.expires_at
WHERE l.owner IS NULL OR l.expires_at IS NULL OR l.expires_at <= {now}
RETURNING token

-- name: lock_renew
UPDATE rota_locks SET expires_at = {now} + make_interval(secs => %(ttl)s)
WHERE name = %(name)s AND owner = %(owner)s AND token = %(token)s AND expires_at > {now}
RETURNING token

-- name: lock_release
UPDATE rota_locks SET owner = NULL, expires_at = NULL
WHERE name = %(name)s AND owner = %(owner)s AND token = %(token)s
RETURNING token

-- name: list_locks
SELECT name, owner, token, acquired_at, expires_at,
       owner IS NOT NULL AND expires_at > {now}
FROM rota_locks ORDER BY name

-- name: prune
WITH doomed AS (
    SELECT id FROM rota_runs
    WHERE status = %(status)s AND finished_at < {now} - make_interval(secs => %(older_than)s)
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM rota_runs r USING doomed WHERE r.id = doomed.id
RETURNING r.id

-- ===== issue 10, worker side (branch faults-worker) =====================================

-- name: worker_seen_stuck
UPDATE rota_workers SET last_seen = {now}, state = %(state)s, stuck = %(stuck)s WHERE id = %(id)s

-- name: workers_stuck
SELECT id, stuck FROM rota_workers

-- name: database_started
SELECT pg_postmaster_start_time()

-- ===== end of issue 10, worker side =====================================================
