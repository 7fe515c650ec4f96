-- Named queries of the MySQL store: schedules, their ticks and the runs they make.
-- An upsert's conditional update (PostgreSQL's ON CONFLICT ... DO UPDATE ... WHERE) is an
-- ON DUPLICATE KEY UPDATE whose every assignment keeps the old value unless the condition
-- holds; the condition's own columns are assigned last (assignments run left to right).

-- name: upsert_code_schedule
INSERT INTO rota_schedules (
    name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, run_immediately,
    queue, priority, max_attempts, timeout, backoff, jitter, source, app, definition, next_run_at,
    created_at, updated_at)
VALUES (%(name)s, %(task)s, %(cron)s, %(every)s, %(tz)s, %(args)s, %(kwargs)s, %(overlap)s, %(misfire)s,
        %(misfire_grace)s, %(run_immediately)s, %(queue)s, %(priority)s, %(max_attempts)s, %(timeout)s,
        %(backoff)s, %(jitter)s, %(source)s, %(app)s, %(definition)s, %(next_run_at)s, {now}, {now})
ON DUPLICATE KEY UPDATE
    next_run_at = CASE WHEN NOT (definition <=> VALUES(definition) AND active <> 0) THEN
                      CASE WHEN run_count = 0 AND last_run_at IS NULL AND VALUES(run_immediately) <> 0
                           THEN coalesce(LEAST(next_run_at, VALUES(next_run_at)), VALUES(next_run_at))
                           WHEN active = 0 OR next_run_at IS NULL THEN %(first_tick)s
                           WHEN cron <=> VALUES(cron) AND every <=> VALUES(every) AND tz = VALUES(tz)
                           THEN next_run_at
                           WHEN next_run_at < {now} THEN next_run_at
                           ELSE %(first_tick)s END
                  ELSE next_run_at END,
    task = IF(NOT (definition <=> VALUES(definition) AND active <> 0), VALUES(task), task),
    cron = IF(NOT (definition <=> VALUES(definition) AND active <> 0), VALUES(cron), cron),
    every = IF(NOT (definition <=> VALUES(definition) AND active <> 0), VALUES(every), every),
    tz = IF(NOT (definition <=> VALUES(definition) AND active <> 0), VALUES(tz), tz),
    args = IF(NOT (definition <=> VALUES(definition) AND active <> 0), VALUES(args), args),
    kwargs = IF(NOT (definition <=> VALUES(definition) AND active <> 0), VALUES(kwargs), kwargs),
    overlap = IF(NOT (definition <=> VALUES(definition) AND active <> 0), VALUES(overlap), overlap),
    misfire = IF(NOT (definition <=> VALUES(definition) AND active <> 0), VALUES(misfire), misfire),
    misfire_grace = IF(NOT (definition <=> VALUES(definition) AND active <> 0), VALUES(misfire_grace), misfire_grace),
    run_immediately = IF(NOT (definition <=> VALUES(definition) AND active <> 0), VALUES(run_immediately), run_immediately),
    queue = IF(NOT (definition <=> VALUES(definition) AND active <> 0), VALUES(queue), queue),
    priority = IF(NOT (definition <=> VALUES(definition) AND active <> 0), VALUES(priority), priority),
    max_attempts = IF(NOT (definition <=> VALUES(definition) AND active <> 0), VALUES(max_attempts), max_attempts),
    timeout = IF(NOT (definition <=> VALUES(definition) AND active <> 0), VALUES(timeout), timeout),
    backoff = IF(NOT (definition <=> VALUES(definition) AND active <> 0), VALUES(backoff), backoff),
    jitter = IF(NOT (definition <=> VALUES(definition) AND active <> 0), VALUES(jitter), jitter),
    source = IF(NOT (definition <=> VALUES(definition) AND active <> 0), VALUES(source), source),
    app = IF(NOT (definition <=> VALUES(definition) AND active <> 0), VALUES(app), app),
    updated_at = IF(NOT (definition <=> VALUES(definition) AND active <> 0), {now}, updated_at),
    active = IF(NOT (definition <=> VALUES(definition) AND active <> 0), 1, active),
    definition = VALUES(definition)

-- name: forget_damaged_schedule
UPDATE rota_schedules SET definition = '', next_run_at = NULL
WHERE name = %(name)s AND source = 'code'

