-- PostgreSQL queries: schedules: upserts, due ticks, ticks made ahead, overlap and misfire, notify_on.
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- name: upsert_code_schedule
{{schedule_insert}}
    timeout = EXCLUDED.timeout, backoff = EXCLUDED.backoff, source = EXCLUDED.source,
    app = EXCLUDED.app, definition = EXCLUDED.definition, active = true, updated_at = {now},
    -- A deploy keeps next_run_at unless the timing changed (a missed tick stays due and
    -- meets the misfire policy); a timing change moves it to the new first tick, unless the
    -- old next_run_at was already missed: then that tick stays due (the misfire policy
    -- applies to it and to the new timing's ticks up to now).
    next_run_at = CASE WHEN s.run_count = 0 AND s.last_run_at IS NULL AND EXCLUDED.run_immediately
                       THEN least(s.next_run_at, EXCLUDED.next_run_at)
                       WHEN NOT s.active OR s.next_run_at IS NULL THEN %(first_tick)s
                       WHEN s.cron IS NOT DISTINCT FROM EXCLUDED.cron AND s.every IS NOT DISTINCT FROM EXCLUDED.every AND s.tz = EXCLUDED.tz
                       THEN s.next_run_at
                       WHEN s.next_run_at < {now} THEN s.next_run_at
                       ELSE %(first_tick)s END
WHERE s.definition IS DISTINCT FROM EXCLUDED.definition OR NOT s.active

-- name: forget_damaged_schedule
-- A code schedule stored damaged (a field that cannot be planned: rota.timing.stored): its
-- definition is forgotten, so the upsert that follows rewrites it whole from the code, at a
-- new first tick (a next_run_at clears its plan error).
UPDATE rota_schedules SET definition = '', next_run_at = NULL
WHERE name = %(name)s AND source = 'code'

-- name: deactivate_code_schedules
UPDATE rota_schedules SET active = false, updated_at = {now}
WHERE source = 'code' AND app = %(app)s AND active AND NOT (name = ANY(%(names)s::text[]))
RETURNING name

-- name: insert_schedule
{{schedule_insert}}
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
    backoff = %(backoff)s, jitter = %(jitter)s, definition = %(definition)s,
    next_run_at = coalesce(%(next_run_at)s, next_run_at), updated_at = {now}
WHERE name = %(name)s AND active
RETURNING name

-- name: deactivate_schedule
UPDATE rota_schedules SET active = false, updated_at = {now}
WHERE name = %(name)s AND active
RETURNING name

-- name: cancel_schedule_pending
-- transition: withdraw
-- Locks as a finisher does (finish_succeeded): the schedule's row first (the rota_run_finished
-- trigger of each cancelled run updates it, and a finisher holding it promotes a queued run),
-- then the runs in id order, then their waiting dependents in id order (the cascade cancels
-- them). Rows locked in no order here deadlocked against a concurrent finish.
WITH locked AS (
    SELECT name FROM rota_schedules WHERE name = %(name)s FOR UPDATE
),
runs AS (
    SELECT id FROM rota_runs
    WHERE schedule = %(name)s AND status = 'pending' AND (SELECT count(*) FROM locked) >= 0
      AND NOT EXISTS (SELECT 1 FROM rota_waits w WHERE w.run_id = rota_runs.id AND w.token = rota_runs.token)  -- parked: in progress (0022)
    ORDER BY id
    FOR UPDATE
),
deps AS (
    {{lock_dependents(ARRAY(SELECT id FROM runs))}}
)
UPDATE rota_runs
SET status = 'cancelled', finished_at = {now},
    error = %(error)s
WHERE id = ANY(ARRAY(SELECT id FROM runs)) AND status = 'pending'
  AND (SELECT count(*) FROM deps) >= 0
RETURNING id

-- name: withdraw_ahead
-- transition: withdraw
-- A schedule paused, updated or redeployed: its tick runs made ahead of their tick and not
-- due yet are cancelled (with `definition` given: only if the stored one differs). Their
-- `tick` is cleared: the tick is no longer theirs, and can be materialized again.
UPDATE rota_runs
SET status = 'cancelled', tick = NULL, finished_at = {now}, error = %(error)s
WHERE schedule = %(name)s AND status = 'pending' AND tick IS NOT NULL AND attempt = 0
  AND NOT held AND due_at > {now}
  AND (%(definition)s::text IS NULL OR EXISTS (
       SELECT 1 FROM rota_schedules
       WHERE name = %(name)s AND definition IS DISTINCT FROM %(definition)s::text))
  AND NOT EXISTS (SELECT 1 FROM rota_waits w WHERE w.run_id = rota_runs.id AND w.token = rota_runs.token)  -- parked (0022)
RETURNING scheduled_for

