-- MySQL queries: durable steps (issue 43): checkpoints, parked runs, signals, progress
-- (rota/stores/sqlstore/durable.py, rota/durable.py), as on PostgreSQL. No UPDATE/INSERT ...
-- RETURNING: a statement of several steps (session.py) writes, then reads back in the same
-- transaction. Fencing is by the run's current token, as on the other stores: a run's
-- (token, running) never comes back once lost, so a step that sees it lost writes nothing.

-- name: steps_of
SELECT name, seq, attempt, started_at, finished_at, outcome, result, error
FROM rota_steps WHERE run_id = %(id)s ORDER BY seq, name

-- name: save_step
-- (The step's attempt is the handler's: a held run's start may not be written yet, and
-- then the attempt it will count is one more than the row holds.)
-- One step's checkpoint, only while (id, token) holds the run (status running); a succeeded
-- step is never overwritten, a failed one is replaced by its next try. First the gate (no
-- row: refused, nothing written; the run's row locked, as save_steps does: under READ
-- COMMITTED InnoDB reads an INSERT ... SELECT's source rows as a consistent read, without a
-- lock, so a save must not rely on it: a rescue or claim in flight is waited for and the
-- token read after it), then the write (the token checked again, the succeeded guard per
-- column, outcome last: MySQL assigns left to right), then the run read back: a row only if
-- the token still holds it. A sleep or wait that ends keeps its start.
SELECT r.id FROM rota_runs r
WHERE r.id = %(id)s AND r.token = %(token)s AND r.status = 'running'
  AND NOT EXISTS (SELECT 1 FROM rota_steps s WHERE s.run_id = r.id AND s.name = %(name)s AND s.outcome = 'succeeded')
FOR UPDATE
;
INSERT INTO rota_steps (run_id, name, seq, attempt, started_at, finished_at, outcome, result, error)
SELECT r.id, %(name)s, %(seq)s, r.attempt + (r.started_at IS NULL), {now} - INTERVAL ROUND(%(took)s * 1000000) MICROSECOND, {now},
       %(outcome)s, %(result)s, %(error)s
FROM rota_runs r WHERE r.id = %(id)s AND r.token = %(token)s AND r.status = 'running'
{{step_upsert}}
;
SELECT id FROM rota_runs WHERE id IN %(_ids)s AND token = %(token)s AND status = 'running'

