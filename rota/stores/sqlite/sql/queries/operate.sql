-- SQLite queries: operators' steering and counts: cancel, status, paused queues, declared tasks.
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- name: cancel_active_pending
-- transition: overlap
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = :error
WHERE id = :id AND status = 'pending'
RETURNING id

-- name: request_cancel
-- transition: cancel
UPDATE rota_runs SET cancel_requested = 1
WHERE id = :id AND status = 'running'
RETURNING id, owner

-- name: cancel_requests
-- The runs of one worker whose cancellation was requested (another process's request reaches
-- its worker through the data_version watch: rota/worker/wakeups.py). Reads the running runs
-- only (rota_runs_status).
SELECT id FROM rota_runs WHERE status = 'running' AND cancel_requested AND owner = :owner

-- name: cancel_held
-- transition: overlap
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = :error
WHERE schedule = :schedule AND held AND status = 'pending'
RETURNING id

-- name: schedule_columns
SELECT name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, queue, priority,
       max_attempts, timeout, source, active, paused, next_run_at, last_run_at, last_status,
       run_count, success_count, failure_count, skip_count, run_immediately, backoff, app,
       definition, plan_error, jitter
FROM rota_schedules

-- name: run_columns
SELECT id, task, status, queue, priority, args, kwargs, key, schedule, scheduled_for, due_at,
       attempt, max_attempts, timeout, owner, token, lease_until, cancel_requested, created_at,
       started_at, finished_at, result, error, attempts, retry_of, held, waiting_on, backfill
FROM rota_runs

-- name: count_by_status
-- Kept by triggers (migration 0004): no scan of rota_runs.
SELECT status, n FROM rota_run_counts WHERE n <> 0

-- name: cancel_pending
-- transition: cancel
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = :error
WHERE id = :id AND status = 'pending'
RETURNING status

-- name: run_status
SELECT status FROM rota_runs WHERE id = :id

-- name: run_counts
-- Exact, kept by triggers (0004). PostgreSQL answers the same name with estimates.
SELECT status, n FROM rota_run_counts

-- name: count_status
SELECT n FROM rota_run_counts WHERE status = :status

-- ==== paused queues and declared tasks (migration 0021, issue 44) ==========================
-- name: queue_pause
INSERT INTO rota_queue_pauses (queue, paused_at, paused_by) VALUES (:queue, {now}, :by)
ON CONFLICT (queue) DO NOTHING

-- name: queue_resume
DELETE FROM rota_queue_pauses WHERE queue = :queue

-- name: queue_pauses
SELECT queue, paused_at, paused_by FROM rota_queue_pauses ORDER BY queue

-- name: queue_counts
SELECT queue, sum(CASE WHEN status = 'pending' THEN 1 ELSE 0 END),
       sum(CASE WHEN status = 'running' THEN 1 ELSE 0 END)
FROM rota_runs WHERE status IN ('pending', 'running') GROUP BY queue

-- name: tasks_declare
INSERT INTO rota_tasks (task, declared_at) VALUES (:task, {now})
ON CONFLICT (task) DO UPDATE SET declared_at = excluded.declared_at

-- name: tasks_declared
SELECT task FROM rota_tasks ORDER BY task
