-- SQLite queries: schedules: upserts, due ticks, ticks made ahead, overlap and misfire, notify_on.
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- name: upsert_code_schedule
{{schedule_insert}}
    timeout = excluded.timeout, backoff = excluded.backoff, jitter = excluded.jitter, source = excluded.source,
    app = excluded.app, definition = excluded.definition, active = 1, updated_at = {now},
    -- A deploy keeps next_run_at unless the timing changed (a missed tick stays due and
    -- meets the misfire policy); a timing change moves it to the new first tick, unless the
    -- old next_run_at was already missed: then that tick stays due (the misfire policy
    -- applies to it and to the new timing's ticks up to now).
    next_run_at = CASE WHEN s.run_count = 0 AND s.last_run_at IS NULL AND excluded.run_immediately
                       THEN coalesce(min(s.next_run_at, excluded.next_run_at), excluded.next_run_at)
                       WHEN NOT s.active OR s.next_run_at IS NULL THEN :first_tick
                       WHEN s.cron IS excluded.cron AND s.every IS excluded.every AND s.tz = excluded.tz
                       THEN s.next_run_at
                       WHEN s.next_run_at < {now} THEN s.next_run_at
                       ELSE :first_tick END
WHERE s.definition IS NOT excluded.definition OR NOT s.active

-- name: forget_damaged_schedule
-- A code schedule stored damaged (a field that cannot be planned: rota.timing.stored): its
-- definition is forgotten, so the upsert that follows rewrites it whole from the code, at a
-- new first tick (a next_run_at clears its plan error).
UPDATE rota_schedules SET definition = '', next_run_at = NULL
WHERE name = :name AND source = 'code'

-- name: deactivate_code_schedules
UPDATE rota_schedules SET active = 0, updated_at = {now}
WHERE source = 'code' AND app = :app AND active
  AND name NOT IN (SELECT value FROM json_each(:names))
RETURNING name

-- name: insert_schedule
{{schedule_insert}}
    timeout = excluded.timeout, backoff = excluded.backoff, jitter = excluded.jitter, source = excluded.source,
    app = excluded.app, definition = excluded.definition, active = 1, paused = 0,
    next_run_at = excluded.next_run_at, updated_at = {now}
WHERE NOT s.active
RETURNING name

-- name: update_schedule
UPDATE rota_schedules SET
    task = :task, cron = :cron, every = :every, tz = :tz, args = :args, kwargs = :kwargs,
    overlap = :overlap, misfire = :misfire, misfire_grace = :misfire_grace,
    run_immediately = :run_immediately, queue = :queue, priority = :priority,
    max_attempts = :max_attempts, timeout = :timeout, backoff = :backoff, jitter = :jitter,
    definition = :definition, next_run_at = coalesce(:next_run_at, next_run_at),
    updated_at = {now}
WHERE name = :name AND active
RETURNING name

-- name: deactivate_schedule
UPDATE rota_schedules SET active = 0, updated_at = {now}
WHERE name = :name AND active
RETURNING name

-- name: cancel_schedule_pending
-- transition: withdraw
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = :error
WHERE schedule = :name AND status = 'pending'
  AND NOT EXISTS (SELECT 1 FROM rota_waits w WHERE w.run_id = rota_runs.id AND w.token = rota_runs.token)  -- parked: in progress (0022)
RETURNING id

-- name: withdraw_ahead
-- transition: withdraw
-- A schedule paused, updated or redeployed: its tick runs made ahead of their tick and not
-- due yet are cancelled (with `definition` given: only if the stored one differs). Their
-- `tick` is cleared: the tick is no longer theirs, and can be materialized again.
UPDATE rota_runs
SET status = 'cancelled', tick = NULL, finished_at = {now}, error = :error
WHERE schedule = :name AND status = 'pending' AND tick IS NOT NULL AND attempt = 0
  AND NOT held AND due_at > {now}
  AND (:definition IS NULL OR EXISTS (
       SELECT 1 FROM rota_schedules
       WHERE name = :name AND definition IS NOT :definition))
  AND NOT EXISTS (SELECT 1 FROM rota_waits w WHERE w.run_id = rota_runs.id AND w.token = rota_runs.token)  -- parked (0022)
RETURNING scheduled_for

-- name: rewind_schedule
-- The withdrawn tick is planned again when it comes (unless the schedule's change moves it).
UPDATE rota_schedules SET next_run_at = :tick
WHERE name = :name AND next_run_at > :tick
RETURNING name

-- name: schedule_busy
-- An exclusive schedule with a pending or running run (held ones included): its next tick
-- is not made ahead, so the overlap policy is judged at the tick.
SELECT 1 FROM rota_runs
WHERE schedule = :schedule AND exclusive AND status IN ('pending', 'running')
LIMIT 1

-- name: set_paused
UPDATE rota_schedules
SET paused = :paused, next_run_at = coalesce(:next_run_at, next_run_at), updated_at = {now}
WHERE name = :name AND active
RETURNING name

-- name: due_schedules
-- next_run_at on a whole microsecond, as a datetime holds it (a time written by hand may
-- not be): advance_schedule and mark_plan_error compare the one read so rounded.
SELECT name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, queue,
       priority, max_attempts, timeout, backoff, round(next_run_at * 1000000) / 1000000, jitter
FROM rota_schedules
WHERE active AND NOT paused AND next_run_at <= {now}
ORDER BY next_run_at
LIMIT :limit

-- name: due_schedules_ahead
-- As due_schedules, with the ticks due within `lead` seconds (made ahead of their tick).
SELECT name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, queue,
       priority, max_attempts, timeout, backoff, round(next_run_at * 1000000) / 1000000, jitter
FROM rota_schedules
WHERE active AND NOT paused AND next_run_at <= {now} + :lead
ORDER BY next_run_at
LIMIT :limit

-- name: advance_schedule
UPDATE rota_schedules
SET next_run_at = :new,  -- a count at its column's maximum stays there (damaged: never a failed tick)
    skip_count = CASE WHEN skip_count <= 9223372036854775807 - :skipped_more THEN skip_count + :skipped_more
                      ELSE skip_count END
WHERE name = :name AND round(next_run_at * 1000000) = round(:old * 1000000) AND active AND NOT paused
RETURNING name

-- name: tick_exists
SELECT 1 FROM rota_runs WHERE schedule = :schedule AND tick = :tick

-- name: active_run
SELECT id, status FROM rota_runs
WHERE schedule = :schedule AND exclusive AND NOT held AND status IN ('pending', 'running')

-- name: promote_held
-- transition: promote
UPDATE rota_runs SET held = 0
WHERE id = (SELECT id FROM rota_runs
            WHERE schedule = :schedule AND held AND status = 'pending'
            ORDER BY scheduled_for, id LIMIT 1)
  AND NOT EXISTS (SELECT 1 FROM rota_runs
                  WHERE schedule = :schedule AND exclusive AND NOT held
                    AND status IN ('pending', 'running'))
RETURNING id

-- name: lock_schedule
-- (Write transactions are serialized on SQLite: nothing to lock; kept for the same flow.)
SELECT name FROM rota_schedules WHERE name = :schedule

-- <<< dashboard reads (rota.web) ------------------------------------------------------

-- ==== operate-store (issue 14): planning errors, cheap run counts ==========================
-- name: mark_plan_error
-- A schedule this worker cannot plan: keep the error, stop it being due (compare-and-set on
-- the next_run_at the worker saw, so a concurrent update wins).
UPDATE rota_schedules SET plan_error = :error, next_run_at = NULL, updated_at = {now}
WHERE name = :name AND round(next_run_at * 1000000) = round(:old * 1000000) AND active
RETURNING name

-- ==== ticks made ahead (issue 18, branch ticks): misfire deadlines ==========================
-- name: insert_ahead
-- transition: make_ahead
-- The run of a tick that has not come yet: pending, due at the tick, with its misfire
-- deadline (tick + misfire_grace; NULL under misfire="all"): see 0005_ticks_ahead.sql.
INSERT INTO rota_runs (task, queue, priority, args, kwargs, schedule, tick, exclusive,
                       scheduled_for, due_at, max_attempts, timeout, backoff, misfire_at, created_at,
                       limit_name, limit_key, rate_name, rate_key)
VALUES (:task, :queue, :priority, :args, :kwargs, :schedule, :tick, :exclusive, :tick, coalesce(:due_at, :tick),
        :max_attempts, :timeout, :backoff, :misfire_at, {now},
        :limit_name, :limit_key, :rate_name, :rate_key)
ON CONFLICT DO NOTHING
RETURNING id

-- name: stale_ahead
-- Runs made ahead of their tick that no worker claimed by their misfire deadline, with what
-- judging them needs: the schedule's policy and grace, and whether a later tick of the
-- schedule is due by now (planned already, or still to plan).
SELECT r.id, r.schedule, r.tick, s.misfire, s.misfire_grace,
       coalesce(s.next_run_at <= {now}, 0) OR EXISTS (
           SELECT 1 FROM rota_runs l
           WHERE l.schedule = r.schedule AND l.tick > r.tick AND l.tick <= {now})
FROM rota_runs r INDEXED BY rota_runs_misfire JOIN rota_schedules s ON s.name = r.schedule
WHERE r.status = 'pending' AND r.misfire_at IS NOT NULL AND r.misfire_at < {now}
ORDER BY r.misfire_at
LIMIT :limit

-- name: misfire_ahead
-- transition: misfire_skip
-- A run made ahead, unclaimed past its misfire deadline, skipped by the misfire policy.
UPDATE rota_runs SET status = 'skipped', finished_at = {now}, error = :error, misfire_at = NULL
WHERE id = :id AND status = 'pending' AND misfire_at < {now}
RETURNING id

-- name: keep_ahead
-- transition: misfire_run
-- A run made ahead, unclaimed past its misfire deadline, that the misfire policy runs all
-- the same (misfire="coalesce" with no later tick due): claimable again, without deadline.
UPDATE rota_runs SET misfire_at = NULL
WHERE id = :id AND status = 'pending' AND misfire_at < {now}
RETURNING id

-- name: schedule_set_notify_on
UPDATE rota_schedules SET notify_on = :notify_on WHERE name = :name

-- name: schedules_notify_on
SELECT name, notify_on FROM rota_schedules WHERE active AND notify_on IS NOT NULL
