-- SQLite fragments: SQL that several queries share, written once. A query uses one as
-- {{name}} or {{name(argument, ...)}}; in a fragment {{parameter}} is its argument. Expanded when
-- the queries load (rota/stores/sqlstore/queries.py); tests/test_queries.py checks that each is
-- used and that every fragment a query names exists.

-- fragment: schedule_insert
-- A schedule's row inserted, or on a conflict the start of its update (upsert_code_schedule,
-- insert_schedule: each goes on with what it sets besides).
INSERT INTO rota_schedules AS s (
    name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, run_immediately,
    queue, priority, max_attempts, timeout, backoff, jitter, source, app, definition, next_run_at,
    created_at, updated_at)
VALUES (:name, :task, :cron, :every, :tz, :args, :kwargs, :overlap, :misfire, :misfire_grace,
        :run_immediately, :queue, :priority, :max_attempts, :timeout, :backoff, :jitter, :source, :app,
        :definition, :next_run_at, {now}, {now})
ON CONFLICT (name) DO UPDATE SET
    task = excluded.task, cron = excluded.cron, every = excluded.every, tz = excluded.tz,
    args = excluded.args, kwargs = excluded.kwargs, overlap = excluded.overlap,
    misfire = excluded.misfire, misfire_grace = excluded.misfire_grace,
    run_immediately = excluded.run_immediately, queue = excluded.queue,
    priority = excluded.priority, max_attempts = excluded.max_attempts,

-- fragment: claim_update
-- The claim's update up to its candidates (claim, claim_in_queues): the first :start started.
UPDATE rota_runs
SET status = 'running', owner = :owner, token = :token + c.pos - 1,
    -- (a run at the maximum rota counts is not counted: it is claimed, and its worker fails it
    -- as damaged; rota.quarantine. Past 2^63-1 the sum would be a REAL: the whole claim failed.)
    attempt = CASE WHEN c.pos <= :start AND attempt < 2147483647 THEN attempt + 1 ELSE attempt END,
    started_at = CASE WHEN c.pos <= :start THEN {now} END, lease_until = {now} + :lease,
    misfire_at = NULL
-- one fencing token per claimed run (:token + its place in the claim's order), so ctx.token
-- fences one attempt

-- fragment: claim_ahead_update
-- The claim ahead's update up to its candidates' conditions (claim_ahead, claim_ahead_in_queues).
UPDATE rota_runs
SET status = 'running', owner = :owner, token = :token + c.pos - 1, lease_until = {now} + :lease,
    misfire_at = NULL, started_at = NULL
FROM (SELECT id, row_number() OVER (ORDER BY priority DESC, due_at, id) AS pos FROM (
    SELECT id, priority, due_at FROM rota_runs INDEXED BY rota_runs_claim

-- fragment: claim_tail
-- The end of every claim: the candidates in claim order, and what a claim returns of each.
    ORDER BY priority DESC, due_at, id
    LIMIT :limit)) AS c
WHERE rota_runs.id = c.id
RETURNING rota_runs.id, task, args, kwargs, attempt, max_attempts, token, timeout, backoff, schedule,
          scheduled_for, started_at, lease_until, priority, due_at,
          EXISTS (SELECT 1 FROM rota_steps s WHERE s.run_id = rota_runs.id)

-- fragment: next_tick
-- When the ticker has work: the next schedule tick, or at once if a run made ahead passed its
-- misfire deadline unclaimed (poll_state, poll_state_in_queues, flow_poll_later).
(SELECT min(t) FROM (
     SELECT min(next_run_at) AS t FROM rota_schedules WHERE active AND NOT paused
     UNION ALL
     SELECT min(misfire_at) FROM rota_runs INDEXED BY rota_runs_misfire
     WHERE status = 'pending' AND misfire_at IS NOT NULL AND misfire_at < {now}))

-- fragment: key_room
-- A key's free slots (a limit) or room (a rate), as `free` (flow_heads, flow_heads_walk); a
-- damaged limit or rate has no room.
CASE WHEN h.kind = 'l'
     THEN (SELECT l.max FROM rota_limits l WHERE l.name = h.name AND l.max BETWEEN 1 AND 1000000)
          - (SELECT count(*) FROM rota_runs x INDEXED BY rota_runs_limit_running
             WHERE x.status = 'running' AND x.limit_name IS NOT NULL
               AND x.limit_name = h.name AND x.limit_key = h.key)
     ELSE (SELECT CASE WHEN t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400  -- else damaged: no room
                        THEN t.max - (SELECT count(*) FROM rota_rate_starts s
                           WHERE s.name = h.name AND s.key = h.key
                             AND s.started_at > {now} - t.per
                             AND s.started_at <= {now} + t.per) ELSE 0 END
           FROM rota_rates t WHERE t.name = h.name) END AS free
