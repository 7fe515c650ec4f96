-- Named queries of the MySQL store: inspection and control of runs, workers, named locks,
-- dashboard sign-outs, retention, paused queues and declared tasks, and the write probe.

-- name: run_columns
SELECT id, task, status, queue, priority, args, kwargs, `key`, schedule, scheduled_for, due_at,
       attempt, max_attempts, timeout, owner, token, lease_until, cancel_requested, created_at,
       started_at, finished_at, result, error, attempts, retry_of, held, waiting_on, backfill
FROM rota_runs

-- name: count_by_status
SELECT status, count(*) FROM rota_runs GROUP BY status

-- name: run_counts
-- Counted through rota_runs_status (no counter rows: every enqueue and finish would queue on them).
SELECT status, count(*) FROM rota_runs GROUP BY status

-- name: count_status
SELECT count(*) FROM rota_runs WHERE status = %(status)s

-- name: cancel_pending
-- transition: cancel
SELECT id FROM rota_runs WHERE id = %(id)s AND status = 'pending' FOR UPDATE
;
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = %(error)s WHERE id IN %(_ids)s
;
SELECT status FROM rota_runs WHERE id IN %(_ids)s

-- name: request_cancel
-- transition: cancel
SELECT id FROM rota_runs WHERE id = %(id)s AND status = 'running' FOR UPDATE
;
UPDATE rota_runs SET cancel_requested = 1 WHERE id IN %(_ids)s
;
SELECT id, owner FROM rota_runs WHERE id IN %(_ids)s

-- name: cancel_requests
SELECT id FROM rota_runs WHERE status = 'running' AND cancel_requested <> 0 AND owner = %(owner)s

-- name: run_status
SELECT status FROM rota_runs WHERE id = %(id)s

-- name: retry_source
SELECT `key`, backoff FROM rota_runs WHERE id = %(id)s

-- name: prune
-- transition: prune
-- Oldest finish first (rota_runs_finished), from the last finish time the pass deleted
-- (%(after)s, epoch seconds); finish times back as epoch seconds.
SELECT id, UNIX_TIMESTAMP(finished_at) FROM rota_runs FORCE INDEX (rota_runs_finished)
WHERE finished_at < {now} - INTERVAL %(older_than)s SECOND
  AND finished_at >= FROM_UNIXTIME(GREATEST(%(after)s, 0)) AND finished_status = %(status)s
ORDER BY finished_at LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
;
DELETE FROM rota_runs WHERE id IN %(_ids)s

-- name: deps_orphaned
-- transition: orphaned
-- Runs waiting on parents none of which is pending or running any more, each ended failed
-- as damaged (rota/quarantine.py); their dependents are cancelled by the store (settle).
SELECT w.id FROM rota_runs w
WHERE w.held <> 0 AND w.status = 'pending' AND w.pending_held > 0 AND w.waiting_on > 0
  AND NOT EXISTS (SELECT 1 FROM rota_deps d JOIN rota_runs p ON p.id = d.parent
                  WHERE d.child = w.id AND p.status IN ('pending', 'running'))
ORDER BY w.id LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
;
UPDATE rota_runs SET status = 'failed', held = 0, waiting_on = 0, finished_at = {now}, error = %(error)s
WHERE id IN %(_ids)s
;
SELECT id, task FROM rota_runs WHERE id IN %(_ids)s

-- name: web_run_waiting
-- (run_rows appends WHERE id = ...)
SELECT waiting_on FROM rota_runs

-- name: register_worker
-- The row and the worker's own lease in one statement: a crash or a cut connection never
-- leaves a live worker's row without its lease (judged by the viewer's lease instead).
INSERT INTO rota_workers (id, host, pid, concurrency, queues, state, started_at, last_seen, lease)
VALUES (%(id)s, %(host)s, %(pid)s, %(concurrency)s, %(queues)s, 'running', {now}, {now}, %(lease)s)
ON DUPLICATE KEY UPDATE state = 'running', last_seen = {now}, lease = VALUES(lease)

