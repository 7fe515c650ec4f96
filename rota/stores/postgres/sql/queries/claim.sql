-- PostgreSQL queries: the claim, starts, heartbeats and what a polling worker reads.
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- name: claim
-- transition: claim
-- One fencing token per claimed run (nextval per row), so ctx.token fences one attempt.
-- The first `start` runs in claim order are started by the claim (the attempt counted,
-- started_at set); the rest are held: claimed, not started (started_at NULL, the attempt
-- not counted until their start). A run whose cancellation was requested is never claimed.
-- The update finds each candidate by the address (ctid) of the row version the subquery
-- locked: a TID scan, not a second walk down the primary key, and no join to plan (the
-- LIMIT changes from call to call, so PostgreSQL plans this statement every time). No one
-- else can update a row we locked; a candidate whose newest version our snapshot cannot see
-- (changed and committed just before we locked it) stays pending for the next claim.
-- The walk starts at `from` in the claim index: a busy worker's claim skips what it claimed
-- before, whose dead row versions a transaction held open elsewhere keeps in the index (see
-- rota.stores.postgres.claim_from; the front: FRONT). Sent after claim_plan.
{{claim_candidates({now}, , AND ((-priority::bigint), due_at, id) > (%(from_p)s::bigint, to_timestamp(%(from_due)s::float8), %(from_id)s::bigint))}}
{{claim_update}}

-- name: claim_plan
-- Before a claim, for the rest of its transaction: no sort. The claim's only plan without one
-- walks rota_runs_claim_from from `from`; PostgreSQL's statistics count live rows only, so
-- with few runs pending it would rather fetch every due run through rota_runs_due and sort
-- them (a handful, it guesses), and under a transaction held open elsewhere that fetch
-- visits the dead row version of every run claimed since: measured, the claim's median
-- doubled within a minute (bench/xmin_hold.py).
SELECT set_config('enable_sort', 'off', true)

-- name: claim_in_queues
-- transition: claim
-- as claim, for some queues only
{{claim_candidates({now}, AND queue = ANY(%(queues)s::text[]), AND ((-priority::bigint), due_at, id) > (%(from_p)s::bigint, to_timestamp(%(from_due)s::float8), %(from_id)s::bigint))}}
{{claim_update}}

-- name: claim_ahead
-- transition: claim_ahead
-- The runs due within %(ahead)s seconds (a tick made ahead, a delay), claimed held by an idle
-- worker just before their time, to start each at its due time on the worker's clock: the
-- claim's round trip is taken out of a due run's start. Held (started_at NULL, the attempt
-- not counted until its start); plain runs only (limited and rated runs are claimed at their
-- time, by the flow claim); never one queued, waiting on parents or asked to cancel.
{{claim_candidates({now} + make_interval(secs => %(ahead)s), , )}}
{{claim_ahead_update}}

-- name: claim_ahead_in_queues
-- transition: claim_ahead
-- as claim_ahead, for some queues only
{{claim_candidates({now} + make_interval(secs => %(ahead)s), AND queue = ANY(%(queues)s::text[]), )}}
{{claim_ahead_update}}

-- name: start
-- transition: start
-- Held runs whose handlers started (`ago` seconds ago): the attempt counted, started_at set.
-- Fenced by the token; refused (not returned) when the run's cancellation was requested or
-- it started already: the worker checks a refused run at once (and stops its handler).
UPDATE rota_runs r
SET attempt = r.attempt + (r.attempt < 2147483647)::int, started_at = {now} - make_interval(secs => v.ago)
FROM (SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token, (e->>2)::float8 AS ago
      FROM json_array_elements(%(rows)s::json) AS e) AS v
WHERE r.id = ANY(ARRAY(SELECT (e->>0)::bigint FROM json_array_elements(%(rows)s::json) AS e))
  AND r.id = v.id AND r.token = v.token AND (r.status = 'running') IS TRUE AND r.started_at IS NULL
  AND NOT r.cancel_requested
RETURNING r.id

-- name: heartbeat
-- transition: heartbeat
UPDATE rota_runs r SET lease_until = {now} + make_interval(secs => %(lease)s)
FROM (SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token
      FROM json_array_elements(%(rows)s::json) AS e) AS v
WHERE r.id = ANY(ARRAY(SELECT (e->>0)::bigint FROM json_array_elements(%(rows)s::json) AS e))
  AND r.id = v.id AND r.token = v.token AND (r.status = 'running') IS TRUE
RETURNING r.id, r.cancel_requested

-- name: poll_state
-- (now, when the next claimable run is due, when the ticker has work: the next schedule
-- tick, or at once if a run made ahead passed its misfire deadline unclaimed)
SELECT {now},
       (SELECT min(due_at) FROM rota_runs
        WHERE status = 'pending' AND NOT held AND (misfire_at IS NULL OR misfire_at >= {now})
          AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)),
       least((SELECT min(next_run_at) FROM rota_schedules WHERE active AND NOT paused),
             (SELECT min(misfire_at) FROM rota_runs
              WHERE status = 'pending' AND misfire_at IS NOT NULL AND misfire_at < {now}))

-- name: poll_state_in_queues
SELECT {now},
       (SELECT min(due_at) FROM rota_runs
        WHERE status = 'pending' AND NOT held AND (misfire_at IS NULL OR misfire_at >= {now})
          AND queue = ANY(%(queues)s::text[])
          AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)),
       least((SELECT min(next_run_at) FROM rota_schedules WHERE active AND NOT paused),
             (SELECT min(misfire_at) FROM rota_runs
              WHERE status = 'pending' AND misfire_at IS NOT NULL AND misfire_at < {now}))

-- name: now
SELECT {now}