-- name: deactivate_code_schedules
-- The candidates are read without locks, then locked by name and checked again: a locking read
-- of the scan would wait on every row it passes, also other schedules' (InnoDB locks a row
-- before it tests it), so a host frozen inside a tick of any schedule kept every worker from
-- starting (this runs at each start).
SELECT name FROM rota_schedules
WHERE source = 'code' AND app = %(app)s AND active <> 0
  AND name NOT IN (SELECT j.v FROM JSON_TABLE(%(names)s, '$[*]' COLUMNS (v VARCHAR(255) PATH '$')) AS j)
;
SELECT name FROM rota_schedules FORCE INDEX (PRIMARY)
WHERE name IN %(_ids)s AND source = 'code' AND app = %(app)s AND active <> 0
FOR UPDATE
;
UPDATE rota_schedules SET active = 0, updated_at = {now}
WHERE name IN %(_ids)s AND source = 'code' AND app = %(app)s AND active <> 0

-- name: insert_schedule
-- A new schedule, or an inactive one made anew (an active one of that name: no row).
INSERT INTO rota_schedules (
    name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, run_immediately,
    queue, priority, max_attempts, timeout, backoff, jitter, source, app, definition, next_run_at,
    created_at, updated_at)
VALUES (%(name)s, %(task)s, %(cron)s, %(every)s, %(tz)s, %(args)s, %(kwargs)s, %(overlap)s, %(misfire)s,
        %(misfire_grace)s, %(run_immediately)s, %(queue)s, %(priority)s, %(max_attempts)s, %(timeout)s,
        %(backoff)s, %(jitter)s, %(source)s, %(app)s, %(definition)s, %(next_run_at)s, {now}, {now})
ON DUPLICATE KEY UPDATE
    task = IF(active = 0, VALUES(task), task), cron = IF(active = 0, VALUES(cron), cron),
    every = IF(active = 0, VALUES(every), every), tz = IF(active = 0, VALUES(tz), tz),
    args = IF(active = 0, VALUES(args), args), kwargs = IF(active = 0, VALUES(kwargs), kwargs),
    overlap = IF(active = 0, VALUES(overlap), overlap), misfire = IF(active = 0, VALUES(misfire), misfire),
    misfire_grace = IF(active = 0, VALUES(misfire_grace), misfire_grace),
    run_immediately = IF(active = 0, VALUES(run_immediately), run_immediately),
    queue = IF(active = 0, VALUES(queue), queue), priority = IF(active = 0, VALUES(priority), priority),
    max_attempts = IF(active = 0, VALUES(max_attempts), max_attempts),
    timeout = IF(active = 0, VALUES(timeout), timeout), backoff = IF(active = 0, VALUES(backoff), backoff),
    jitter = IF(active = 0, VALUES(jitter), jitter), source = IF(active = 0, VALUES(source), source),
    app = IF(active = 0, VALUES(app), app), definition = IF(active = 0, VALUES(definition), definition),
    paused = IF(active = 0, 0, paused), next_run_at = IF(active = 0, VALUES(next_run_at), next_run_at),
    updated_at = IF(active = 0, {now}, updated_at),
    active = 1
;
SELECT %(name)s FROM DUAL WHERE ROW_COUNT() > 0

-- name: update_schedule
SELECT name FROM rota_schedules WHERE name = %(name)s AND active <> 0 FOR UPDATE
;
UPDATE rota_schedules SET
    task = %(task)s, cron = %(cron)s, every = %(every)s, tz = %(tz)s, args = %(args)s, kwargs = %(kwargs)s,
    overlap = %(overlap)s, misfire = %(misfire)s, misfire_grace = %(misfire_grace)s,
    run_immediately = %(run_immediately)s, queue = %(queue)s, priority = %(priority)s,
    max_attempts = %(max_attempts)s, timeout = %(timeout)s, backoff = %(backoff)s, jitter = %(jitter)s,
    definition = %(definition)s, next_run_at = coalesce(%(next_run_at)s, next_run_at),
    updated_at = {now}
WHERE name IN %(_ids)s

-- name: deactivate_schedule
SELECT name FROM rota_schedules WHERE name = %(name)s AND active <> 0 FOR UPDATE
;
UPDATE rota_schedules SET active = 0, updated_at = {now} WHERE name IN %(_ids)s

-- name: cancel_schedule_pending
-- transition: withdraw
SELECT id FROM rota_runs WHERE schedule = %(name)s AND sched_status = 'pending'
  AND NOT EXISTS (SELECT 1 FROM rota_waits w WHERE w.run_id = rota_runs.id AND w.token = rota_runs.token)  -- parked: in progress (0022)
ORDER BY id FOR UPDATE
;
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = %(error)s WHERE id IN %(_ids)s

