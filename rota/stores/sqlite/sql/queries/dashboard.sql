-- SQLite queries: the dashboard's reads (rota.web) and its sign-outs.
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- Dashboard sign-outs (rota.web.sessions); times are the dashboard's Unix seconds (:at).
-- name: signout_add
INSERT INTO rota_dashboard_signouts (nonce, expires_at) VALUES (:nonce, :expires_at)
ON CONFLICT (nonce) DO NOTHING

-- name: signout_prune
DELETE FROM rota_dashboard_signouts WHERE expires_at <= :at

-- name: signed_out
SELECT 1 FROM rota_dashboard_signouts WHERE nonce = :nonce AND expires_at > :at

-- >>> dashboard reads (rota.web) ------------------------------------------------------
-- Times as epoch seconds and JSON as text: rota.web decodes them and shows a value it
-- cannot decode (a date past year 9999, corrupt JSON) as corrupt instead of failing.
-- The store appends the WHERE/ORDER/LIMIT of a RunFilter or of one id.
-- name: web_run_summaries
SELECT id, task, status, queue, priority, key, schedule, scheduled_for, attempt, max_attempts,
       owner, token, lease_until, cancel_requested, created_at, started_at, finished_at, retry_of,
       substr(args, 1, :preview), length(args), substr(kwargs, 1, :preview), length(kwargs),
       substr(result, 1, :preview), length(result), substr(error, 1, :error_prefix), length(error),
       backfill, waiting_on
FROM rota_runs

-- name: web_run_detail
SELECT id, task, status, queue, priority, key, schedule, scheduled_for, attempt, max_attempts,
       owner, token, lease_until, cancel_requested, created_at, started_at, finished_at, retry_of,
       args, kwargs, result, error, attempts, backfill, due_at
FROM rota_runs

-- name: web_timeline
SELECT id, task, schedule, status, attempt, scheduled_for, started_at, finished_at, owner
FROM rota_runs

-- name: web_throughput
-- One bucket of a throughput chart (rota.web.charts): the first :cap runs that finished in
-- [lo, hi), in finished_at order from rota_runs_finished (0007), which covers the columns
-- read: no table access. The cap bounds the work; a full bucket is scaled up.
SELECT count(*), max(finished_at), count(*),
       coalesce(sum(status = 'succeeded'), 0), coalesce(sum(status = 'failed'), 0),
       coalesce(sum(status = 'skipped'), 0), coalesce(sum(status = 'cancelled'), 0),
       coalesce(sum(max(attempt - 1, 0)), 0)
FROM (SELECT finished_at, status, attempt FROM rota_runs INDEXED BY rota_runs_finished
      WHERE finished_at >= :lo AND finished_at < :hi
      ORDER BY finished_at LIMIT :cap)

-- name: web_throughput_where
-- web_throughput for one task and/or queue: the cap bounds the rows read (before the
-- filter), so a rare task costs no more than a common one; the third column counts matches.
SELECT count(*), max(finished_at), coalesce(sum(hit), 0),
       coalesce(sum(hit AND status = 'succeeded'), 0), coalesce(sum(hit AND status = 'failed'), 0),
       coalesce(sum(hit AND status = 'skipped'), 0), coalesce(sum(hit AND status = 'cancelled'), 0),
       coalesce(sum(CASE WHEN hit THEN max(attempt - 1, 0) ELSE 0 END), 0)
FROM (SELECT finished_at, status, attempt,
             (:task IS NULL OR task = :task) AND (:queue IS NULL OR queue = :queue) AS hit
      FROM rota_runs INDEXED BY rota_runs_finished
      WHERE finished_at >= :lo AND finished_at < :hi
      ORDER BY finished_at LIMIT :cap)

-- name: web_lateness
-- A sample of one bucket for the lateness chart, the first :cap finishes in [lo, hi):
-- attempt, start - scheduled_for, the queue wait (start - when it was both due and
-- created), and whether it matches the task/queue filter (applied after the cap).
SELECT attempt, started_at - scheduled_for, started_at - max(created_at, due_at),
       started_at IS NOT NULL AND (:task IS NULL OR task = :task) AND (:queue IS NULL OR queue = :queue)
FROM rota_runs INDEXED BY rota_runs_finished
WHERE finished_at >= :lo AND finished_at < :hi
ORDER BY finished_at LIMIT :cap

-- name: web_backlog
-- Pending runs by queue, due now and later: the first :cap in due_at order (rota_runs_due).
SELECT queue, coalesce(sum(due_at <= {now}), 0), coalesce(sum(due_at > {now}), 0), count(*)
FROM (SELECT queue, due_at FROM rota_runs INDEXED BY rota_runs_due
      WHERE status = 'pending' AND NOT held ORDER BY due_at LIMIT :cap)
GROUP BY queue ORDER BY queue

-- name: web_queue_running
SELECT queue, count(*) FROM rota_runs WHERE status = 'running' GROUP BY queue ORDER BY queue
