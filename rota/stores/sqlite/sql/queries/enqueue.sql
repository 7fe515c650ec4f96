-- SQLite queries: new runs: inserts, keys and uniqueness windows, wake-ups (NOTIFY), trace context.
-- Named queries of the SQLite store. Every backend defines the same names (a test checks).
-- `{now}` is the store's clock (Unix epoch seconds), always passed by the store.
-- Lists travel as one JSON array parameter, read with json_each (never SQL built from values).

-- name: insert_run
-- transition: enqueue, make_ahead, tick, trigger, retry
INSERT INTO rota_runs (id, task, queue, priority, status, args, kwargs, key, schedule, tick,
                       exclusive, held, scheduled_for, due_at, max_attempts, timeout, backoff,
                       error, finished_at, retry_of, created_at)
VALUES (:id, :task, :queue, :priority, :status, :args, :kwargs, :key, :schedule, :tick,
        :exclusive, :held, coalesce(:scheduled_for, {now} + :delay),
        coalesce(:due_at, :scheduled_for, {now} + :delay),
        :max_attempts, :timeout, :backoff, :error,
        CASE WHEN :status = 'skipped' THEN {now} END, :retry_of, {now})
ON CONFLICT DO NOTHING
RETURNING id

-- name: insert_run_gated
-- transition: enqueue
-- as insert_run, for a run with a limit or a rate (rota.Limit, rota.Rate)
INSERT INTO rota_runs (id, task, queue, priority, status, args, kwargs, key, schedule, tick,
                       exclusive, held, scheduled_for, due_at, max_attempts, timeout, backoff,
                       error, finished_at, retry_of, created_at, limit_name, limit_key, rate_name, rate_key)
VALUES (:id, :task, :queue, :priority, :status, :args, :kwargs, :key, :schedule, :tick,
        :exclusive, :held, coalesce(:scheduled_for, {now} + :delay),
        coalesce(:due_at, :scheduled_for, {now} + :delay),
        :max_attempts, :timeout, :backoff, :error,
        CASE WHEN :status = 'skipped' THEN {now} END, :retry_of, {now},
        :limit_name, :limit_key, :rate_name, :rate_key)
ON CONFLICT DO NOTHING
RETURNING id

-- name: insert_runs_bulk
-- transition: enqueue
INSERT INTO rota_runs (id, task, queue, priority, args, kwargs, scheduled_for, due_at,
                       max_attempts, timeout, backoff, created_at)
VALUES (:id, :task, :queue, :priority, :args, :kwargs, coalesce(:scheduled_for, {now} + :delay),
        coalesce(:scheduled_for, {now} + :delay), :max_attempts, :timeout, :backoff, {now})

-- name: insert_runs_bulk_gated
-- transition: enqueue
-- as insert_runs_bulk, for a batch where some runs have a limit or a rate
INSERT INTO rota_runs (id, task, queue, priority, args, kwargs, scheduled_for, due_at,
                       max_attempts, timeout, backoff, created_at, limit_name, limit_key, rate_name, rate_key)
VALUES (:id, :task, :queue, :priority, :args, :kwargs, coalesce(:scheduled_for, {now} + :delay),
        coalesce(:scheduled_for, {now} + :delay), :max_attempts, :timeout, :backoff, {now},
        :limit_name, :limit_key, :rate_name, :rate_key)

-- name: next_run_ids
SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'rota_runs'), 0)

-- name: store_identity
-- Which database a caller's connection is on (enqueue in the caller's transaction checks it).
SELECT (SELECT file FROM pragma_database_list WHERE name = 'main'),
       (SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'rota_runs'),
       NULL

-- name: find_keyed
SELECT id FROM rota_runs
WHERE task = :task AND key = :key AND status IN ('pending', 'running')

-- name: notify
SELECT :channel, :payload

-- name: notify_channel
-- (no LISTEN/NOTIFY on SQLite: wake-ups are in-process and the data_version watch)
SELECT 'rota'

-- name: notify_due
SELECT :channel, :at, :delay

-- ===== end of issue 10, worker side =====================================================

-- ===== issue 20: uniqueness windows and runs after others (branch flow-deps, 0008) =======
-- name: unique_take
-- (rota_unique only: changes no run)
-- As in PostgreSQL (see there: a record made more than a day after now is damaged, the key
-- free again); SQLite's write lock makes it atomic.
INSERT INTO rota_unique AS u (task, key, run_id, created_at)
VALUES (:task, :key, NULL, {now})
ON CONFLICT (task, key) DO UPDATE SET
    run_id = CASE WHEN u.created_at > excluded.created_at - :window AND u.created_at <= excluded.created_at + 86400
                       AND EXISTS (SELECT 1 FROM rota_runs r WHERE r.id = u.run_id AND r.status <> 'cancelled')
                  THEN u.run_id END,
    created_at = CASE WHEN u.created_at > excluded.created_at - :window AND u.created_at <= excluded.created_at + 86400
                           AND EXISTS (SELECT 1 FROM rota_runs r WHERE r.id = u.run_id AND r.status <> 'cancelled')
                      THEN u.created_at ELSE excluded.created_at END
RETURNING run_id

-- name: unique_put
-- (rota_unique only: changes no run)
INSERT INTO rota_unique AS u (task, key, run_id, created_at)
VALUES (:task, :key, :id, CASE WHEN :twin THEN (SELECT created_at FROM rota_runs WHERE id = :id) ELSE {now} END)
ON CONFLICT (task, key) DO UPDATE SET run_id = excluded.run_id, created_at = excluded.created_at

-- name: set_traceparent
-- transition: enqueue
-- (part of the enqueue, in its transaction: the trace context the run was enqueued in, rota.tracing)
UPDATE rota_runs SET traceparent = :traceparent WHERE id = :id

-- name: run_traceparent
-- The trace context stored at enqueue.
SELECT traceparent FROM rota_runs WHERE id = :id