-- name: withdraw_ahead
-- transition: withdraw
-- A schedule paused, updated or redeployed: its tick runs made ahead and not due yet are
-- cancelled (with `definition` given: only if the stored one differs); their tick cleared.
SELECT id, scheduled_for FROM rota_runs
WHERE schedule = %(name)s AND sched_status = 'pending' AND tick IS NOT NULL AND attempt = 0
  AND held = 0 AND due_at > {now}
  AND (%(definition)s IS NULL OR EXISTS (
       SELECT 1 FROM rota_schedules
       WHERE name = %(name)s AND NOT (definition <=> %(definition)s)))
  AND NOT EXISTS (SELECT 1 FROM rota_waits w WHERE w.run_id = rota_runs.id AND w.token = rota_runs.token)  -- parked (0022)
ORDER BY id FOR UPDATE
;
UPDATE rota_runs SET status = 'cancelled', tick = NULL, finished_at = {now}, error = %(error)s
WHERE id IN %(_ids)s
;
SELECT scheduled_for FROM rota_runs WHERE id IN %(_ids)s

-- name: rewind_schedule
SELECT name FROM rota_schedules WHERE name = %(name)s AND next_run_at > %(tick)s FOR UPDATE
;
UPDATE rota_schedules SET next_run_at = %(tick)s WHERE name IN %(_ids)s

-- name: schedule_busy
SELECT 1 FROM rota_runs
WHERE schedule = %(schedule)s AND exclusive <> 0 AND sched_status IN ('pending', 'running')
LIMIT 1

-- name: set_paused
SELECT name FROM rota_schedules WHERE name = %(name)s AND active <> 0 FOR UPDATE
;
UPDATE rota_schedules
SET paused = %(paused)s, next_run_at = coalesce(%(next_run_at)s, next_run_at), updated_at = {now}
WHERE name IN %(_ids)s

-- name: due_schedules
SELECT name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, queue,
       priority, max_attempts, timeout, backoff, next_run_at, jitter
FROM rota_schedules
WHERE active <> 0 AND paused = 0 AND next_run_at <= {now}
ORDER BY next_run_at
LIMIT %(limit)s

-- name: due_schedules_ahead
SELECT name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, queue,
       priority, max_attempts, timeout, backoff, next_run_at, jitter
FROM rota_schedules
WHERE active <> 0 AND paused = 0 AND next_run_at <= {now} + INTERVAL %(lead)s SECOND
ORDER BY next_run_at
LIMIT %(limit)s

-- name: take_tick
-- A tick pass's first statement: the schedule's row as the worker read it, locked without
-- waiting. No row: another instance made this tick (the row moved on): this pass ends at
-- once, having waited for nothing and locked nothing (its insert of the same tick would wait
-- for the other's commit, then lock the other's run, a duplicate key, until its own rollback:
-- claims ahead, SKIP LOCKED, skipped that run). A row locked by another transaction while one
-- of the schedule's runs is active (its finish may hold it: tick_held) is tried again briefly.
SELECT name FROM rota_schedules
WHERE name = %(name)s AND next_run_at = %(old)s AND active <> 0 AND paused = 0
FOR UPDATE SKIP LOCKED

