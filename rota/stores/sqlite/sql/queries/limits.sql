-- SQLite queries: flow control: limits, rates and stored task declarations (design: rota/stores/sqlstore/limits.py).
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- Flow control (rota.Limit, rota.Rate; design note in rota/stores/sqlstore/limits.py). As on
-- PostgreSQL; the write transaction serialises claimers, so keys need no lock.
-- name: flow_heads
-- The keys with a due waiting run (a loose index scan: one or two probes per distinct key;
-- SQLite ranges an index by the first column of a row value only, hence two), the key
-- whose first run comes first in the claim's order first. A run with a pool's name and no key
-- (damaged) is left out: NULL sorts first, and the walk from it skipped every other key of
-- its pool (the workers' check sets it aside: flow_keyless).
WITH RECURSIVE lkeys(name, key) AS (
    SELECT * FROM (SELECT limit_name, limit_key FROM rota_runs INDEXED BY rota_runs_limit_waiting
                   WHERE status = 'pending' AND NOT held AND limit_name IS NOT NULL
                   AND limit_key IS NOT NULL  -- (a run with no key, damaged: set aside)
                   ORDER BY limit_name, limit_key LIMIT 1)
    UNION ALL
    SELECT r.limit_name, r.limit_key FROM lkeys JOIN rota_runs r ON r.id = coalesce(
        (SELECT x.id FROM rota_runs x INDEXED BY rota_runs_limit_waiting
         WHERE x.status = 'pending' AND NOT x.held AND x.limit_name IS NOT NULL
           AND x.limit_name = lkeys.name AND x.limit_key > lkeys.key
         ORDER BY x.limit_key LIMIT 1),
        (SELECT x.id FROM rota_runs x INDEXED BY rota_runs_limit_waiting
         WHERE x.status = 'pending' AND NOT x.held AND x.limit_name IS NOT NULL
           AND x.limit_name > lkeys.name
         AND x.limit_key IS NOT NULL
         ORDER BY x.limit_name, x.limit_key LIMIT 1))
),
rkeys(name, key) AS (
    SELECT * FROM (SELECT rate_name, rate_key FROM rota_runs INDEXED BY rota_runs_rate_waiting
                   WHERE status = 'pending' AND NOT held AND rate_name IS NOT NULL
                   AND rate_key IS NOT NULL
                   ORDER BY rate_name, rate_key LIMIT 1)
    UNION ALL
    SELECT r.rate_name, r.rate_key FROM rkeys JOIN rota_runs r ON r.id = coalesce(
        (SELECT x.id FROM rota_runs x INDEXED BY rota_runs_rate_waiting
         WHERE x.status = 'pending' AND NOT x.held AND x.rate_name IS NOT NULL
           AND x.rate_name = rkeys.name AND x.rate_key > rkeys.key
         ORDER BY x.rate_key LIMIT 1),
        (SELECT x.id FROM rota_runs x INDEXED BY rota_runs_rate_waiting
         WHERE x.status = 'pending' AND NOT x.held AND x.rate_name IS NOT NULL
           AND x.rate_name > rkeys.name
         AND x.rate_key IS NOT NULL
         ORDER BY x.rate_name, x.rate_key LIMIT 1))
),
heads AS (
    SELECT 'l' AS kind, k.name, k.key,
           (SELECT r.id FROM rota_runs r INDEXED BY rota_runs_limit_waiting
            WHERE r.limit_name = k.name AND r.limit_key = k.key AND r.limit_name IS NOT NULL
              AND r.status = 'pending' AND NOT r.held AND r.due_at <= {now}
              AND (:queues IS NULL OR r.queue IN (SELECT value FROM json_each(:queues))) AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = r.queue)
            ORDER BY r.priority DESC, r.due_at, r.id LIMIT 1) AS head
    FROM lkeys k
    UNION ALL
    SELECT 'r', k.name, k.key,
           (SELECT r.id FROM rota_runs r INDEXED BY rota_runs_rate_waiting
            WHERE r.rate_name = k.name AND r.rate_key = k.key AND r.rate_name IS NOT NULL
              AND r.status = 'pending' AND NOT r.held AND r.due_at <= {now}
              AND (:queues IS NULL OR r.queue IN (SELECT value FROM json_each(:queues))) AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = r.queue)
            ORDER BY r.priority DESC, r.due_at, r.id LIMIT 1)
    FROM rkeys k
),
rooms AS (
    SELECT h.kind, h.name, h.key,
           {{key_room}}
    FROM (SELECT h.kind, h.name, h.key, r.priority, r.due_at, r.id
          FROM heads h JOIN rota_runs r ON r.id = h.head
          ORDER BY r.priority DESC, r.due_at, r.id
          LIMIT -1) h  -- (not flattened: the room of each key is counted in this order, up to :n)
)
SELECT kind, name, key, free FROM rooms
WHERE free > 0 OR (kind = 'r' AND free IS NOT NULL)
LIMIT :n