-- name: save_steps
-- Checkpoints of several runs at once (a worker's group commit), each as save_step. First the
-- gate: the (run, step) pairs whose (id, token) holds the run and whose step has not
-- succeeded, their runs locked (no token changes before the commit); no row: nothing
-- written. Then the write of those, the succeeded guard per column as in save_step. The
-- gate's rows name the checkpoints written (a checkpoint not named was refused). %(rows)s:
-- a JSON array of {id, token, name, seq, took, outcome, result, error}.
SELECT r.id, v.name FROM rota_runs r
JOIN JSON_TABLE(%(rows)s, '$[*]' COLUMNS (id BIGINT PATH '$.id', token BIGINT PATH '$.token',
                                          name VARCHAR(255) PATH '$.name')) AS v
  ON v.id = r.id AND v.token = r.token
LEFT JOIN rota_steps s ON s.run_id = r.id AND s.name = v.name COLLATE utf8mb4_bin AND s.outcome = 'succeeded'
WHERE r.status = 'running' AND s.run_id IS NULL  -- (an anti-join by the primary key: no scan of rota_steps)
ORDER BY r.id
FOR UPDATE
;
INSERT INTO rota_steps (run_id, name, seq, attempt, started_at, finished_at, outcome, result, error)
SELECT r.id, v.name, v.seq, r.attempt + (r.started_at IS NULL),
       {now} - INTERVAL ROUND(v.took * 1000000) MICROSECOND, {now}, v.outcome, v.result, v.error
FROM JSON_TABLE(%(rows)s, '$[*]' COLUMNS (
         id BIGINT PATH '$.id', token BIGINT PATH '$.token', name VARCHAR(255) PATH '$.name', seq INT PATH '$.seq',
         took DOUBLE PATH '$.took', outcome VARCHAR(16) PATH '$.outcome', result LONGTEXT PATH '$.result',
         error LONGTEXT PATH '$.error')) AS v
JOIN rota_runs r ON r.id = v.id AND r.token = v.token
WHERE r.id IN %(_ids)s AND r.status = 'running'
{{step_upsert}}

-- name: step_clock
-- The database's time (a sleep's wake time and a wait's deadline are taken from it), and
-- whether (id, token) still holds the run.
SELECT {now}, EXISTS (SELECT 1 FROM rota_runs WHERE id = %(id)s AND token = %(token)s AND status = 'running')

-- name: park
-- transition: park
-- ctx.sleep / ctx.wait_for, as on PostgreSQL: the run (locked while (id, token) holds it)
-- leaves its worker and slot, pending and due when its wait ends (%(wake_in)s seconds from
-- now); its attempt given back, its start cleared (attempt is assigned before started_at:
-- MySQL assigns left to right); a run whose cancellation was requested ends cancelled (and
-- is settled: session.ENDING). Then its status and due time.
SELECT id FROM rota_runs WHERE id = %(id)s AND token = %(token)s AND status = 'running' FOR UPDATE
;
UPDATE rota_runs
SET status = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'pending' END,
    attempt = CASE WHEN started_at IS NULL OR attempt = 0 THEN attempt ELSE attempt - 1 END,
    started_at = NULL, lease_until = NULL,
    due_at = {now} + INTERVAL ROUND(GREATEST(%(wake_in)s, 0) * 1000000) MICROSECOND,
    finished_at = CASE WHEN cancel_requested THEN {now} END,
    error = CASE WHEN cancel_requested
                 THEN JSON_OBJECT('type', 'Cancelled', 'message', 'cancelled on request', 'traceback', NULL)
                 END
WHERE id IN %(_ids)s
;
SELECT status, due_at FROM rota_runs WHERE id IN %(_ids)s

-- name: park_wait
INSERT INTO rota_waits (run_id, token, kind, name, until, since) VALUES (%(id)s, %(token)s, %(kind)s, %(name)s, %(until)s,
                                                                   COALESCE(%(since)s, {now}))
ON DUPLICATE KEY UPDATE token = VALUES(token), kind = VALUES(kind), name = VALUES(name), until = VALUES(until),
                        since = VALUES(since)

-- name: park_signalled
-- transition: park
-- In the park's transaction, after it: a run that parked to wait for a signal already sent
-- (before the wait began, or while the park was being written: signal_lock) is due now.
SELECT r.id FROM rota_runs r
JOIN rota_waits w ON w.run_id = r.id AND w.token = r.token AND w.kind = 'signal'
WHERE r.id = %(id)s AND r.status = 'pending' AND r.due_at > {now}
  AND EXISTS (SELECT 1 FROM rota_signals s WHERE s.run_id = r.id AND s.name = w.name)
FOR UPDATE
;
UPDATE rota_runs SET due_at = {now} WHERE id IN %(_ids)s
;
SELECT id FROM rota_runs WHERE id IN %(_ids)s

-- name: unpark
-- The handler passed the wait it parked on: its wait is over (fenced by its token).
DELETE FROM rota_waits
WHERE run_id = %(id)s
  AND EXISTS (SELECT 1 FROM rota_runs r WHERE r.id = %(id)s AND r.token = %(token)s AND r.status = 'running')

-- name: signal_lock
-- App.signal, first: the run's row locked (a park in progress commits first, and the wake
-- below then sees its wait; a park that comes after waits for this transaction and then sees
-- the signal: park_signalled).
SELECT status FROM rota_runs WHERE id = %(id)s FOR UPDATE