-- name: rewind_schedule
-- The withdrawn tick is planned again when it comes (unless the schedule's change moves it).
UPDATE rota_schedules SET next_run_at = %(tick)s
WHERE name = %(name)s AND next_run_at > %(tick)s
RETURNING name

-- name: schedule_busy
-- An exclusive schedule with a pending or running run (held ones included): its next tick
-- is not made ahead, so the overlap policy is judged at the tick.
SELECT 1 FROM rota_runs
WHERE schedule = %(schedule)s AND exclusive AND status IN ('pending', 'running')
LIMIT 1

-- name: set_paused
UPDATE rota_schedules
SET paused = %(paused)s, next_run_at = coalesce(%(next_run_at)s, next_run_at), updated_at = {now}
WHERE name = %(name)s AND active
RETURNING name

-- name: due_schedules
SELECT name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, queue,
       priority, max_attempts, timeout, backoff, next_run_at, jitter
FROM rota_schedules
WHERE active AND NOT paused AND next_run_at <= {now}
ORDER BY next_run_at
LIMIT %(limit)s

-- name: due_schedules_ahead
-- As due_schedules, with the ticks due within `lead` seconds (made ahead of their tick).
SELECT name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, queue,
       priority, max_attempts, timeout, backoff, next_run_at, jitter
FROM rota_schedules
WHERE active AND NOT paused AND next_run_at <= {now} + make_interval(secs => %(lead)s)
ORDER BY next_run_at
LIMIT %(limit)s

-- name: advance_schedule
UPDATE rota_schedules
SET next_run_at = %(new)s,  -- a count at its column's maximum stays there (damaged: never a failed tick)
    skip_count = CASE WHEN skip_count <= 9223372036854775807 - %(skipped_more)s::bigint
                      THEN skip_count + %(skipped_more)s::bigint ELSE skip_count END
WHERE name = %(name)s AND next_run_at = %(old)s AND active AND NOT paused
RETURNING name

-- name: tick_exists
SELECT 1 FROM rota_runs WHERE schedule = %(schedule)s AND tick = %(tick)s

-- name: active_run
SELECT id, status FROM rota_runs
WHERE schedule = %(schedule)s AND exclusive AND NOT held AND status IN ('pending', 'running')

-- name: promote_held
-- transition: promote
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

-- <<< dashboard reads (rota.web) ------------------------------------------------------

-- ==== operate-store (issue 14): planning errors, cheap run counts ==========================
-- name: mark_plan_error
-- A schedule this worker cannot plan: keep the error, stop it being due (compare-and-set on
-- the next_run_at the worker saw, so a concurrent update wins).
UPDATE rota_schedules SET plan_error = %(error)s, next_run_at = NULL, updated_at = {now}
WHERE name = %(name)s AND next_run_at = %(old)s AND active
RETURNING name

-- ==== ticks made ahead (issue 18, branch ticks): misfire deadlines ==========================
-- name: insert_ahead
-- transition: make_ahead
-- The run of a tick that has not come yet: pending, due at the tick, with its misfire
-- deadline (tick + misfire_grace; NULL under misfire="all"): see 0005_ticks_ahead.sql.
INSERT INTO rota_runs (task, queue, priority, args, kwargs, schedule, tick, exclusive,
                       scheduled_for, due_at, max_attempts, timeout, backoff, misfire_at,
                       limit_name, limit_key, rate_name, rate_key)
VALUES (%(task)s, %(queue)s, %(priority)s, %(args)s, %(kwargs)s, %(schedule)s, %(tick)s,
        %(exclusive)s, %(tick)s, coalesce(%(due_at)s, %(tick)s), %(max_attempts)s, %(timeout)s, %(backoff)s,
        %(misfire_at)s, %(limit_name)s, %(limit_key)s, %(rate_name)s, %(rate_key)s)
ON CONFLICT DO NOTHING
RETURNING id

-- name: stale_ahead
-- Runs made ahead of their tick that no worker claimed by their misfire deadline, with what
-- judging them needs: the schedule's policy and grace, and whether a later tick of the
-- schedule is due by now (planned already, or still to plan).
SELECT r.id, r.schedule, r.tick, s.misfire, s.misfire_grace,
       coalesce(s.next_run_at <= {now}, false) OR EXISTS (
           SELECT 1 FROM rota_runs l
           WHERE l.schedule = r.schedule AND l.tick > r.tick AND l.tick <= {now})
FROM rota_runs r JOIN rota_schedules s ON s.name = r.schedule
WHERE r.status = 'pending' AND r.misfire_at IS NOT NULL AND r.misfire_at < {now}
ORDER BY r.misfire_at
LIMIT %(limit)s

-- name: misfire_ahead
-- transition: misfire_skip
-- A run made ahead, unclaimed past its misfire deadline, skipped by the misfire policy.
UPDATE rota_runs SET status = 'skipped', finished_at = {now}, error = %(error)s, misfire_at = NULL
WHERE id = %(id)s AND status = 'pending' AND misfire_at < {now}
RETURNING id

-- name: keep_ahead
-- transition: misfire_run
-- A run made ahead, unclaimed past its misfire deadline, that the misfire policy runs all
-- the same (misfire="coalesce" with no later tick due): claimable again, without deadline.
UPDATE rota_runs SET misfire_at = NULL
WHERE id = %(id)s AND status = 'pending' AND misfire_at < {now}
RETURNING id

-- name: schedule_set_notify_on
-- a stored schedule's notify_on words (JSON), or NULL
UPDATE rota_schedules SET notify_on = %(notify_on)s WHERE name = %(name)s

-- name: schedules_notify_on
SELECT name, notify_on FROM rota_schedules WHERE active AND notify_on IS NOT NULL