-- name: flow_heads_walk
-- As the PostgreSQL one: when many keys wait, the keys of the first :m waiting runs in the
-- claim's order (rota_runs_gated_order), with their room, the key whose first run comes
-- first first; when they give fewer than :n keys, flow_heads finds the others
WITH walked AS MATERIALIZED (
    SELECT limit_name, limit_key, rate_name, rate_key, priority, due_at, id
    FROM rota_runs INDEXED BY rota_runs_gated_order
    WHERE status = 'pending' AND NOT held AND (limit_name IS NOT NULL OR rate_name IS NOT NULL)
      AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues))) AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)
    ORDER BY priority DESC, due_at, id
    LIMIT :m
),
firsts AS (
    SELECT kind, name, key, priority, due_at, id,
           row_number() OVER (PARTITION BY kind, name, key ORDER BY priority DESC, due_at, id) AS rn
    FROM (SELECT 'l' AS kind, limit_name AS name, limit_key AS key, priority, due_at, id FROM walked
          WHERE limit_name IS NOT NULL AND due_at <= {now}
          UNION ALL
          SELECT 'r', rate_name, rate_key, priority, due_at, id FROM walked
          WHERE rate_name IS NOT NULL AND due_at <= {now})
),
rooms AS (
    SELECT h.kind, h.name, h.key,
           {{key_room}}
    FROM (SELECT kind, name, key, priority, due_at, id FROM firsts WHERE rn = 1
          ORDER BY priority DESC, due_at, id
          LIMIT -1) h
)
SELECT kind, name, key, free FROM rooms
WHERE free > 0 OR (kind = 'r' AND free IS NOT NULL)
LIMIT :n

-- name: flow_due
-- Is a limited or rated run due (the probe the plain claim's transaction ends with)? For a
-- worker of every queue (flow_due_in_queues: of some).
SELECT EXISTS (SELECT 1 FROM rota_runs INDEXED BY rota_runs_gated_due
               WHERE status = 'pending' AND NOT held AND due_at <= {now}
                 AND (limit_name IS NOT NULL OR rate_name IS NOT NULL)
                 AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue))

-- name: flow_due_in_queues
SELECT EXISTS (SELECT 1 FROM rota_runs INDEXED BY rota_runs_gated_due
               WHERE status = 'pending' AND NOT held AND due_at <= {now}
                 AND (limit_name IS NOT NULL OR rate_name IS NOT NULL)
                 AND queue IN (SELECT value FROM json_each(:queues))
                 AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue))

-- name: plain_due
-- Is a run without a limit or a rate due (the plain claim's candidates)? Run with a flow claim
-- whose plain claim was asked for no run (see the PostgreSQL file).
SELECT EXISTS (SELECT 1 FROM rota_runs INDEXED BY rota_runs_claim
               WHERE status = 'pending' AND NOT held AND due_at <= {now}
                 AND (misfire_at IS NULL OR misfire_at >= {now})
                 AND NOT cancel_requested
                 AND limit_name IS NULL AND rate_name IS NULL
                 AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues))) AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue))

-- name: flow_poll_later
-- poll_state after a claim that left due limited runs waiting for a slot: the first run due later
SELECT {now},
       (SELECT min(due_at) FROM rota_runs INDEXED BY rota_runs_due
        WHERE status = 'pending' AND NOT held AND due_at > {now} AND (misfire_at IS NULL OR misfire_at >= {now})
          AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues))) AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)),
       {{next_tick}}

