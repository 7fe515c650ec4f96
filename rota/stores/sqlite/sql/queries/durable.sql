-- SQLite queries: durable steps (issue 43): checkpoints, parked runs, signals, progress
-- (rota/stores/sqlstore/durable.py, rota/durable.py). Conventions: see the head of enqueue.sql.

-- name: steps_of
SELECT name, seq, attempt, started_at, finished_at, outcome, result, error
FROM rota_steps WHERE run_id = :id ORDER BY seq, name

-- name: save_step
-- (The step's attempt is the handler's: a held run's start may not be written yet, and
-- then the attempt it will count is one more than the row holds.)
-- As on PostgreSQL: only while (id, token) holds the run; a succeeded step is never overwritten.
INSERT INTO rota_steps (run_id, name, seq, attempt, started_at, finished_at, outcome, result, error)
SELECT r.id, :name, :seq, r.attempt + (r.started_at IS NULL), {now} - :took, {now}, :outcome, :result, :error
FROM rota_runs r WHERE r.id = :id AND r.token = :token AND r.status = 'running'
ON CONFLICT (run_id, name) DO UPDATE
SET seq = excluded.seq, attempt = excluded.attempt,
    started_at = CASE WHEN rota_steps.outcome = 'waiting' THEN rota_steps.started_at ELSE excluded.started_at END,
    finished_at = excluded.finished_at, outcome = excluded.outcome, result = excluded.result,
    error = excluded.error
WHERE rota_steps.outcome <> 'succeeded'
RETURNING run_id

-- name: save_steps
-- Checkpoints of several runs at once, as on PostgreSQL (one statement for the batch; the
-- rows back name the checkpoints written). :rows: a JSON array of
-- {id, token, name, seq, took, outcome, result, error}.
INSERT INTO rota_steps (run_id, name, seq, attempt, started_at, finished_at, outcome, result, error)
SELECT r.id, json_extract(v.value, '$.name'), json_extract(v.value, '$.seq'), r.attempt + (r.started_at IS NULL),
       {now} - json_extract(v.value, '$.took'), {now}, json_extract(v.value, '$.outcome'),
       json_extract(v.value, '$.result'), json_extract(v.value, '$.error')
FROM json_each(:rows) AS v  -- CROSS JOIN: the checkpoints first, each run by its id (not every running run)
CROSS JOIN rota_runs r ON r.id = json_extract(v.value, '$.id')
WHERE r.token = json_extract(v.value, '$.token') AND r.status = 'running'
ON CONFLICT (run_id, name) DO UPDATE
SET seq = excluded.seq, attempt = excluded.attempt,
    started_at = CASE WHEN rota_steps.outcome = 'waiting' THEN rota_steps.started_at ELSE excluded.started_at END,
    finished_at = excluded.finished_at, outcome = excluded.outcome, result = excluded.result,
    error = excluded.error
WHERE rota_steps.outcome <> 'succeeded'
RETURNING run_id, name

-- name: step_clock
SELECT {now}, EXISTS (SELECT 1 FROM rota_runs WHERE id = :id AND token = :token AND status = 'running')

