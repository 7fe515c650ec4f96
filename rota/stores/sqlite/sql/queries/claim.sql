-- SQLite queries: the claim, starts, heartbeats and what a polling worker reads.
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- name: next_token
SELECT value + 1 FROM rota_counters WHERE name = 'token'

-- name: take_token
UPDATE rota_counters SET value = :token WHERE name = 'token'

-- name: claim
-- transition: claim
-- The first :start runs in claim order are started by the claim (the attempt counted,
-- started_at set); the rest are held: claimed, not started (started_at NULL, the attempt not
-- counted until their start). A run whose cancellation was requested is never claimed.
UPDATE rota_runs
SET status = 'running', owner = :owner, token = :token + c.pos - 1,
    -- (a run at the maximum rota counts is not counted: it is claimed, and its worker fails it
    -- as damaged; rota.quarantine. Past 2^63-1 the sum would be a REAL: the whole claim failed.)
    attempt = CASE WHEN c.pos <= :start AND attempt < 2147483647 THEN attempt + 1 ELSE attempt END,
    started_at = CASE WHEN c.pos <= :start THEN {now} END, lease_until = {now} + :lease,
    misfire_at = NULL
-- one fencing token per claimed run (:token + its place in the claim's order), so ctx.token
-- fences one attempt
FROM (SELECT id, row_number() OVER (ORDER BY priority DESC, due_at, id) AS pos FROM (
    SELECT id, priority, due_at FROM rota_runs INDEXED BY rota_runs_claim
    WHERE status = 'pending' AND NOT held AND due_at <= {now}
      AND (misfire_at IS NULL OR misfire_at >= {now})
      AND NOT cancel_requested
      AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)  -- paused queues (0018)
      AND limit_name IS NULL AND rate_name IS NULL  -- limited and rated runs: flow_*
    ORDER BY priority DESC, due_at, id
    LIMIT :limit)) AS c
WHERE rota_runs.id = c.id
RETURNING rota_runs.id, task, args, kwargs, attempt, max_attempts, token, timeout, backoff, schedule,
          scheduled_for, started_at, lease_until, priority, due_at

-- name: claim_in_queues
-- transition: claim
-- as claim, for some queues only
UPDATE rota_runs
SET status = 'running', owner = :owner, token = :token + c.pos - 1,
    -- (a run at the maximum rota counts is not counted: it is claimed, and its worker fails it
    -- as damaged; rota.quarantine. Past 2^63-1 the sum would be a REAL: the whole claim failed.)
    attempt = CASE WHEN c.pos <= :start AND attempt < 2147483647 THEN attempt + 1 ELSE attempt END,
    started_at = CASE WHEN c.pos <= :start THEN {now} END, lease_until = {now} + :lease,
    misfire_at = NULL
-- one fencing token per claimed run (:token + its place in the claim's order), so ctx.token
-- fences one attempt
FROM (SELECT id, row_number() OVER (ORDER BY priority DESC, due_at, id) AS pos FROM (
    SELECT id, priority, due_at FROM rota_runs INDEXED BY rota_runs_claim
    WHERE status = 'pending' AND NOT held AND due_at <= {now}
      AND (misfire_at IS NULL OR misfire_at >= {now})
      AND limit_name IS NULL AND rate_name IS NULL  -- limited and rated runs: flow_*
      AND queue IN (SELECT value FROM json_each(:queues))
      AND NOT cancel_requested
      AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)  -- paused queues (0018)
    ORDER BY priority DESC, due_at, id
    LIMIT :limit)) AS c
WHERE rota_runs.id = c.id
RETURNING rota_runs.id, task, args, kwargs, attempt, max_attempts, token, timeout, backoff, schedule,
          scheduled_for, started_at, lease_until, priority, due_at

-- name: claim_ahead
-- transition: claim_ahead
-- The runs due within :ahead seconds, claimed held by an idle worker just before their time
-- (see the PostgreSQL statement): plain runs only, never queued or asked to cancel.
UPDATE rota_runs
SET status = 'running', owner = :owner, token = :token + c.pos - 1, lease_until = {now} + :lease,
    misfire_at = NULL, started_at = NULL