-- name: flow_room
SELECT e.value ->> 0, e.value ->> 1, e.value ->> 2,
       CASE WHEN e.value ->> 0 = 'l'
            THEN (SELECT l.max FROM rota_limits l WHERE l.name = e.value ->> 1 AND l.max BETWEEN 1 AND 1000000)
                 - (SELECT count(*) FROM rota_runs x INDEXED BY rota_runs_limit_running
                    WHERE x.status = 'running' AND x.limit_name IS NOT NULL
                      AND x.limit_name = e.value ->> 1 AND x.limit_key = e.value ->> 2)
            ELSE (SELECT CASE WHEN t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400  -- else damaged: no room
                               THEN t.max - (SELECT count(*) FROM rota_rate_starts s
                                  WHERE s.name = e.value ->> 1 AND s.key = e.value ->> 2
                                    AND s.started_at > {now} - t.per
                                        AND s.started_at <= {now} + t.per) ELSE 0 END
                  FROM rota_rates t WHERE t.name = e.value ->> 1) END
FROM json_each(:keys) AS e

-- name: flow_waiting_limit
-- (past its misfire deadline: left for the tick pass, see the PostgreSQL file)
SELECT id, limit_name, limit_key, rate_name, rate_key FROM rota_runs INDEXED BY rota_runs_limit_waiting
WHERE limit_name = :name AND limit_key = :key AND limit_name IS NOT NULL
  AND status = 'pending' AND NOT held AND due_at <= {now}
  AND (misfire_at IS NULL OR misfire_at >= {now})
  AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues))) AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)
ORDER BY priority DESC, due_at, id
LIMIT :n

-- name: flow_waiting_rate
-- (past its misfire deadline: left for the tick pass, see the PostgreSQL file)
SELECT id, limit_name, limit_key, rate_name, rate_key FROM rota_runs INDEXED BY rota_runs_rate_waiting
WHERE rate_name = :name AND rate_key = :key AND rate_name IS NOT NULL
  AND status = 'pending' AND NOT held AND due_at <= {now}
  AND (misfire_at IS NULL OR misfire_at >= {now})
  AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues))) AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)
ORDER BY priority DESC, due_at, id
LIMIT :n

-- name: flow_take
-- transition: claim
-- :ids in the claim's order: the first :start start, the rest are held (as claim's);
-- tokens in id order. The misfire deadline of a tick made ahead goes, as in claim: the tick
-- was taken (a retry of it is no misfire).
UPDATE rota_runs
SET status = 'running', owner = :owner, token = :token + c.rank,
    attempt = attempt + (c.pos < :start AND attempt < 2147483647), rate_waited = 0, misfire_at = NULL,
    started_at = CASE WHEN c.pos < :start THEN {now} END, lease_until = {now} + :lease
FROM (SELECT value AS id, key AS pos, row_number() OVER (ORDER BY value) - 1 AS rank FROM json_each(:ids)) AS c
WHERE rota_runs.id = c.id AND rota_runs.status = 'pending'
RETURNING rota_runs.id, task, args, kwargs, attempt, max_attempts, token, timeout, backoff, schedule,
          scheduled_for, started_at, lease_until, priority, due_at,
          EXISTS (SELECT 1 FROM rota_steps s WHERE s.run_id = rota_runs.id)

-- name: flow_started
INSERT INTO rota_rate_starts (name, key, started_at)
SELECT rate_name, rate_key, started_at FROM rota_runs
WHERE id IN (SELECT value FROM json_each(:ids)) AND rate_name IS NOT NULL

-- name: flow_bump
-- transition: rate_wait
-- (a damaged max or per bumps nothing; a damaged start, later than a window ahead, is not counted)
WITH t AS (SELECT max, per FROM rota_rates
           WHERE name = :name AND max BETWEEN 1 AND 1000000 AND per BETWEEN 0.001 AND 31622400),
w AS (SELECT s.started_at FROM rota_rate_starts s
      WHERE s.name = :name AND s.key = :key AND s.started_at > {now} - (SELECT per FROM t)
        AND s.started_at <= {now} + (SELECT per FROM t)),
o AS (SELECT started_at + (SELECT per FROM t) AS at FROM w ORDER BY started_at
      LIMIT 1 OFFSET max(coalesce((SELECT count(*) FROM w) - (SELECT max FROM t), 0), 0))
UPDATE rota_runs SET due_at = o.at, rate_waited = 1 FROM o
WHERE rota_runs.rate_name = :name AND rota_runs.rate_key = :key AND rota_runs.rate_name IS NOT NULL
  AND rota_runs.status = 'pending' AND NOT rota_runs.held AND rota_runs.due_at <= {now}
  AND rota_runs.due_at < o.at
  AND (SELECT count(*) FROM w) >= (SELECT max FROM t)

