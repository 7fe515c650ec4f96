-- PostgreSQL queries: durable steps (issue 43): checkpoints, parked runs, signals, progress
-- (rota/stores/sqlstore/durable.py, rota/durable.py). Conventions: see the head of enqueue.sql.

-- name: steps_of
-- A run's checkpoints, in the order they were first made.
SELECT name, seq, attempt, started_at, finished_at, outcome, result, error
FROM rota_steps WHERE run_id = %(id)s ORDER BY seq, name

-- name: save_step
-- (The step's attempt is the handler's: a held run's start may not be written yet, and
-- then the attempt it will count is one more than the row holds.)
-- One step's checkpoint, only while (id, token) holds the run (status running): a worker whose
-- lease was taken over saves nothing and gets no row back. A succeeded step is never
-- overwritten; a failed one is replaced by its next try, a sleep or wait that ends keeps its
-- start. The run's row is locked (FOR SHARE): under READ COMMITTED a save whose snapshot
-- predates a rescue or claim in flight waits for it and checks the token again, so it can
-- never commit after the token changed (a stale worker's save is refused).
INSERT INTO rota_steps (run_id, name, seq, attempt, started_at, finished_at, outcome, result, error)
SELECT r.id, %(name)s, %(seq)s, r.attempt + (r.started_at IS NULL)::int, {now} - make_interval(secs => %(took)s::float8), {now},
       %(outcome)s, %(result)s, %(error)s
FROM rota_runs r WHERE r.id = %(id)s AND r.token = %(token)s AND r.status = 'running'
FOR SHARE OF r
ON CONFLICT (run_id, name) DO UPDATE
SET seq = EXCLUDED.seq, attempt = EXCLUDED.attempt,
    started_at = CASE WHEN rota_steps.outcome = 'waiting' THEN rota_steps.started_at ELSE EXCLUDED.started_at END,
    finished_at = EXCLUDED.finished_at, outcome = EXCLUDED.outcome, result = EXCLUDED.result,
    error = EXCLUDED.error
WHERE rota_steps.outcome <> 'succeeded'
RETURNING run_id

-- name: save_steps
-- Checkpoints of several runs at once (a worker's group commit: rota/stores/sqlstore/
-- checkpoints.py), each as save_step: written only where its (id, token) holds the run, a
-- succeeded step never overwritten. One statement for the batch; the rows back name the
-- checkpoints written (a checkpoint not named was refused). %(rows)s: a JSON array of
-- {id, token, name, seq, took, outcome, result, error}, one per (id, name).
INSERT INTO rota_steps (run_id, name, seq, attempt, started_at, finished_at, outcome, result, error)
SELECT r.id, v.name, v.seq, r.attempt + (r.started_at IS NULL)::int, {now} - make_interval(secs => v.took), {now},
       v.outcome, v.result, v.error
FROM json_to_recordset(%(rows)s::json)
         AS v(id bigint, token bigint, name text, seq integer, took float8, outcome text, result text, error text)
JOIN rota_runs r ON r.id = v.id AND r.token = v.token AND r.status = 'running'
WHERE r.id = ANY(ARRAY(SELECT (e->>'id')::bigint FROM json_array_elements(%(rows)s::json) AS e))
ORDER BY r.id  -- (the runs' rows locked in id order)
FOR SHARE OF r
ON CONFLICT (run_id, name) DO UPDATE
SET seq = EXCLUDED.seq, attempt = EXCLUDED.attempt,
    started_at = CASE WHEN rota_steps.outcome = 'waiting' THEN rota_steps.started_at ELSE EXCLUDED.started_at END,
    finished_at = EXCLUDED.finished_at, outcome = EXCLUDED.outcome, result = EXCLUDED.result,
    error = EXCLUDED.error
WHERE rota_steps.outcome <> 'succeeded'
RETURNING run_id, name

-- name: step_clock
-- The database's time (a sleep's wake time and a wait's deadline are taken from it), and
-- whether (id, token) still holds the run.
SELECT {now}, EXISTS (SELECT 1 FROM rota_runs WHERE id = %(id)s AND token = %(token)s AND status = 'running')

-- name: park
-- transition: park
-- ctx.sleep / ctx.wait_for: the run leaves its worker and slot, pending and due when its wait
-- ends (%(wake_in)s seconds from now); its attempt given back (a park is not an attempt's
-- end), its start cleared, an earlier attempt's error cleared (it stays in the history: a
-- parked run shows its wait, not a stale error); a run whose cancellation was requested ends cancelled. Its wait is
-- recorded next (park_wait: Run.waiting, the CLI, the dashboard). The NOTIFY wakes workers
-- waiting for a freed limit slot (delivered at the commit).
WITH told AS (
    SELECT pg_notify('rota' || CASE
                   WHEN current_schema() = 'public' THEN ''
                   WHEN octet_length(current_schema()) <= 58 THEN ':' || current_schema()
                   ELSE ':' || md5(current_schema()) END, 'run')
)
UPDATE rota_runs r
SET status = CASE WHEN r.cancel_requested THEN 'cancelled' ELSE 'pending' END,
    attempt = CASE WHEN r.started_at IS NULL OR r.attempt = 0 THEN r.attempt ELSE r.attempt - 1 END,
    started_at = NULL, lease_until = NULL,
    due_at = {now} + make_interval(secs => greatest(%(wake_in)s::float8, 0)),
    finished_at = CASE WHEN r.cancel_requested THEN {now} END,
    error = CASE WHEN r.cancel_requested
                 THEN jsonb_build_object('type', 'Cancelled', 'message', 'cancelled on request', 'traceback', NULL)::text
                 END
WHERE r.id = %(id)s AND r.token = %(token)s AND r.status = 'running'
  AND (SELECT count(*) FROM told) >= 0
RETURNING r.status, r.due_at

-- name: park_wait
INSERT INTO rota_waits (run_id, token, kind, name, until, since) VALUES (%(id)s, %(token)s, %(kind)s, %(name)s, %(until)s,
                                                                   COALESCE(%(since)s::timestamptz, {now}))
ON CONFLICT (run_id) DO UPDATE SET token = EXCLUDED.token, kind = EXCLUDED.kind, name = EXCLUDED.name, until = EXCLUDED.until,
                                   since = EXCLUDED.since

-- name: park_signalled
-- transition: park
-- In the park's transaction, after it (a new snapshot): a run that parked to wait for a signal
-- already sent (before the wait began, or while the park was being written) is due now.
UPDATE rota_runs r SET due_at = {now}
FROM rota_waits w
WHERE r.id = %(id)s AND w.run_id = r.id AND w.token = r.token AND w.kind = 'signal'
  AND r.status = 'pending' AND r.due_at > {now}
  AND EXISTS (SELECT 1 FROM rota_signals s WHERE s.run_id = r.id AND s.name = w.name)
RETURNING r.id

-- name: unpark
-- The handler passed the wait it parked on: its wait is over (fenced by its token).
DELETE FROM rota_waits w
WHERE w.run_id = %(id)s
  AND EXISTS (SELECT 1 FROM rota_runs r WHERE r.id = %(id)s AND r.token = %(token)s AND r.status = 'running')

-- name: signal_lock
-- App.signal, first: the run's row locked (a park in progress commits first, and the wake
-- below then sees its wait; a park that comes after waits for this transaction and then sees
-- the signal: park_signalled).
SELECT status FROM rota_runs WHERE id = %(id)s FOR UPDATE