FROM (SELECT id, row_number() OVER (ORDER BY priority DESC, due_at, id) AS pos FROM (
    SELECT id, priority, due_at FROM rota_runs INDEXED BY rota_runs_claim
    WHERE status = 'pending' AND NOT held AND due_at <= {now} + :ahead
      AND (misfire_at IS NULL OR misfire_at >= {now})
      AND NOT cancel_requested
      AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)  -- paused queues (0018)
      AND limit_name IS NULL AND rate_name IS NULL
    ORDER BY priority DESC, due_at, id
    LIMIT :limit)) AS c
WHERE rota_runs.id = c.id
RETURNING rota_runs.id, task, args, kwargs, attempt, max_attempts, token, timeout, backoff, schedule,
          scheduled_for, started_at, lease_until, priority, due_at

-- name: claim_ahead_in_queues
-- transition: claim_ahead
-- as claim_ahead, for some queues only
UPDATE rota_runs
SET status = 'running', owner = :owner, token = :token + c.pos - 1, lease_until = {now} + :lease,
    misfire_at = NULL, started_at = NULL
FROM (SELECT id, row_number() OVER (ORDER BY priority DESC, due_at, id) AS pos FROM (
    SELECT id, priority, due_at FROM rota_runs INDEXED BY rota_runs_claim
    WHERE status = 'pending' AND NOT held AND due_at <= {now} + :ahead
      AND (misfire_at IS NULL OR misfire_at >= {now})
      AND limit_name IS NULL AND rate_name IS NULL
      AND queue IN (SELECT value FROM json_each(:queues))
      AND NOT cancel_requested
      AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)  -- paused queues (0018)
    ORDER BY priority DESC, due_at, id
    LIMIT :limit)) AS c
WHERE rota_runs.id = c.id
RETURNING rota_runs.id, task, args, kwargs, attempt, max_attempts, token, timeout, backoff, schedule,
          scheduled_for, started_at, lease_until, priority, due_at

-- name: start
-- transition: start
-- A held run whose handler started :ago seconds ago: the attempt counted, started_at set.
-- Fenced by the token; refused when its cancellation was requested or it started already.
UPDATE rota_runs SET attempt = attempt + (attempt < 2147483647), started_at = {now} - :ago
WHERE id = :id AND token = :token AND status = 'running' AND started_at IS NULL
  AND NOT cancel_requested
RETURNING id

-- name: heartbeat
-- transition: heartbeat
UPDATE rota_runs SET lease_until = {now} + :lease
WHERE id = :id AND token = :token AND status = 'running'
RETURNING cancel_requested

-- name: poll_state
SELECT {now},
       (SELECT min(due_at) FROM rota_runs INDEXED BY rota_runs_due
        WHERE status = 'pending' AND NOT held AND (misfire_at IS NULL OR misfire_at >= {now})
          AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)),
       (SELECT min(t) FROM (
            SELECT min(next_run_at) AS t FROM rota_schedules WHERE active AND NOT paused
            UNION ALL
            SELECT min(misfire_at) FROM rota_runs INDEXED BY rota_runs_misfire
            WHERE status = 'pending' AND misfire_at IS NOT NULL AND misfire_at < {now}))

-- name: poll_state_in_queues
SELECT {now},
       (SELECT min(due_at) FROM rota_runs INDEXED BY rota_runs_due
        WHERE status = 'pending' AND NOT held AND (misfire_at IS NULL OR misfire_at >= {now})
          AND queue IN (SELECT value FROM json_each(:queues))
          AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)),
       (SELECT min(t) FROM (
            SELECT min(next_run_at) AS t FROM rota_schedules WHERE active AND NOT paused
            UNION ALL
            SELECT min(misfire_at) FROM rota_runs INDEXED BY rota_runs_misfire
            WHERE status = 'pending' AND misfire_at IS NOT NULL AND misfire_at < {now}))

-- name: now
SELECT {now}
