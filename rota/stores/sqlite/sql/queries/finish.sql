-- SQLite queries: a run's end: the finish batches and a transactional handler's success.
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- name: finish_succeeded
-- transition: finish
-- The batch's plain successes in one statement (:rows, a JSON array of [id, token, result,
-- started]), not one execution per run: the statement's own work and its triggers' frames are
-- set up once per batch (a third less CPU per run in the no-op drain than executemany).
-- :started (per run): a held run started that many seconds ago whose start was not written.
-- `+rota_runs.status`: the run is found by its key from each row of the batch, never by a walk
-- of rota_runs_status's running entries.
UPDATE rota_runs
SET status = 'succeeded', result = b.result, error = NULL, finished_at = {now}, lease_until = NULL,
    attempt = CASE WHEN b.started IS NOT NULL AND started_at IS NULL THEN attempt + 1 ELSE attempt END,
    started_at = coalesce(started_at, {now} - b.started)
FROM (SELECT value ->> 0 AS id, value ->> 1 AS token, value ->> 2 AS result, value ->> 3 AS started
      FROM json_each(:rows)) AS b
WHERE rota_runs.id = b.id AND rota_runs.token = b.token AND +rota_runs.status = 'running'

-- name: finish
-- transition: finish, retry
-- A retry (:status pending) of a run whose cancellation was requested ends cancelled.
UPDATE rota_runs
SET status = CASE WHEN :status = 'pending' AND cancel_requested THEN 'cancelled' ELSE :status END,
    result = :result, error = :error, lease_until = NULL,
    finished_at = CASE WHEN :status = 'pending' AND NOT cancel_requested THEN NULL ELSE {now} END,
    attempt = CASE WHEN :started IS NOT NULL AND started_at IS NULL THEN attempt + 1 ELSE attempt END,
    started_at = coalesce(started_at, {now} - :started),
    due_at = CASE WHEN :status = 'pending' THEN {now} + :retry_in ELSE due_at END,
    -- (a history that is not JSON, written by hand, is left as found: json_insert would fail
    -- the statement, and with it the batch; rota.quarantine)
    attempts = CASE WHEN :history IS NULL OR NOT json_valid(attempts) THEN attempts
                    ELSE json_insert(attempts, '$[#]', json(:history)) END,
    refused_at = NULL  -- a handler ran: a later refusal (a retry on an old worker) counts anew
WHERE id = :id AND token = :token AND status = 'running'

-- name: lock_finished_schedules
-- (SQLite: a write transaction holds the whole file; no lock order to keep)
SELECT :ids

-- name: finish_holding
-- The outcomes' runs still running, with their tokens: read first in the finish's transaction
-- (BEGIN IMMEDIATE: no other writer changes them before the finish statements run), so the
-- finish writes exactly the outcomes whose token still holds and knows which they were.
SELECT id, token FROM rota_runs WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'running'

-- name: finished_parents
-- Whether a finish just written ended a run that others wait for (after=): the trigger has
-- released or cancelled its dependents in that transaction, so this process's workers are woken
-- to claim at once (other processes see the write through data_version).
SELECT 1 FROM rota_runs WHERE id IN (SELECT value FROM json_each(:ids)) AND has_dependents LIMIT 1

-- name: handler_outcome
-- A transactional handler's commit whose reply was lost, read back: the run's status and
-- token.
SELECT status, token FROM rota_runs WHERE id = :id

-- name: finish_transactional
-- transition: finish
-- a transactional handler's success, in the handler's own transaction (rota.transactional)
UPDATE rota_runs
SET status = 'succeeded', result = :result, error = NULL, finished_at = {now}, lease_until = NULL,
    -- a held run started by its worker whose start was not written yet: the commit records it
    attempt = CASE WHEN started_at IS NULL THEN attempt + 1 ELSE attempt END,
    started_at = coalesce(started_at, {now})
WHERE id = :id AND token = :token AND status = 'running'
RETURNING id
