-- Named queries of the MySQL store, by role (this file: enqueue). Every backend defines the
-- same names (tests/test_queries.py checks). `{now}` is the store's clock: the configured
-- clock if any, else UTC_TIMESTAMP(6). Parameters are PyMySQL's %(name)s (a literal % is %%).
-- Lists travel as one JSON array parameter, read with JSON_TABLE. A query of several steps
-- (separated by a line holding only `;`) emulates UPDATE ... RETURNING: see session.Session.
-- `key` is a reserved word: always quoted.

-- name: insert_run
-- transition: enqueue, make_ahead, tick, trigger, retry
-- (a duplicate key, tick or exclusive slot: no row, as ON CONFLICT DO NOTHING; ROW_COUNT() is
-- 1 for an insert and 0 for a duplicate left as it was)
INSERT INTO rota_runs (id, task, queue, priority, status, args, kwargs, `key`, schedule, tick,
                       exclusive, held, scheduled_for, due_at, max_attempts, timeout, backoff,
                       error, finished_at, retry_of, created_at)
VALUES (%(id)s, %(task)s, %(queue)s, %(priority)s, %(status)s, %(args)s, %(kwargs)s, %(key)s,
        %(schedule)s, %(tick)s, %(exclusive)s, %(held)s,
        coalesce(%(scheduled_for)s, {now} + INTERVAL %(delay)s SECOND),
        coalesce(%(due_at)s, %(scheduled_for)s, {now} + INTERVAL %(delay)s SECOND),
        %(max_attempts)s, %(timeout)s, %(backoff)s, %(error)s,
        CASE WHEN %(status)s = 'skipped' THEN {now} END, %(retry_of)s, {now})
ON DUPLICATE KEY UPDATE id = id
;
SELECT coalesce(%(id)s, LAST_INSERT_ID()) FROM DUAL WHERE ROW_COUNT() = 1

-- name: insert_run_gated
-- transition: enqueue
-- as insert_run, for a run with a limit or a rate (rota.Limit, rota.Rate)
INSERT INTO rota_runs (id, task, queue, priority, status, args, kwargs, `key`, schedule, tick,
                       exclusive, held, scheduled_for, due_at, max_attempts, timeout, backoff,
                       error, finished_at, retry_of, created_at, limit_name, limit_key, rate_name, rate_key)
VALUES (%(id)s, %(task)s, %(queue)s, %(priority)s, %(status)s, %(args)s, %(kwargs)s, %(key)s,
        %(schedule)s, %(tick)s, %(exclusive)s, %(held)s,
        coalesce(%(scheduled_for)s, {now} + INTERVAL %(delay)s SECOND),
        coalesce(%(due_at)s, %(scheduled_for)s, {now} + INTERVAL %(delay)s SECOND),
        %(max_attempts)s, %(timeout)s, %(backoff)s, %(error)s,
        CASE WHEN %(status)s = 'skipped' THEN {now} END, %(retry_of)s, {now},
        %(limit_name)s, %(limit_key)s, %(rate_name)s, %(rate_key)s)
ON DUPLICATE KEY UPDATE id = id
;
SELECT coalesce(%(id)s, LAST_INSERT_ID()) FROM DUAL WHERE ROW_COUNT() = 1

-- name: insert_runs_bulk
-- transition: enqueue
-- the store repeats the VALUES row once per run (a multi-row INSERT: consecutive ids)
INSERT INTO rota_runs (task, queue, priority, args, kwargs, scheduled_for, due_at,
                       max_attempts, timeout, backoff, created_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)

-- name: insert_runs_bulk_gated
-- transition: enqueue
-- as insert_runs_bulk, for a batch where some runs have a limit or a rate
INSERT INTO rota_runs (task, queue, priority, args, kwargs, scheduled_for, due_at,
                       max_attempts, timeout, backoff, created_at, limit_name, limit_key, rate_name, rate_key)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)

-- name: next_run_ids
SELECT coalesce(max(id), 0) FROM rota_runs

-- name: last_run_id
SELECT coalesce(max(id), 0) FROM rota_runs

-- name: store_identity
-- Which database a caller's connection is on (enqueue in the caller's transaction checks it).
SELECT DATABASE(),
       (SELECT count(*) FROM information_schema.tables
        WHERE table_schema = DATABASE() AND table_name = 'rota_runs'),
       @@hostname

-- name: find_keyed
SELECT id FROM rota_runs
WHERE task = %(task)s AND `key` = %(key)s AND status IN ('pending', 'running')

