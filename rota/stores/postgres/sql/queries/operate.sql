-- PostgreSQL queries: operators' steering and counts: cancel, status, paused queues, declared tasks.
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- name: cancel_active_pending
-- transition: overlap
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = %(error)s
WHERE id = %(id)s AND status = 'pending'
RETURNING id

-- name: request_cancel
-- transition: cancel
UPDATE rota_runs SET cancel_requested = true
WHERE id = %(id)s AND status = 'running'
RETURNING id, owner

-- name: cancel_requests
-- (SQLite's wake-ups read it; PostgreSQL delivers a cancellation by NOTIFY.)
SELECT id FROM rota_runs WHERE status = 'running' AND cancel_requested AND owner = %(owner)s

-- name: cancel_held
-- transition: overlap
-- Locks as cancel_schedule_pending does: the schedule's row, then the queued runs in id order
-- (a finisher holding the row promotes the oldest of them), then their waiting dependents.
WITH locked AS (
    SELECT name FROM rota_schedules WHERE name = %(schedule)s FOR UPDATE
),
runs AS (
    SELECT id FROM rota_runs
    WHERE schedule = %(schedule)s AND held AND status = 'pending' AND (SELECT count(*) FROM locked) >= 0
    ORDER BY id
    FOR UPDATE
),
deps AS (
    {{lock_dependents(ARRAY(SELECT id FROM runs))}}
)
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = %(error)s
WHERE id = ANY(ARRAY(SELECT id FROM runs)) AND held AND status = 'pending'
  AND (SELECT count(*) FROM deps) >= 0
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
       started_at, finished_at, result, error, attempts::text, retry_of, held, waiting_on, backfill
FROM rota_runs_all

-- name: count_by_status
SELECT status, count(*) FROM rota_runs_all GROUP BY status

-- name: cancel_pending
-- transition: cancel
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = %(error)s
WHERE id = %(id)s AND status = 'pending'
RETURNING status

-- name: run_status
SELECT status FROM rota_runs_all WHERE id = %(id)s

-- name: run_counts
-- The planner's view of rota_runs: a first row (NULL, estimated rows now: reltuples scaled
-- by the table's current size, as the planner does), then (status, estimated rows) from the
-- status column's most-common-values statistics. No scan of the table.
WITH rel AS (
    SELECT c.oid, c.relnamespace,
           CASE WHEN c.relpages > 0
                THEN c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::float8)
                ELSE c.reltuples END AS total
    FROM pg_class c WHERE c.oid = 'rota_runs'::regclass
)
SELECT NULL::text, round(total)::bigint FROM rel
UNION ALL
SELECT v.status, round(v.freq * rel.total)::bigint
FROM rel
JOIN pg_namespace n ON n.oid = rel.relnamespace
JOIN pg_stats s ON s.schemaname = n.nspname AND s.tablename = 'rota_runs' AND s.attname = 'status'
CROSS JOIN LATERAL unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS v(status, freq)

-- name: count_status
-- Exact, through rota_runs_active for pending and running (the few active runs).
SELECT count(*) FROM rota_runs WHERE status = %(status)s

-- ==== paused queues and declared tasks (migration 0021, issue 44) ==========================
-- name: queue_pause
-- A queue paused fleet-wide: every claim skips its runs, through `coalesce(queue <> ALL
-- (ARRAY(SELECT queue FROM rota_queue_pauses)), true)` in claim, poll_state, plain_due and
-- flow_*: the table is read once per statement (an InitPlan), and the test is a filter on the
-- rows the claim index gives in order. Plain, `queue <> ALL (...)` (or a NOT EXISTS) took its
-- selectivity from the queue column's statistics: with one queue in use it read as "no row
-- passes", and the claim became a sequential scan and a sort (tests/test_operate.py); the
-- coalesce hides the comparison from the statistics (a default half).
INSERT INTO rota_queue_pauses (queue, paused_at, paused_by) VALUES (%(queue)s, {now}, %(by)s)
ON CONFLICT (queue) DO NOTHING

-- name: queue_resume
DELETE FROM rota_queue_pauses WHERE queue = %(queue)s

-- name: queue_pauses
SELECT queue, paused_at, paused_by FROM rota_queue_pauses ORDER BY queue

-- name: queue_counts
-- the active runs of each queue (through rota_runs_active: the few active runs)
SELECT queue, sum(CASE WHEN status = 'pending' THEN 1 ELSE 0 END),
       sum(CASE WHEN status = 'running' THEN 1 ELSE 0 END)
FROM rota_runs WHERE status IN ('pending', 'running') GROUP BY queue

-- name: tasks_declare
INSERT INTO rota_tasks (task, declared_at) VALUES (%(task)s, {now})
ON CONFLICT (task) DO UPDATE SET declared_at = excluded.declared_at

-- name: tasks_declared
SELECT task FROM rota_tasks ORDER BY task