-- name: tick_held
-- take_tick found no row. A row: it is still as the worker read it (READ COMMITTED: the
-- last commit's), so another transaction holds it; 1 if the schedule has an active run,
-- whose finish may be the holder (its trigger updates the row): the pass tries again
-- (_take_tick). With none, the holder is another tick maker (or an operator's write), or a
-- finish that has just committed: one more try, then the pass moves on to the next schedule.
SELECT EXISTS (SELECT 1 FROM rota_runs WHERE schedule = %(name)s AND sched_status IN ('pending', 'running'))
FROM rota_schedules
WHERE name = %(name)s AND next_run_at = %(old)s AND active <> 0 AND paused = 0

-- name: advance_schedule
-- (compare-and-set on the next_run_at the worker read)
SELECT name FROM rota_schedules
WHERE name = %(name)s AND next_run_at = %(old)s AND active <> 0 AND paused = 0
FOR UPDATE
;
UPDATE rota_schedules
SET next_run_at = %(new)s,
    skip_count = CASE WHEN skip_count <= 9223372036854775807 - %(skipped_more)s THEN skip_count + %(skipped_more)s
                      ELSE skip_count END
WHERE name IN %(_ids)s

-- name: mark_plan_error
SELECT name FROM rota_schedules WHERE name = %(name)s AND next_run_at = %(old)s AND active <> 0 FOR UPDATE
;
UPDATE rota_schedules SET plan_error = %(error)s, next_run_at = NULL, updated_at = {now} WHERE name IN %(_ids)s

-- name: tick_exists
SELECT 1 FROM rota_runs WHERE schedule = %(schedule)s AND tick = %(tick)s

-- name: active_run
SELECT id, status FROM rota_runs
WHERE exclusive_slot = %(schedule)s

-- name: cancel_active_pending
-- transition: overlap
SELECT id FROM rota_runs WHERE id = %(id)s AND status = 'pending' FOR UPDATE
;
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = %(error)s WHERE id IN %(_ids)s

-- name: cancel_held
-- transition: overlap
SELECT id FROM rota_runs WHERE schedule = %(schedule)s AND held <> 0 AND sched_status = 'pending' ORDER BY id FOR UPDATE
;
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = %(error)s WHERE id IN %(_ids)s

-- name: promote_held
-- transition: promote
-- The oldest held run of an exclusive schedule whose slot is free takes it.
SELECT id FROM rota_runs
WHERE schedule = %(schedule)s AND held <> 0 AND sched_status = 'pending' AND waiting_on = 0
  AND NOT EXISTS (SELECT 1 FROM (SELECT id FROM rota_runs WHERE exclusive_slot = %(schedule)s) AS busy)
ORDER BY scheduled_for, id LIMIT 1
FOR UPDATE
;
UPDATE rota_runs SET held = 0 WHERE id IN %(_ids)s

-- name: lock_schedule
-- The schedule's row, locked: its ticks are made one transaction at a time.
SELECT name FROM rota_schedules WHERE name = %(schedule)s FOR UPDATE

-- name: schedule_columns
SELECT name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, queue, priority,
       max_attempts, timeout, source, active, paused, next_run_at, last_run_at, last_status,
       run_count, success_count, failure_count, skip_count, run_immediately, backoff, app,
       definition, plan_error, jitter
FROM rota_schedules

-- name: backfill_bound
SELECT next_run_at FROM rota_schedules WHERE name = %(name)s AND active <> 0

-- name: backfill_release
-- transition: backfill
UPDATE rota_runs SET tick = NULL
WHERE schedule = %(name)s AND sched_status = 'skipped' AND tick IN %(ticks)s

-- name: insert_ahead
-- transition: make_ahead
-- The run of a tick that has not come yet: pending, due at the tick, with its misfire deadline.
INSERT INTO rota_runs (task, queue, priority, args, kwargs, schedule, tick, exclusive,
                       scheduled_for, due_at, max_attempts, timeout, backoff, misfire_at, created_at,
                       limit_name, limit_key, rate_name, rate_key)
VALUES (%(task)s, %(queue)s, %(priority)s, %(args)s, %(kwargs)s, %(schedule)s, %(tick)s, %(exclusive)s,
        %(tick)s, coalesce(%(due_at)s, %(tick)s), %(max_attempts)s, %(timeout)s, %(backoff)s,
        %(misfire_at)s, {now}, %(limit_name)s, %(limit_key)s, %(rate_name)s, %(rate_key)s)
ON DUPLICATE KEY UPDATE id = id
;
SELECT LAST_INSERT_ID() FROM DUAL WHERE ROW_COUNT() = 1

-- name: stale_ahead
SELECT r.id, r.schedule, r.tick, s.misfire, s.misfire_grace,
       coalesce(s.next_run_at <= {now}, 0) OR EXISTS (
           SELECT 1 FROM rota_runs l
           WHERE l.schedule = r.schedule AND l.tick > r.tick AND l.tick <= {now})
FROM rota_runs r JOIN rota_schedules s ON s.name = r.schedule
WHERE r.status = 'pending' AND r.misfire_pending < {now}
ORDER BY r.misfire_pending
LIMIT %(limit)s

-- name: misfire_ahead
-- transition: misfire_skip
SELECT id FROM rota_runs WHERE id = %(id)s AND status = 'pending' AND misfire_at < {now} FOR UPDATE
;
UPDATE rota_runs SET status = 'skipped', finished_at = {now}, error = %(error)s, misfire_at = NULL
WHERE id IN %(_ids)s

-- name: keep_ahead
-- transition: misfire_run
SELECT id FROM rota_runs WHERE id = %(id)s AND status = 'pending' AND misfire_at < {now} FOR UPDATE
;
UPDATE rota_runs SET misfire_at = NULL WHERE id IN %(_ids)s

-- name: schedule_set_notify_on
UPDATE rota_schedules SET notify_on = %(notify_on)s WHERE name = %(name)s

-- name: schedules_notify_on
SELECT name, notify_on FROM rota_schedules WHERE active <> 0 AND notify_on IS NOT NULL