-- name: register_worker_before_20
-- The same on a schema before version 20 (an upgrade under way: no lease column yet).
INSERT INTO rota_workers (id, host, pid, concurrency, queues, state, started_at, last_seen)
VALUES (%(id)s, %(host)s, %(pid)s, %(concurrency)s, %(queues)s, 'running', {now}, {now})
ON DUPLICATE KEY UPDATE state = 'running', last_seen = {now}

-- name: worker_seen
UPDATE rota_workers SET last_seen = {now}, state = %(state)s WHERE id = %(id)s

-- name: worker_seen_stuck
UPDATE rota_workers SET last_seen = {now}, state = %(state)s, stuck = %(stuck)s WHERE id = %(id)s

-- name: workers_stuck
SELECT id, stuck FROM rota_workers

-- name: database_started
SELECT UTC_TIMESTAMP(6) - INTERVAL VARIABLE_VALUE SECOND FROM information_schema.global_status
WHERE VARIABLE_NAME = 'UPTIME'

-- name: list_workers
-- A worker whose heartbeat is older than its own lease reads lost (see SQLite's).
SELECT id, host, pid, concurrency, queues,
       CASE WHEN state NOT IN ('stopped', 'lost') AND last_seen < {now} - INTERVAL stale SECOND
            THEN 'lost' ELSE state END,
       started_at, last_seen,
       last_seen >= {now} - INTERVAL stale SECOND AND state NOT IN ('stopped', 'lost'),
       lease
FROM (SELECT w.*, CASE WHEN lease > 0 AND lease <= 31536000 THEN lease ELSE %(stale_after)s END AS stale
      FROM rota_workers w) AS w
WHERE last_seen >= {now} - INTERVAL (stale * 10) SECOND OR state NOT IN ('stopped', 'lost')
ORDER BY started_at

-- name: mark_lost_workers
SELECT id FROM rota_workers
WHERE state NOT IN ('stopped', 'lost')
  AND last_seen < {now} - INTERVAL GREATEST(%(lost_after)s,
                                            CASE WHEN lease > 0 AND lease <= 31536000 THEN lease * 3 ELSE 0 END) SECOND
FOR UPDATE
;
UPDATE rota_workers SET state = 'lost' WHERE id IN %(_ids)s

-- name: prune_workers
SELECT id FROM rota_workers
WHERE state IN ('stopped', 'lost') AND last_seen < {now} - INTERVAL %(older_than)s SECOND
FOR UPDATE
;
DELETE FROM rota_workers WHERE id IN %(_ids)s

-- name: lock_acquire
-- Free, or expired: taken with the next token (the row locked first: one taker wins).
INSERT INTO rota_locks (name, owner, token, acquired_at, expires_at)
VALUES (%(name)s, NULL, 0, NULL, NULL)
ON DUPLICATE KEY UPDATE name = name
;
SELECT name FROM rota_locks
WHERE name = %(name)s AND (owner IS NULL OR expires_at IS NULL OR expires_at <= {now})
FOR UPDATE
;
UPDATE rota_locks SET owner = %(owner)s, token = token + 1, acquired_at = {now},
    expires_at = {now} + INTERVAL %(ttl)s SECOND
WHERE name IN %(_ids)s
;
SELECT token FROM rota_locks WHERE name IN %(_ids)s

-- name: lock_renew
SELECT name FROM rota_locks
WHERE name = %(name)s AND owner = %(owner)s AND token = %(token)s AND expires_at > {now}
FOR UPDATE
;
UPDATE rota_locks SET expires_at = {now} + INTERVAL %(ttl)s SECOND WHERE name IN %(_ids)s
;
SELECT token FROM rota_locks WHERE name IN %(_ids)s

-- name: lock_release
SELECT name FROM rota_locks WHERE name = %(name)s AND owner = %(owner)s AND token = %(token)s FOR UPDATE
;
UPDATE rota_locks SET owner = NULL, expires_at = NULL WHERE name IN %(_ids)s
;
SELECT token FROM rota_locks WHERE name IN %(_ids)s

-- name: list_locks
-- (token 0: lock_acquire's placeholder, never taken; a negative token is a damaged row and
-- is listed as one, as on the other stores)
SELECT name, owner, token, acquired_at, expires_at,
       owner IS NOT NULL AND expires_at > {now}
FROM rota_locks WHERE token <> 0 ORDER BY name

-- Dashboard sign-outs (rota.web.sessions); times are the dashboard's Unix seconds (at).
-- name: signout_add
INSERT IGNORE INTO rota_dashboard_signouts (nonce, expires_at) VALUES (%(nonce)s, %(expires_at)s)

-- name: signout_prune
DELETE FROM rota_dashboard_signouts WHERE expires_at <= %(at)s

-- name: signed_out
SELECT 1 FROM rota_dashboard_signouts WHERE nonce = %(nonce)s AND expires_at > %(at)s

-- name: queue_pause
INSERT IGNORE INTO rota_queue_pauses (queue, paused_at, paused_by) VALUES (%(queue)s, {now}, %(by)s)

-- name: queue_resume
DELETE FROM rota_queue_pauses WHERE queue = %(queue)s

-- name: queue_pauses
SELECT queue, paused_at, paused_by FROM rota_queue_pauses ORDER BY queue

-- name: queue_counts
SELECT queue, sum(CASE WHEN status = 'pending' THEN 1 ELSE 0 END),
       sum(CASE WHEN status = 'running' THEN 1 ELSE 0 END)
FROM rota_runs WHERE status IN ('pending', 'running') GROUP BY queue

-- name: tasks_declare
INSERT INTO rota_tasks (task, declared_at) VALUES (%(task)s, {now})
ON DUPLICATE KEY UPDATE declared_at = VALUES(declared_at)

-- name: tasks_declared
SELECT task FROM rota_tasks ORDER BY task

-- name: probe_privileges
-- The write probe below finds what this user may not do (no rows here: MySQL's grants
-- through roles, wildcards and partial revokes are the server's to judge).
SELECT NULL, NULL, NULL, NULL FROM DUAL WHERE 0

-- name: probe_can_migrate
SELECT 1, CURRENT_USER(), DATABASE()

-- name: migrations_table
SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'rota_migrations'

-- name: probe_insert_run
-- transition: none (a write probe on row -1, rolled back)
INSERT INTO rota_runs (id, task, scheduled_for, due_at, created_at) VALUES (-1, %(probe)s, {now}, {now}, {now})

-- name: probe_update_run
-- transition: none (a write probe on row -1, rolled back)
UPDATE rota_runs SET status = 'cancelled' WHERE id = -1

-- name: probe_delete_run
-- transition: none (a write probe on row -1, rolled back)
DELETE FROM rota_runs WHERE id = -1

-- name: probe_insert_schedule
INSERT INTO rota_schedules (name, task, every, definition, created_at, updated_at)
VALUES (%(probe)s, %(probe)s, 60, '', {now}, {now})

-- name: probe_update_schedule
UPDATE rota_schedules SET paused = 1 WHERE name = %(probe)s

-- name: probe_delete_schedule
DELETE FROM rota_schedules WHERE name = %(probe)s

-- name: probe_insert_worker
INSERT INTO rota_workers (id, host, pid, concurrency, started_at, last_seen) VALUES (%(probe)s, '', 0, 1, {now}, {now})

-- name: probe_update_worker
UPDATE rota_workers SET state = 'stopped' WHERE id = %(probe)s

-- name: probe_delete_worker
DELETE FROM rota_workers WHERE id = %(probe)s

-- name: probe_insert_lock
INSERT INTO rota_locks (name, token) VALUES (%(probe)s, 1)

-- name: probe_update_lock
UPDATE rota_locks SET token = 2 WHERE name = %(probe)s

-- name: probe_delete_lock
DELETE FROM rota_locks WHERE name = %(probe)s

-- name: probe_sequences
UPDATE rota_counters SET value = value WHERE name = 'token'