-- name: notify
-- (no NOTIFY: this process's workers are told at commit; other processes' see data_version)
SELECT %(channel)s, %(payload)s

-- name: notify_channel
SELECT 'rota'

-- name: notify_due
SELECT %(channel)s, %(at)s, %(delay)s

-- name: data_version
-- What other processes' idle workers look at every 100 ms instead of hearing a NOTIFY (and at
-- change_probe in between):
-- changes when a run is enqueued (the newest id), claimed (the token counter) or a
-- cancellation is requested (the running runs asked to cancel), or a run becomes due (the
-- due runs, counted up to 100: a count of a whole backlog at every look cost the server
-- 4 ms a look with 10,000 due, a third of its CPU in a drain; past 100 due, the workers
-- are claiming anyway), or the next tick of the schedules moves (a withdrawn run made ahead
-- rewinds it, a pause, resume or update from another process: told by NOTIFY on PostgreSQL).
SELECT (SELECT coalesce(max(id), 0) FROM rota_runs),
       (SELECT min(next_run_at) FROM rota_schedules WHERE active = 1 AND paused = 0),
       (SELECT value FROM rota_counters WHERE name = 'token'),
       (SELECT count(*) FROM rota_runs WHERE status = 'running' AND cancel_requested <> 0),
       (SELECT count(*) FROM (SELECT 1 FROM rota_runs WHERE status = 'pending' AND held = 0 AND pending_held = 0 AND due_at <= {now}
                              LIMIT 100) AS due)

-- name: change_probe
-- The quick look an idle worker in another process takes every 10-20 ms (data_version, the
-- whole probe, every 100 ms): the newest run id (a run enqueued or a tick made) and the
-- token counter (a claim, and what its transaction finished), two primary-key reads (the
-- max of the clustered index is its last entry). About 30 us of server CPU a look against
-- data_version's 160 us.
SELECT (SELECT coalesce(max(id), 0) FROM rota_runs),
       (SELECT value FROM rota_counters WHERE name = 'token')

-- name: set_traceparent
-- transition: enqueue
-- (part of the enqueue, in its transaction: the trace context the run was enqueued in, rota.tracing)
UPDATE rota_runs SET traceparent = %(traceparent)s WHERE id = %(id)s

-- name: run_traceparent
SELECT traceparent FROM rota_runs WHERE id = %(id)s

-- name: unique_take
-- (rota_unique only: changes no run)
-- As in PostgreSQL (a record made more than a day after now is damaged, the key free
-- again); the record's row is locked first, so concurrent enqueues of one key queue on it.
INSERT INTO rota_unique (task, `key`, run_id, created_at) VALUES (%(task)s, %(key)s, NULL, {now})
ON DUPLICATE KEY UPDATE task = task
;
SELECT u.run_id FROM rota_unique u
WHERE u.task = %(task)s AND u.`key` = %(key)s FOR UPDATE
;
UPDATE rota_unique u
SET u.run_id = CASE WHEN u.created_at > {now} - INTERVAL %(window)s SECOND AND u.created_at <= {now} + INTERVAL 1 DAY
                         AND EXISTS (SELECT 1 FROM rota_runs r WHERE r.id = u.run_id AND r.status <> 'cancelled')
                    THEN u.run_id END,
    u.created_at = CASE WHEN u.created_at > {now} - INTERVAL %(window)s SECOND AND u.created_at <= {now} + INTERVAL 1 DAY
                             AND EXISTS (SELECT 1 FROM rota_runs r WHERE r.id = u.run_id AND r.status <> 'cancelled')
                        THEN u.created_at ELSE {now} END
WHERE u.task = %(task)s AND u.`key` = %(key)s
;
SELECT run_id FROM rota_unique WHERE task = %(task)s AND `key` = %(key)s

-- name: unique_put
-- (rota_unique only: changes no run)
INSERT INTO rota_unique (task, `key`, run_id, created_at)
VALUES (%(task)s, %(key)s, %(id)s,
        CASE WHEN %(twin)s THEN (SELECT created_at FROM rota_runs WHERE id = %(id)s) ELSE {now} END)
ON DUPLICATE KEY UPDATE run_id = VALUES(run_id), created_at = VALUES(created_at)

