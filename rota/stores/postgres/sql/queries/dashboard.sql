-- PostgreSQL queries: the dashboard's reads (rota.web) and its sign-outs.
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- Dashboard sign-outs (rota.web.sessions); times are the dashboard's Unix seconds (:at).
-- name: signout_add
INSERT INTO rota_dashboard_signouts (nonce, expires_at) VALUES (%(nonce)s, %(expires_at)s)
ON CONFLICT (nonce) DO NOTHING

-- name: signout_prune
DELETE FROM rota_dashboard_signouts WHERE expires_at <= %(at)s

-- name: signed_out
SELECT 1 FROM rota_dashboard_signouts WHERE nonce = %(nonce)s AND expires_at > %(at)s

-- >>> dashboard reads (rota.web) ------------------------------------------------------
-- Times as epoch seconds and JSON as text: rota.web decodes them and shows a value it
-- cannot decode (a date past year 9999, corrupt JSON) as corrupt instead of failing.
-- The store appends the WHERE/ORDER/LIMIT of a RunFilter or of one id.
-- name: web_run_summaries
SELECT id, task, status, queue, priority, key, schedule, extract(epoch FROM scheduled_for)::float8,
       attempt, max_attempts, owner, token, extract(epoch FROM lease_until)::float8, cancel_requested,
       extract(epoch FROM created_at)::float8, extract(epoch FROM started_at)::float8,
       extract(epoch FROM finished_at)::float8, retry_of,
       substr(args, 1, %(preview)s), length(args), substr(kwargs, 1, %(preview)s), length(kwargs),
       substr(result, 1, %(preview)s), length(result), substr(error, 1, %(error_prefix)s), length(error),
       backfill, waiting_on
FROM rota_runs_all

-- name: web_run_detail
SELECT id, task, status, queue, priority, key, schedule, extract(epoch FROM scheduled_for)::float8,
       attempt, max_attempts, owner, token, extract(epoch FROM lease_until)::float8, cancel_requested,
       extract(epoch FROM created_at)::float8, extract(epoch FROM started_at)::float8,
       extract(epoch FROM finished_at)::float8, retry_of,
       args, kwargs, result, error, attempts::text, backfill, extract(epoch FROM due_at)::float8
FROM rota_runs_all

-- name: web_timeline
SELECT id, task, schedule, status, attempt, extract(epoch FROM scheduled_for)::float8,
       extract(epoch FROM started_at)::float8, extract(epoch FROM finished_at)::float8, owner
FROM rota_runs_all

-- name: web_throughput
-- One bucket of a throughput chart (rota.web.charts): the first %(cap)s runs that finished
-- in [lo, hi), in finished_at order from rota_runs_finished (0007), which covers the columns
-- read (an index-only scan where the visibility map allows). The cap bounds the work; a
-- full bucket is scaled up.
SELECT count(*), extract(epoch FROM max(finished_at))::float8, count(*),
       count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'failed'),
       count(*) FILTER (WHERE status = 'skipped'), count(*) FILTER (WHERE status = 'cancelled'),
       coalesce(sum(greatest(attempt, 1) - 1), 0)
FROM (SELECT finished_at, status, attempt FROM rota_runs_all
      WHERE finished_at >= to_timestamp(%(lo)s) AND finished_at < to_timestamp(%(hi)s)
      ORDER BY finished_at LIMIT %(cap)s) AS w

-- name: web_throughput_where
-- web_throughput for one task and/or queue: the cap bounds the rows read (before the
-- filter), so a rare task costs no more than a common one; the third column counts matches.
SELECT count(*), extract(epoch FROM max(finished_at))::float8, count(*) FILTER (WHERE hit),
       count(*) FILTER (WHERE hit AND status = 'succeeded'), count(*) FILTER (WHERE hit AND status = 'failed'),
       count(*) FILTER (WHERE hit AND status = 'skipped'), count(*) FILTER (WHERE hit AND status = 'cancelled'),
       coalesce(sum(greatest(attempt, 1) - 1) FILTER (WHERE hit), 0)
FROM (SELECT finished_at, status, attempt,
             (%(task)s::text IS NULL OR task = %(task)s::text)
             AND (%(queue)s::text IS NULL OR queue = %(queue)s::text) AS hit
      FROM rota_runs_all
      WHERE finished_at >= to_timestamp(%(lo)s) AND finished_at < to_timestamp(%(hi)s)
      ORDER BY finished_at LIMIT %(cap)s) AS w

-- name: web_lateness
-- A sample of one bucket for the lateness chart, the first %(cap)s finishes in [lo, hi):
-- attempt, start - scheduled_for, the queue wait (start - when it was both due and
-- created), and whether it matches the task/queue filter (applied after the cap).
SELECT attempt, extract(epoch FROM started_at - scheduled_for)::float8,
       extract(epoch FROM started_at - greatest(created_at, due_at))::float8,
       started_at IS NOT NULL AND (%(task)s::text IS NULL OR task = %(task)s::text)
       AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
FROM rota_runs_all
WHERE finished_at >= to_timestamp(%(lo)s) AND finished_at < to_timestamp(%(hi)s)
ORDER BY finished_at LIMIT %(cap)s

-- name: web_backlog
-- Pending runs by queue, due now and later: the first %(cap)s in due_at order (rota_runs_due).
SELECT queue, count(*) FILTER (WHERE due_at <= {now}), count(*) FILTER (WHERE due_at > {now}), count(*)
FROM (SELECT queue, due_at FROM rota_runs
      WHERE status = 'pending' AND NOT held ORDER BY due_at LIMIT %(cap)s) AS b
GROUP BY queue ORDER BY queue

-- name: web_queue_running
SELECT queue, count(*) FROM rota_runs WHERE status = 'running' GROUP BY queue ORDER BY queue
