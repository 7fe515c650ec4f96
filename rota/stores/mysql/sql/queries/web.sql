-- Named queries of the MySQL store: the dashboard's reads (rota.web). Times as epoch seconds
-- (UNIX_TIMESTAMP in the session's UTC) and JSON as text: rota.web decodes them and shows a
-- value it cannot decode as corrupt instead of failing. The store appends the
-- WHERE/ORDER/LIMIT of a RunFilter or of one id.

-- name: web_run_summaries
SELECT id, task, status, queue, priority, `key`, schedule, {{epoch(scheduled_for)}}, attempt, max_attempts,
       owner, token, {{epoch(lease_until)}}, cancel_requested, {{epoch(created_at)}},
       {{epoch(started_at)}}, {{epoch(finished_at)}}, retry_of,
       substr(args, 1, %(preview)s), char_length(args), substr(kwargs, 1, %(preview)s), char_length(kwargs),
       substr(result, 1, %(preview)s), char_length(result), substr(error, 1, %(error_prefix)s), char_length(error),
       backfill, waiting_on
FROM rota_runs

-- name: web_run_detail
SELECT id, task, status, queue, priority, `key`, schedule, {{epoch(scheduled_for)}}, attempt, max_attempts,
       owner, token, {{epoch(lease_until)}}, cancel_requested, {{epoch(created_at)}},
       {{epoch(started_at)}}, {{epoch(finished_at)}}, retry_of,
       args, kwargs, result, error, attempts, backfill, {{epoch(due_at)}}
FROM rota_runs

-- name: web_timeline
SELECT id, task, schedule, status, attempt, {{epoch(scheduled_for)}}, {{epoch(started_at)}},
       {{epoch(finished_at)}}, owner
FROM rota_runs

-- name: web_throughput
SELECT count(*), UNIX_TIMESTAMP(max(finished_at)), count(*),
       coalesce(sum(status = 'succeeded'), 0), coalesce(sum(status = 'failed'), 0),
       coalesce(sum(status = 'skipped'), 0), coalesce(sum(status = 'cancelled'), 0),
       coalesce(sum(GREATEST(attempt - 1, 0)), 0)
FROM (SELECT finished_at, finished_status AS status, finished_attempt AS attempt
      FROM rota_runs FORCE INDEX (rota_runs_finished)
      WHERE finished_at >= FROM_UNIXTIME(%(lo)s) AND finished_at < FROM_UNIXTIME(%(hi)s)
      ORDER BY finished_at LIMIT %(cap)s) AS w

-- name: web_throughput_where
SELECT count(*), UNIX_TIMESTAMP(max(finished_at)), coalesce(sum(hit), 0),
       coalesce(sum(hit AND status = 'succeeded'), 0), coalesce(sum(hit AND status = 'failed'), 0),
       coalesce(sum(hit AND status = 'skipped'), 0), coalesce(sum(hit AND status = 'cancelled'), 0),
       coalesce(sum(CASE WHEN hit THEN GREATEST(attempt - 1, 0) ELSE 0 END), 0)
FROM (SELECT finished_at, status, attempt,
             (%(task)s IS NULL OR task = %(task)s) AND (%(queue)s IS NULL OR queue = %(queue)s) AS hit
      FROM rota_runs FORCE INDEX (rota_runs_finished)
      WHERE finished_at >= FROM_UNIXTIME(%(lo)s) AND finished_at < FROM_UNIXTIME(%(hi)s)
      ORDER BY finished_at LIMIT %(cap)s) AS w

-- name: web_lateness
SELECT attempt, TIMESTAMPDIFF(MICROSECOND, scheduled_for, started_at) / 1e6,
       TIMESTAMPDIFF(MICROSECOND, GREATEST(created_at, due_at), started_at) / 1e6,
       started_at IS NOT NULL AND (%(task)s IS NULL OR task = %(task)s) AND (%(queue)s IS NULL OR queue = %(queue)s)
FROM rota_runs FORCE INDEX (rota_runs_finished)
WHERE finished_at >= FROM_UNIXTIME(%(lo)s) AND finished_at < FROM_UNIXTIME(%(hi)s)
ORDER BY finished_at LIMIT %(cap)s

-- name: web_backlog
SELECT queue, coalesce(sum(due_at <= {now}), 0), coalesce(sum(due_at > {now}), 0), count(*)
FROM (SELECT queue, due_at FROM rota_runs
      WHERE status = 'pending' AND held = 0 AND pending_held = 0 ORDER BY due_at LIMIT %(cap)s) AS w
GROUP BY queue ORDER BY queue

-- name: web_queue_running
SELECT queue, count(*) FROM rota_runs WHERE status = 'running' GROUP BY queue ORDER BY queue