-- name: signal_store
-- App.signal: kept if the run is pending or running (sent before its wait begins, or during
-- it); the first signal of a name is kept. No row back: already sent, or the run is final or
-- unknown (signal_status tells which).
INSERT INTO rota_signals (run_id, name, payload, sent_at)
SELECT r.id, %(name)s, %(payload)s, {now} FROM rota_runs r
WHERE r.id = %(id)s AND r.status IN ('pending', 'running')
ON CONFLICT (run_id, name) DO NOTHING
RETURNING run_id

-- name: signal_wake
-- transition: signal
-- A run parked waiting for this signal is due now (the next claim takes it).
UPDATE rota_runs r SET due_at = {now}
WHERE r.id = %(id)s AND r.status = 'pending' AND r.due_at > {now}
  AND EXISTS (SELECT 1 FROM rota_waits w WHERE w.run_id = r.id AND w.token = r.token AND w.kind = 'signal'
              AND w.name = %(name)s)
RETURNING r.id

-- name: signal_status
SELECT r.status, EXISTS (SELECT 1 FROM rota_signals s WHERE s.run_id = %(id)s AND s.name = %(name)s)
FROM rota_runs_all r WHERE r.id = %(id)s

-- name: signal_of
SELECT payload, sent_at FROM rota_signals WHERE run_id = %(id)s AND name = %(name)s

