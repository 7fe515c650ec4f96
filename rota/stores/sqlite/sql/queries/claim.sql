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
{{claim_update}}
FROM (SELECT id, row_number() OVER (ORDER BY priority DESC, due_at, id) AS pos FROM (
    SELECT id, priority, due_at FROM rota_runs INDEXED BY rota_runs_claim
    WHERE status = 'pending' AND NOT held AND due_at <= {now}
      AND (misfire_at IS NULL OR misfire_at >= {now})
      AND NOT cancel_requested
      AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)  -- paused queues (0018)
      AND limit_name IS NULL AND rate_name IS NULL  -- limited and rated runs: flow_*
{{claim_tail}}

-- name: claim_in_queues
-- transition: claim
-- as claim, for some queues only
{{claim_update}}
FROM (SELECT id, row_number() OVER (ORDER BY priority DESC, due_at, id) AS pos FROM (
    SELECT id, priority, due_at FROM rota_runs INDEXED BY rota_runs_claim
    WHERE status = 'pending' AND NOT held AND due_at <= {now}
      AND (misfire_at IS NULL OR misfire_at >= {now})
      AND limit_name IS NULL AND rate_name IS NULL  -- limited and rated runs: flow_*
      AND queue IN (SELECT value FROM json_each(:queues))
      AND NOT cancel_requested
      AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)  -- paused queues (0018)
{{claim_tail}}

-- name: claim_ahead
-- transition: claim_ahead
-- The runs due within :ahead seconds, claimed held by an idle worker just before their time
-- (see the PostgreSQL statement): plain runs only, never queued or asked to cancel.
{{claim_ahead_update}}
    WHERE status = 'pending' AND NOT held AND due_at <= {now} + :ahead
      AND (misfire_at IS NULL OR misfire_at >= {now})
      AND NOT cancel_requested
      AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)  -- paused queues (0018)
      AND limit_name IS NULL AND rate_name IS NULL
{{claim_tail}}

-- name: claim_ahead_in_queues
-- transition: claim_ahead
-- as claim_ahead, for some queues only
{{claim_ahead_update}}
    WHERE status = 'pending' AND NOT held AND due_at <= {now} + :ahead
      AND (misfire_at IS NULL OR misfire_at >= {now})
      AND limit_name IS NULL AND rate_name IS NULL
      AND queue IN (SELECT value FROM json_each(:queues))
      AND NOT cancel_requested
      AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)  -- paused queues (0018)
{{claim_tail}}

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
       {{next_tick}}

-- name: poll_state_in_queues
SELECT {now},
       (SELECT min(due_at) FROM rota_runs INDEXED BY rota_runs_due
        WHERE status = 'pending' AND NOT held AND (misfire_at IS NULL OR misfire_at >= {now})
          AND queue IN (SELECT value FROM json_each(:queues))
          AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)),
       {{next_tick}}

-- name: now
SELECT {now}