-- name: flow_prune
-- (also the damaged starts, later than a window ahead; none while the rate's per is damaged)
DELETE FROM rota_rate_starts
WHERE name = :name AND key = :key
  AND (started_at <= {now} - (SELECT per FROM rota_rates WHERE name = :name AND per BETWEEN 0.001 AND 31622400)
       OR started_at > {now} + (SELECT per FROM rota_rates WHERE name = :name AND per BETWEEN 0.001 AND 31622400))

-- name: flow_keyless
-- transition: keyless
-- Waiting runs with the name of a stored limit or rate and no key (damaged: no claim can take
-- one), each ended failed as damaged (rota/quarantine.py), a worker's check now and then.
-- Found per pool through rota_runs_limit_waiting and rota_runs_rate_waiting (name, NULL key).
UPDATE rota_runs
SET status = 'failed', finished_at = {now}, error = :error
WHERE id IN (SELECT id FROM (
        SELECT r.id FROM rota_limits l JOIN rota_runs r ON r.limit_name = l.name
        WHERE r.limit_key IS NULL AND r.status = 'pending' AND NOT r.held AND r.limit_name IS NOT NULL
        UNION ALL
        SELECT r.id FROM rota_rates t JOIN rota_runs r ON r.rate_name = t.name
        WHERE r.rate_key IS NULL AND r.status = 'pending' AND NOT r.held AND r.rate_name IS NOT NULL) AS k
      LIMIT :limit)
  AND status = 'pending' AND NOT held
RETURNING id, task

-- name: flow_any
SELECT (SELECT count(*) FROM rota_limits) + (SELECT count(*) FROM rota_rates)

-- name: flow_upsert_limit
INSERT INTO rota_limits (name, max, updated_at) VALUES (:name, :max, {now})
ON CONFLICT (name) DO UPDATE SET max = excluded.max, updated_at = excluded.updated_at

-- name: flow_rate_reopen
-- transition: rate_reopen
-- Before a deploy stores a rate with a new max or per: the runs waiting for its old window
-- (rate_waited, set by flow_bump, which moves only due runs) are due again, and the next
-- claim judges them by the new rate.
UPDATE rota_runs SET due_at = {now}, rate_waited = 0
WHERE rate_name = :name AND rate_waited AND status = 'pending' AND NOT held
  AND EXISTS (SELECT 1 FROM rota_rates t WHERE t.name = :name AND (t.max <> :max OR t.per <> :per))

-- name: flow_upsert_rate
INSERT INTO rota_rates (name, max, per, updated_at) VALUES (:name, :max, :per, {now})
ON CONFLICT (name) DO UPDATE SET max = excluded.max, per = excluded.per, updated_at = excluded.updated_at

-- name: flow_limits
-- each limit with its running and waiting runs and its keys (all keys), and its keys whose
-- running runs fill its max (a key at its max: its next run waits)
SELECT l.name, l.max,
       (SELECT count(*) FROM rota_runs r WHERE r.limit_name = l.name AND r.status = 'running'),
       (SELECT count(*) FROM rota_runs r WHERE r.limit_name = l.name AND r.status = 'pending'),
       (SELECT count(DISTINCT limit_key) FROM rota_runs r WHERE r.limit_name = l.name AND r.status IN ('pending', 'running')),
       (SELECT count(*) FROM (SELECT 1 FROM rota_runs r WHERE r.limit_name = l.name AND r.status = 'running'
                              GROUP BY r.limit_key HAVING count(*) >= l.max))
FROM rota_limits l ORDER BY l.name

-- name: flow_rates
-- each rate with its starts in the window and its waiting runs (all keys), and its keys whose
-- starts in the window reach its max
SELECT t.name, t.max, t.per,
       (SELECT count(*) FROM rota_rate_starts s WHERE s.name = t.name AND s.started_at > {now} - t.per
          AND s.started_at <= {now} + t.per AND t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400),
       (SELECT count(*) FROM rota_runs r WHERE r.rate_name = t.name AND r.status = 'pending'),
       (SELECT count(DISTINCT rate_key) FROM rota_runs r WHERE r.rate_name = t.name AND r.status = 'pending'),
       (SELECT count(*) FROM (SELECT 1 FROM rota_rate_starts s WHERE s.name = t.name AND s.started_at > {now} - t.per
          AND s.started_at <= {now} + t.per AND t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400
          GROUP BY s.key HAVING count(*) >= t.max))
FROM rota_rates t ORDER BY t.name

-- name: flow_damaged
-- Every stored limit, rate and task spec, for a worker's check for damaged ones (small tables:
-- one row per pool or task; rota/stores/flow_damage.py judges them)
SELECT 'l', name, max, NULL, NULL FROM rota_limits
UNION ALL
SELECT 'r', name, max, per, NULL FROM rota_rates
UNION ALL
SELECT 's', task, NULL, NULL, spec FROM rota_task_flow