-- name: signal_store
-- App.signal: kept if the run is pending or running (sent before its wait begins, or during
-- it); the first signal of a name is kept. First the gate (signal_lock holds the run's row, so
-- a signal of the same name sent meanwhile has committed and is seen), then the write. No
-- row back: already sent, or the run is final or unknown (signal_status tells which).
SELECT r.id FROM rota_runs r
WHERE r.id = %(id)s AND r.status IN ('pending', 'running')
  AND NOT EXISTS (SELECT 1 FROM rota_signals s WHERE s.run_id = r.id AND s.name = %(name)s)
;
INSERT INTO rota_signals (run_id, name, payload, sent_at)
SELECT r.id, %(name)s, %(payload)s, {now} FROM rota_runs r WHERE r.id IN %(_ids)s
ON DUPLICATE KEY UPDATE run_id = rota_signals.run_id

-- name: signal_wake
-- transition: signal
-- A run parked waiting for this signal is due now (the next claim takes it).
SELECT r.id FROM rota_runs r
WHERE r.id = %(id)s AND r.status = 'pending' AND r.due_at > {now}
  AND EXISTS (SELECT 1 FROM rota_waits w WHERE w.run_id = r.id AND w.token = r.token AND w.kind = 'signal'
              AND w.name = %(name)s)
FOR UPDATE
;
UPDATE rota_runs SET due_at = {now} WHERE id IN %(_ids)s
;
SELECT id FROM rota_runs WHERE id IN %(_ids)s

-- name: signal_status
SELECT r.status, EXISTS (SELECT 1 FROM rota_signals s WHERE s.run_id = %(id)s AND s.name = %(name)s)
FROM rota_runs r WHERE r.id = %(id)s

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
WHERE w.run_id IN {{ids(%(ids)s)}} AND r.status = 'pending' AND NOT r.rate_waited AND r.due_at > {now}

-- name: rate_wait_of
-- A pending run waiting for its rate's window (flow_bump moved it there: a resumed parked run
-- as any other): the rate, its key and when the window opens.
SELECT rate_name, rate_key, due_at FROM rota_runs
WHERE id = %(id)s AND status = 'pending' AND rate_waited AND rate_name IS NOT NULL AND due_at > {now}

-- name: progress_save
-- ctx.progress, with the heartbeat: written only while the token holds the run. The run's
-- row locked first (an INSERT ... SELECT reads its source without a lock under READ
-- COMMITTED: a takeover in flight is waited for and the token read after it), then the
-- write, then the run read back (a row only if the token still holds it).
SELECT id FROM rota_runs WHERE id = %(id)s AND token = %(token)s AND status = 'running' FOR UPDATE
;
INSERT INTO rota_progress (run_id, fraction, message, updated_at)
SELECT r.id, %(fraction)s, %(message)s, {now} FROM rota_runs r
WHERE r.id = %(id)s AND r.token = %(token)s AND r.status = 'running'
ON DUPLICATE KEY UPDATE fraction = VALUES(fraction), message = VALUES(message), updated_at = VALUES(updated_at)
;
SELECT id FROM rota_runs WHERE id = %(id)s AND token = %(token)s AND status = 'running'

-- name: progress_of
SELECT fraction, message, updated_at FROM rota_progress WHERE run_id = %(id)s

-- name: durable_forget
-- The steps, waits, signals and progress of runs retention deleted (%(ids)s a JSON array).
DELETE FROM rota_steps WHERE run_id IN {{ids(%(ids)s)}}

-- name: durable_forget_waits
DELETE FROM rota_waits WHERE run_id IN {{ids(%(ids)s)}}

-- name: durable_forget_signals
DELETE FROM rota_signals WHERE run_id IN {{ids(%(ids)s)}}

-- name: durable_forget_progress
DELETE FROM rota_progress WHERE run_id IN {{ids(%(ids)s)}}