-- name: park
-- transition: park
-- As on PostgreSQL, one run at a time (in the finish's write transaction).
UPDATE rota_runs
SET status = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'pending' END,
    attempt = CASE WHEN started_at IS NULL OR attempt = 0 THEN attempt ELSE attempt - 1 END,
    started_at = NULL, lease_until = NULL,
    due_at = {now} + max(:wake_in, 0),
    finished_at = CASE WHEN cancel_requested THEN {now} END,
    error = CASE WHEN cancel_requested
                 THEN json_object('type', 'Cancelled', 'message', 'cancelled on request', 'traceback', NULL)
                 END
WHERE id = :id AND token = :token AND status = 'running'
RETURNING status, due_at

-- name: park_wait
INSERT INTO rota_waits (run_id, token, kind, name, until, since) VALUES (:id, :token, :kind, :name, :until, COALESCE(:since, {now}))
ON CONFLICT (run_id) DO UPDATE SET token = excluded.token, kind = excluded.kind, name = excluded.name, until = excluded.until,
                                   since = excluded.since

-- name: park_signalled
-- transition: park
UPDATE rota_runs SET due_at = {now}
WHERE id = :id AND status = 'pending' AND due_at > {now}
  AND EXISTS (SELECT 1 FROM rota_waits w JOIN rota_signals s ON s.run_id = w.run_id AND s.name = w.name
              WHERE w.run_id = :id AND w.token = rota_runs.token AND w.kind = 'signal')
RETURNING id

-- name: unpark
DELETE FROM rota_waits
WHERE run_id = :id
  AND EXISTS (SELECT 1 FROM rota_runs r WHERE r.id = :id AND r.token = :token AND r.status = 'running')

-- name: signal_lock
-- (SQLite: the write transaction holds the whole file)
SELECT status FROM rota_runs WHERE id = :id

-- name: signal_store
INSERT INTO rota_signals (run_id, name, payload, sent_at)
SELECT r.id, :name, :payload, {now} FROM rota_runs r
WHERE r.id = :id AND r.status IN ('pending', 'running')
ON CONFLICT (run_id, name) DO NOTHING
RETURNING run_id

-- name: signal_wake
-- transition: signal
UPDATE rota_runs SET due_at = {now}
WHERE id = :id AND status = 'pending' AND due_at > {now}
  AND EXISTS (SELECT 1 FROM rota_waits w WHERE w.run_id = :id AND w.token = rota_runs.token AND w.kind = 'signal'
              AND w.name = :name)
RETURNING id

-- name: signal_status
SELECT r.status, EXISTS (SELECT 1 FROM rota_signals s WHERE s.run_id = :id AND s.name = :name)
FROM rota_runs r WHERE r.id = :id

-- name: signal_of
SELECT payload, sent_at FROM rota_signals WHERE run_id = :id AND name = :name

-- name: signals_of
SELECT name, payload, sent_at FROM rota_signals WHERE run_id = :id ORDER BY sent_at, name

-- name: wait_of
-- (a run the flow claim moved to its rate's window, rate_waited, is past its wait: rate_wait_of;
-- one due now, its wait over or its signal come, is past it too: due, not parked, as lifecycle.state_of)
SELECT w.kind, w.name, w.until, w.since FROM rota_waits w JOIN rota_runs r ON r.id = w.run_id AND r.token = w.token
WHERE w.run_id = :id AND r.status = 'pending' AND NOT r.rate_waited AND r.due_at > {now}

-- name: waits_of
-- wait_of for a page of runs (rota runs, /api/runs): one statement; :ids a JSON array.
SELECT w.run_id, w.kind, w.name, w.until, w.since FROM rota_waits w JOIN rota_runs r ON r.id = w.run_id AND r.token = w.token
WHERE w.run_id IN (SELECT value FROM json_each(:ids)) AND r.status = 'pending' AND NOT r.rate_waited AND r.due_at > {now}

-- name: rate_wait_of
-- A pending run waiting for its rate's window (flow_bump moved it there: a resumed parked run
-- as any other): the rate, its key and when the window opens.
SELECT rate_name, rate_key, due_at FROM rota_runs
WHERE id = :id AND status = 'pending' AND rate_waited AND rate_name IS NOT NULL AND due_at > {now}

-- name: progress_save
INSERT INTO rota_progress (run_id, fraction, message, updated_at)
SELECT r.id, :fraction, :message, {now} FROM rota_runs r
WHERE r.id = :id AND r.token = :token AND r.status = 'running'
ON CONFLICT (run_id) DO UPDATE SET fraction = excluded.fraction, message = excluded.message,
                                   updated_at = excluded.updated_at
RETURNING run_id

-- name: progress_of
SELECT fraction, message, updated_at FROM rota_progress WHERE run_id = :id

-- name: durable_forget
-- (one statement per table: :ids a JSON array; see durable_forget_*)
DELETE FROM rota_steps WHERE run_id IN (SELECT value FROM json_each(:ids))

-- name: durable_forget_waits
DELETE FROM rota_waits WHERE run_id IN (SELECT value FROM json_each(:ids))

-- name: durable_forget_signals
DELETE FROM rota_signals WHERE run_id IN (SELECT value FROM json_each(:ids))

-- name: durable_forget_progress
DELETE FROM rota_progress WHERE run_id IN (SELECT value FROM json_each(:ids))