-- ==== stored task declarations (migration 0011, rota/limit_specs.py) ======================
-- name: flow_put_spec
INSERT INTO rota_task_flow (task, spec, updated_at) VALUES (:task, :spec, {now})
ON CONFLICT (task) DO UPDATE SET spec = excluded.spec, updated_at = excluded.updated_at
WHERE rota_task_flow.spec IS NOT excluded.spec

-- name: flow_drop_specs
DELETE FROM rota_task_flow WHERE task IN (SELECT value FROM json_each(:tasks))

-- name: flow_spec
SELECT spec FROM rota_task_flow WHERE task = :task

-- name: flow_unresolved
-- (a schedule's tick, not a backfill: its tick, else NULL; see the PostgreSQL file)
SELECT id, task, args, kwargs, schedule, CASE WHEN schedule IS NOT NULL AND NOT backfill THEN tick END
FROM rota_runs
WHERE limit_name = :unresolved AND status = 'pending' AND NOT held
  AND task IN (SELECT value FROM json_each(:tasks))
ORDER BY limit_name, limit_key, priority DESC, due_at, id
LIMIT :n

-- name: flow_resolve
-- transition: keyed
UPDATE rota_runs
SET limit_name = :limit_name, limit_key = :limit_key, rate_name = :rate_name, rate_key = :rate_key
WHERE id = :id AND status = 'pending' AND limit_name = :unresolved

-- name: flow_skip_unkeyed
-- transition: skip_unkeyed
UPDATE rota_runs
SET status = 'skipped', error = :error, finished_at = {now},
    limit_name = NULL, limit_key = NULL, rate_name = NULL, rate_key = NULL
WHERE id = :id AND status = 'pending' AND limit_name = :unresolved
RETURNING id

-- name: flow_set_gates
-- transition: retry
UPDATE rota_runs
SET limit_name = :limit_name, limit_key = :limit_key, rate_name = :rate_name, rate_key = :rate_key
WHERE id = :id AND status = 'pending'

-- name: flow_specs_table
SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'rota_task_flow'

-- name: flow_unknown_limits
-- The names of limits that pending runs wait under and no stored limit defines (undeclared:
-- a typo in a client's Limit(name=...), a run made before any worker declared the limit, or a
-- row deleted by hand), with how many runs wait under each: they wait (never unlimited) until
-- a worker that declares the limit stores it (rota/undeclared.py). `rota limits` and
-- /api/limits list them; a worker's check (about once a minute) logs each name, rate-limited.
SELECT r.limit_name, count(*) FROM rota_runs r
WHERE r.status = 'pending' AND NOT r.held AND r.limit_name IS NOT NULL AND r.limit_name <> :unresolved
  AND NOT EXISTS (SELECT 1 FROM rota_limits l WHERE l.name = r.limit_name)
GROUP BY r.limit_name ORDER BY r.limit_name
LIMIT 100

-- name: flow_unknown_rates
-- As flow_unknown_limits, for rates: the names pending runs are rated under and no stored rate
-- defines, with how many runs wait under each.
SELECT r.rate_name, count(*) FROM rota_runs r
WHERE r.status = 'pending' AND NOT r.held AND r.rate_name IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM rota_rates t WHERE t.name = r.rate_name)
GROUP BY r.rate_name ORDER BY r.rate_name
LIMIT 100

-- name: flow_undeclared_of
-- A pending run's limit and rate names that no stored limit or rate defines (NULL: declared, or
-- none): what Run.waiting says it waits for (App.get_run of a pending run, the run's page).
SELECT CASE WHEN r.limit_name <> :unresolved
             AND NOT EXISTS (SELECT 1 FROM rota_limits l WHERE l.name = r.limit_name) THEN r.limit_name END,
       CASE WHEN NOT EXISTS (SELECT 1 FROM rota_rates t WHERE t.name = r.rate_name) THEN r.rate_name END
FROM rota_runs r
WHERE r.id = :id AND r.status = 'pending' AND (r.limit_name IS NOT NULL OR r.rate_name IS NOT NULL)

-- name: flow_unresolved_count
SELECT count(*) FROM rota_runs
WHERE limit_name = :unresolved AND status = 'pending' AND NOT held