-- name: lock_parents
-- transition: enqueue
-- (of the dependent: no parent's status changes; sets has_dependents on the parents)
SELECT id FROM rota_runs
WHERE id IN {{ids(%(ids)s)}}
ORDER BY id FOR UPDATE
;
UPDATE rota_runs SET has_dependents = 1 WHERE id IN %(_ids)s
;
SELECT id, status, task, after_depth FROM rota_runs WHERE id IN %(_ids)s

-- name: add_deps
INSERT IGNORE INTO rota_deps (parent, child)
SELECT j.v, %(child)s FROM JSON_TABLE(%(ids)s, '$[*]' COLUMNS (v BIGINT PATH '$')) AS j

-- name: depend_run
-- transition: enqueue
UPDATE rota_runs SET waiting_on = %(waiting)s, after_depth = %(depth)s,
    finished_at = CASE WHEN status = 'cancelled' THEN {now} ELSE finished_at END
WHERE id = %(id)s

-- name: run_parents
SELECT parent FROM rota_deps WHERE child = %(id)s ORDER BY parent

-- name: run_dependents
SELECT child FROM rota_deps WHERE parent = %(id)s ORDER BY child

-- name: parent_results
SELECT r.id, r.result FROM rota_deps d JOIN rota_runs r ON r.id = d.parent
WHERE d.child = %(id)s ORDER BY r.id

-- name: retry_lock
-- Retries are made one transaction at a time (retry_many's batches and App.retry): the
-- token counter's row is their lock (a claim takes it for a moment too).
SELECT value FROM rota_counters WHERE name = 'token' FOR UPDATE

-- name: retry_candidates
-- App.retry_many: the next batch of matching final runs after the cursor (see SQLite's).
SELECT r.id, s.name IS NOT NULL
FROM rota_runs r
LEFT JOIN rota_schedules s ON s.name = r.schedule AND s.active AND s.overlap <> 'concurrent'
WHERE r.status = %(status)s AND r.id > %(after)s AND r.id <= %(upto)s
  AND (%(task)s IS NULL OR r.task = %(task)s)
  AND (%(since)s IS NULL OR r.finished_at >= %(since)s)
  AND coalesce(CASE WHEN JSON_VALID(r.error) THEN JSON_VALUE(r.error, '$.type') END, '')
      NOT IN ('DamagedRow', 'CorruptArguments')
  AND NOT EXISTS (SELECT 1 FROM rota_runs x WHERE x.retry_of = r.id)
ORDER BY r.id
LIMIT %(limit)s

-- name: retried_before
SELECT 1 FROM rota_runs WHERE retry_of = %(id)s LIMIT 1

-- name: retry_insert
-- transition: retry
-- (one INSERT ... SELECT; the new rows are those whose retry_of is in :ids, made just now)
INSERT IGNORE INTO rota_runs (task, queue, priority, args, kwargs, `key`, schedule, scheduled_for, due_at,
                              max_attempts, timeout, backoff, retry_of, created_at)
SELECT task, queue, priority, args, kwargs, `key`, schedule, {now}, {now},
       max_attempts, timeout, backoff, id, {now}
FROM rota_runs
WHERE id IN {{ids(%(ids)s)}}
ORDER BY id
;
SELECT n.id, n.task, n.args, n.kwargs FROM rota_runs n
WHERE n.retry_of IN {{ids(%(ids)s)}}
  AND n.id >= LAST_INSERT_ID() AND n.status = 'pending' AND n.attempt = 0
ORDER BY n.id

-- name: backfill_insert
-- transition: backfill
-- As insert_run, marked backfill (a run App.backfill makes for a past tick).
INSERT INTO rota_runs (id, task, queue, priority, status, args, kwargs, `key`, schedule, tick,
                       exclusive, held, scheduled_for, due_at, max_attempts, timeout, backoff,
                       error, finished_at, retry_of, created_at, backfill,
                       limit_name, limit_key, rate_name, rate_key)
VALUES (%(id)s, %(task)s, %(queue)s, %(priority)s, %(status)s, %(args)s, %(kwargs)s, %(key)s,
        %(schedule)s, %(tick)s, %(exclusive)s, %(held)s,
        coalesce(%(scheduled_for)s, {now} + INTERVAL %(delay)s SECOND),
        coalesce(%(due_at)s, %(scheduled_for)s, {now} + INTERVAL %(delay)s SECOND),
        %(max_attempts)s, %(timeout)s, %(backoff)s, %(error)s,
        CASE WHEN %(status)s = 'skipped' THEN {now} END, %(retry_of)s, {now}, %(backfill)s,
        %(limit_name)s, %(limit_key)s, %(rate_name)s, %(rate_key)s)
ON DUPLICATE KEY UPDATE id = id
;
SELECT coalesce(%(id)s, LAST_INSERT_ID()) FROM DUAL WHERE ROW_COUNT() = 1