-- name: signals_of
SELECT name, payload, sent_at FROM rota_signals WHERE run_id = %(id)s ORDER BY sent_at, name

-- name: wait_of
-- (a run the flow claim moved to its rate's window, rate_waited, is past its wait: rate_wait_of;
-- one due now, its wait over or its signal come, is past it too: due, not parked, as lifecycle.state_of)
SELECT w.kind, w.name, w.until, w.since FROM rota_waits w JOIN rota_runs r ON r.id = w.run_id AND r.token = w.token
WHERE w.run_id = %(id)s AND r.status = 'pending' AND NOT r.rate_waited AND r.due_at > {now}

-- name: waits_of
-- wait_of for a page of runs (rota runs, /api/runs): one statement; %(ids)s a JSON array.
SELECT w.run_id, w.kind, w.name, w.until, w.since FROM rota_waits w JOIN rota_runs r ON r.id = w.run_id AND r.token = w.token
WHERE w.run_id IN (SELECT value::bigint FROM json_array_elements_text(%(ids)s::json))
  AND r.status = 'pending' AND NOT r.rate_waited AND r.due_at > {now}

-- name: rate_wait_of
-- A pending run waiting for its rate's window (flow_bump moved it there: a resumed parked run
-- as any other): the rate, its key and when the window opens.
SELECT rate_name, rate_key, due_at FROM rota_runs
WHERE id = %(id)s AND status = 'pending' AND rate_waited AND rate_name IS NOT NULL AND due_at > {now}

-- name: progress_save
-- ctx.progress, with the heartbeat: written only while the token holds the run (the run's
-- row read locked: a takeover in flight is waited for and the token read after it).
INSERT INTO rota_progress (run_id, fraction, message, updated_at)
SELECT r.id, %(fraction)s, %(message)s, {now} FROM rota_runs r
WHERE r.id = %(id)s AND r.token = %(token)s AND r.status = 'running'
FOR SHARE OF r
ON CONFLICT (run_id) DO UPDATE SET fraction = EXCLUDED.fraction, message = EXCLUDED.message,
                                   updated_at = EXCLUDED.updated_at
RETURNING run_id

-- name: progress_of
SELECT fraction, message, updated_at FROM rota_progress WHERE run_id = %(id)s

-- name: durable_forget
-- The steps, waits, signals and progress of runs retention deleted (:ids a JSON array).
DELETE FROM rota_steps WHERE run_id IN (SELECT value::bigint FROM json_array_elements_text(%(ids)s::json))

-- name: durable_forget_waits
DELETE FROM rota_waits WHERE run_id IN (SELECT value::bigint FROM json_array_elements_text(%(ids)s::json))

-- name: durable_forget_signals
DELETE FROM rota_signals WHERE run_id IN (SELECT value::bigint FROM json_array_elements_text(%(ids)s::json))

-- name: durable_forget_progress
DELETE FROM rota_progress WHERE run_id IN (SELECT value::bigint FROM json_array_elements_text(%(ids)s::json))
