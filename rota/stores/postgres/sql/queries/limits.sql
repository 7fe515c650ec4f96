-- PostgreSQL queries: flow control: limits, rates and stored task declarations (design: rota/stores/sqlstore/limits.py).
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- Flow control (rota.Limit, rota.Rate; design note in rota/stores/sqlstore/limits.py). A limit key's
-- free slots: its limit's max less its running runs; a rate key's room: its rate's max less
-- its starts in the last `per` seconds. A key whose limit or rate no worker declared yet has
-- neither (NULL): its runs wait.
-- name: flow_heads
-- (`count(r.id)`: an index scan that visits the rows, which marks the index entries of
-- row versions gone as dead; an index-only scan never does, and would walk every run that
-- ever ran on the key until VACUUM: a count growing with the drain.)
-- The keys with a due waiting run, the key whose first run comes first in the claim's order
-- first, with their free slots or room as this statement's snapshot sees them (flow_room
-- counts again once they are locked). The keys are found by a loose index scan (one probe
-- per distinct key of the waiting runs, however many runs wait). Each key is taken with a
-- transaction-level advisory try-lock, one at a time up to %(n)s keys: a key another
-- claimer holds is skipped (as SKIP LOCKED skips a row), so concurrent claimers share the
-- keys and never wait or deadlock. A full rate key is taken too: its waiting runs are then
-- made due when its window opens. (`OFFSET 0` in the room's subquery: without it the planner
-- inlines it, and counts each key's room twice, once for the filter and once for the output.)
-- Each key locked is also noted, in lock order, in the transaction's setting
-- `rota.flow_keys` ("[kind, name, key]," each): a flow_take_limits sent in the same pipeline
-- without keys reads them there, so the flow claim needs no round trip of its own.
WITH RECURSIVE {{waiting_keys}},
heads AS MATERIALIZED (
    {{key_heads}}
),
room AS (
    SELECT h.kind, h.name, h.key, h.priority, h.due_at, h.id FROM heads h
    ORDER BY h.priority DESC, h.due_at, h.id
    OFFSET 0  -- keeps the filter below above the sort: evaluated key by key, up to the LIMIT
)
SELECT kind, name, key, free FROM room h CROSS JOIN LATERAL (
    {{key_room}}
WHERE CASE WHEN f.free > 0 OR (h.kind = 'r' AND f.free IS NOT NULL)  -- room first, then the lock
           THEN CASE WHEN {{take_key}}
                     THEN set_config('rota.flow_keys', coalesce(current_setting('rota.flow_keys', true), '')
                                     || json_build_array(h.kind, h.name, h.key)::text || ',', true) IS NOT NULL
                     ELSE false END
           ELSE false END
LIMIT %(n)s

-- name: flow_walk_plan
-- Before flow_heads_walk, for the rest of the flow claim's transaction: no bitmap scans. On
-- a table not analyzed yet (a backlog just enqueued) the planner guesses a handful of
-- waiting runs and would fetch and sort them all (measured: 17 ms for 20,000) rather than
-- read the first ones from rota_runs_gated_order (2 ms).
SELECT set_config('enable_bitmapscan', 'off', true)

-- name: flow_heads_walk
-- As flow_heads, for a claim after one that took as many keys as it may (many keys wait):
-- the keys with a due waiting run, the key whose first run comes first in the claim's order
-- first, with their free slots or room as this statement's snapshot sees them (counted
-- again once they are locked: flow_take_limits, flow_room). Each key is taken with a
-- transaction-level advisory try-lock, one at a time up to %(n)s keys: a key another
-- claimer holds is skipped (as SKIP LOCKED skips a row), so concurrent claimers share the
-- keys and never wait or deadlock. A full rate key is taken too: its waiting runs are then
-- made due when its window opens. The room of a key is counted only when its turn comes.
-- The keys come first from the first %(m)s waiting runs in the claim's order (`near`:
-- rota_runs_gated_order, whatever the number of keys). Only when those runs were not all
-- the waiting ones and gave fewer than %(n)s keys, the keys beyond them are found by a
-- loose index scan (`far`: one probe per distinct key of the waiting runs, however many
-- runs wait), so runs of full keys at the head never keep the others waiting.
WITH RECURSIVE walked AS MATERIALIZED (  -- (due or not: the index gives the order, no sort)
    SELECT r.limit_name, r.limit_key, r.rate_name, r.rate_key, r.priority, r.due_at, r.id FROM rota_runs r
    WHERE r.status = 'pending' AND NOT r.held AND (r.limit_name IS NOT NULL OR r.rate_name IS NOT NULL)
      AND (%(queues)s::text[] IS NULL OR r.queue = ANY(%(queues)s::text[])) AND coalesce(r.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
    ORDER BY r.priority DESC, r.due_at, r.id
    LIMIT %(m)s
),
near AS MATERIALIZED (
    SELECT DISTINCT ON (kind, name, key) kind, name, key, priority, due_at, id FROM (
        SELECT 'l' AS kind, limit_name AS name, limit_key AS key, priority, due_at, id FROM walked
        WHERE limit_name IS NOT NULL AND due_at <= {now}
        UNION ALL
        SELECT 'r', rate_name, rate_key, priority, due_at, id FROM walked
        WHERE rate_name IS NOT NULL AND due_at <= {now}) w
    ORDER BY kind, name, key, priority DESC, due_at, id
),
{{waiting_keys}},
far AS MATERIALIZED (
    {{key_heads}}
),
taken AS MATERIALIZED (
    SELECT h.kind, h.name, h.key, f.free FROM (
        SELECT * FROM near ORDER BY priority DESC, due_at, id
        OFFSET 0) h  -- keeps the filter above the sort: evaluated key by key, up to the LIMIT
    CROSS JOIN LATERAL (
    {{key_room}}
    WHERE CASE WHEN f.free > 0 OR (h.kind = 'r' AND f.free IS NOT NULL)  -- room first, then the lock
          THEN {{take_key}}
          ELSE false END
    LIMIT %(n)s
)
SELECT kind, name, key, free FROM taken
UNION ALL
(SELECT h.kind, h.name, h.key, f.free FROM (
     SELECT * FROM far x
     WHERE NOT EXISTS (SELECT 1 FROM near y WHERE y.kind = x.kind AND y.name = x.name AND y.key = x.key)
     ORDER BY priority DESC, due_at, id
     OFFSET 0) h
 CROSS JOIN LATERAL (
    {{key_room}}
 WHERE (SELECT count(*) FROM walked) >= %(m)s AND (SELECT count(*) FROM taken) < %(n)s
   AND CASE WHEN f.free > 0 OR (h.kind = 'r' AND f.free IS NOT NULL)  -- room first, then the lock
          THEN {{take_key}}
          ELSE false END
 LIMIT greatest(%(n)s - (SELECT count(*) FROM taken), 0))

-- name: flow_due
-- Is a limited or rated run due (the probe the plain claim's transaction ends with)? For a
-- worker of every queue. No "queues IS NULL OR ..." test: with one, PostgreSQL's generic plan
-- of the prepared statement costs more than a custom one, so it planned it again at every
-- call (0.15 ms per flow claim, measured, against 0.03 to run it); flow_due_in_queues has it.
-- The first waiting run in due order, in a subquery (an EXISTS drops its ORDER BY and LIMIT):
-- as a plain EXISTS, once the statistics said most rows wait, the planner scanned the table
-- and read every finished run in front of the waiting ones (1-2 ms per flow claim in a
-- drain, growing with the history kept).
SELECT EXISTS (SELECT 1 FROM (
    SELECT 1 FROM rota_runs
    WHERE status = 'pending' AND NOT held AND due_at <= {now}
      AND (limit_name IS NOT NULL OR rate_name IS NOT NULL)
      AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
    ORDER BY due_at
    LIMIT 1) AS first)

-- name: flow_due_in_queues
-- flow_due for a worker of some queues.
SELECT EXISTS (SELECT 1 FROM (
    SELECT 1 FROM rota_runs
    WHERE status = 'pending' AND NOT held AND due_at <= {now}
      AND (limit_name IS NOT NULL OR rate_name IS NOT NULL)
      AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
      AND queue = ANY(%(queues)s::text[])
    ORDER BY due_at
    LIMIT 1) AS first)

-- name: plain_due
-- Is a run without a limit or a rate due (the plain claim's candidates)? Sent with a flow
-- claim whose plain claim was asked for no run (the limits took every slot asked for), so
-- the worker knows whether to hold runs ahead (rota/stores/sqlstore/limits.py, limits_full). The
-- claim's own index and order: it stops at the first candidate, as the claim would.
SELECT EXISTS (SELECT 1 FROM (
    SELECT 1 FROM rota_runs
    WHERE status = 'pending' AND NOT held AND due_at <= {now}
      AND (misfire_at IS NULL OR misfire_at >= {now})
      AND limit_name IS NULL AND rate_name IS NULL AND NOT cancel_requested
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[])) AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
    ORDER BY (-priority::bigint), due_at, id
    LIMIT 1) AS first)

-- name: flow_poll_later
-- poll_state after a claim that left due limited runs waiting for a slot: the next run due
-- is the first due later (a range of rota_runs_due from now: the waiting runs before it
-- are not walked; a freed slot wakes the workers itself)
SELECT {now},
       (SELECT min(due_at) FROM rota_runs
        WHERE status = 'pending' AND NOT held AND due_at > {now} AND (misfire_at IS NULL OR misfire_at >= {now})
          AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[])) AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)),
       least((SELECT min(next_run_at) FROM rota_schedules WHERE active AND NOT paused),
             (SELECT min(misfire_at) FROM rota_runs
              WHERE status = 'pending' AND misfire_at IS NOT NULL AND misfire_at < {now}))

-- name: flow_room
-- The free slots or room of the keys this transaction locked (a statement after the lock,
-- so it sees every claim committed before the lock was granted).
SELECT e->>0, e->>1, e->>2,
       CASE WHEN e->>0 = 'l'
            THEN (SELECT l.max FROM rota_limits l WHERE l.name = e->>1 AND l.max BETWEEN 1 AND 1000000)
                 - (SELECT count(r.id) FROM rota_runs r WHERE r.status = 'running'
                    AND r.limit_name = e->>1 AND r.limit_key = e->>2)
            ELSE (SELECT CASE WHEN t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400  -- else damaged: no room
                               THEN t.max - (SELECT count(*) FROM rota_rate_starts s
                                  WHERE s.name = e->>1 AND s.key = e->>2
                                    AND s.started_at > {now} - make_interval(secs => t.per)
                                        AND s.started_at <= {now} + make_interval(secs => t.per)) ELSE 0 END
                  FROM rota_rates t WHERE t.name = e->>1) END
FROM json_array_elements(%(keys)s::json) AS e

-- name: flow_waiting_limit
-- A limit key's first due waiting runs, in the claim's order. A tick made ahead whose misfire
-- deadline passed while it waited is left for the tick pass to judge, as in claim (a filter
-- on the rows the scan reads anyway, for their rate: the same index, nothing more read).
SELECT id, limit_name, limit_key, rate_name, rate_key FROM rota_runs
WHERE limit_name = %(name)s AND limit_key = %(key)s AND limit_name IS NOT NULL
  AND status = 'pending' AND NOT held AND due_at <= {now}
  AND (misfire_at IS NULL OR misfire_at >= {now})
  AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[])) AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
ORDER BY priority DESC, due_at, id
LIMIT %(n)s

-- name: flow_waiting_rate
-- A rate key's first due waiting runs, in the claim's order (past their misfire deadline:
-- left for the tick pass, as in flow_waiting_limit)
SELECT id, limit_name, limit_key, rate_name, rate_key FROM rota_runs
WHERE rate_name = %(name)s AND rate_key = %(key)s AND rate_name IS NOT NULL
  AND status = 'pending' AND NOT held AND due_at <= {now}
  AND (misfire_at IS NULL OR misfire_at >= {now})
  AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[])) AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
ORDER BY priority DESC, due_at, id
LIMIT %(n)s

-- name: flow_take
-- transition: claim
-- as claim, for the runs the flow claim chose (their keys locked by this transaction). The
-- start is stamped with this statement's time, not the transaction's: after the commit that
-- freed the slot (flow_room saw it), so started_at never precedes the finished_at it follows.
UPDATE rota_runs r
SET status = 'running', owner = %(owner)s, token = nextval('rota_token_seq'),
    attempt = r.attempt + (r.attempt < 2147483647)::int,  -- (at the maximum: damaged; see claim)
    rate_waited = false, misfire_at = NULL,  -- as in claim: a tick taken (its retry is no misfire)
    started_at = coalesce(%(now)s::timestamptz, statement_timestamp()),
    lease_until = coalesce(%(now)s::timestamptz, statement_timestamp()) + make_interval(secs => %(lease)s)
WHERE r.id = ANY(ARRAY(SELECT e::bigint FROM json_array_elements_text(%(ids)s::json) AS e))
  AND r.status = 'pending'
RETURNING {{claimed_columns}}

-- name: flow_take_limits
-- transition: claim
-- The flow claim's second statement when every key taken is a limit key (no rate): after
-- the locks (flow_heads), in one statement, each key's free slots (counted again: this
-- statement's snapshot sees every claim committed before the lock was granted), its first
-- waiting runs up to them, and their claim, keys in flow_heads' order, at most %(limit)s in
-- all. A waiting run that also has a rate is left for a flow claim that locks its rate key
-- (it uses its slot quota here, as in the general path). The first %(start)s start, the rest
-- are held (as claim's: held runs count against their limit too). Stamped as flow_take.
-- Without %(keys)s (NULL), the limit keys flow_heads locked earlier in this transaction.
WITH keys AS MATERIALIZED (
    SELECT k.ord, k.e->>1 AS name, k.e->>2 AS key,
           (SELECT l.max FROM rota_limits l WHERE l.name = k.e->>1 AND l.max BETWEEN 1 AND 1000000)
           - (SELECT count(r.id) FROM rota_runs r WHERE r.status = 'running'
              AND r.limit_name = k.e->>1 AND r.limit_key = k.e->>2) AS free
    FROM json_array_elements(coalesce(%(keys)s::json,  -- none given: those flow_heads locked (its note)
             ('[' || rtrim(coalesce(current_setting('rota.flow_keys', true), ''), ',') || ']')::json))
         WITH ORDINALITY AS k(e, ord)
    WHERE k.e->>0 = 'l'  -- (a rate key flow_heads locked is the general path's: left to the next claim)
),
picked AS MATERIALIZED (
    SELECT w.ctid, row_number() OVER (ORDER BY k.ord, w.rn) AS pos FROM keys k CROSS JOIN LATERAL (
        SELECT r.ctid, r.rate_name, row_number() OVER () AS rn FROM (
            SELECT r.ctid, r.rate_name FROM rota_runs r
            WHERE r.limit_name = k.name AND r.limit_key = k.key AND r.limit_name IS NOT NULL
              AND r.status = 'pending' AND NOT r.held AND r.due_at <= {now}
              AND (r.misfire_at IS NULL OR r.misfire_at >= {now})  -- as flow_waiting_limit
              AND (%(queues)s::text[] IS NULL OR r.queue = ANY(%(queues)s::text[])) AND coalesce(r.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
            ORDER BY r.priority DESC, r.due_at, r.id
            LIMIT greatest(coalesce(k.free, 0), 0)) r) w
    WHERE w.rate_name IS NULL
    ORDER BY k.ord, w.rn
    LIMIT %(limit)s
),
-- The row versions to update, by address (a TID scan, as in claim). Joined to `picked`
-- by id instead, the planner trusted the statistics of the table before a burst (a handful
-- of pending runs) and hashed or walked every pending run on each claim (measured: 5.4 ms
-- per call at 20,000 waiting, against 1.4 ms). A run changed and committed since this
-- statement's snapshot (a cancel request) has a new address: it is left pending, not taken
-- (so no status test here: one would offer the planner the active runs' index again).
ids AS MATERIALIZED (
    SELECT array_agg(ctid) AS every, array_agg(ctid) FILTER (WHERE pos <= %(start)s) AS starts FROM picked
)
UPDATE rota_runs r
SET status = 'running', owner = %(owner)s, token = nextval('rota_token_seq'),
    attempt = CASE WHEN r.ctid = ANY((SELECT starts FROM ids)::tid[]) AND r.attempt < 2147483647
                   THEN r.attempt + 1 ELSE r.attempt END,  -- (see claim)
    started_at = CASE WHEN r.ctid = ANY((SELECT starts FROM ids)::tid[])
                      THEN coalesce(%(now)s::timestamptz, statement_timestamp()) END,
    misfire_at = NULL,  -- as in claim
    lease_until = coalesce(%(now)s::timestamptz, statement_timestamp()) + make_interval(secs => %(lease)s)
WHERE r.ctid = ANY((SELECT every FROM ids)::tid[])
RETURNING {{claimed_columns}}

-- name: flow_started
-- the starts of rated runs just claimed, in their windows' log
INSERT INTO rota_rate_starts (name, key, started_at)
SELECT rate_name, rate_key, started_at FROM rota_runs
WHERE id = ANY(ARRAY(SELECT e::bigint FROM json_array_elements_text(%(ids)s::json) AS e))
  AND rate_name IS NOT NULL

-- name: flow_bump
-- transition: rate_wait
-- A full rate key (locked by this transaction): its due waiting runs become due when the
-- window opens, i.e. when the start that makes it full leaves it, so workers sleep till then.
-- A rate whose stored max or per is out of range (damaged: rota/quarantine.py) bumps nothing;
-- a start logged later than a window ahead of now (damaged) is not counted.
WITH t AS (SELECT max, make_interval(secs => per) AS per FROM rota_rates
           WHERE name = %(name)s AND max BETWEEN 1 AND 1000000 AND per BETWEEN 0.001 AND 31622400),
w AS (SELECT s.started_at FROM rota_rate_starts s
      WHERE s.name = %(name)s AND s.key = %(key)s AND s.started_at > {now} - (SELECT per FROM t)
        AND s.started_at <= {now} + (SELECT per FROM t)),
o AS (SELECT started_at + (SELECT per FROM t) AS at FROM w ORDER BY started_at
      OFFSET greatest((SELECT count(*) FROM w) - (SELECT max FROM t), 0) LIMIT 1)
UPDATE rota_runs r SET due_at = o.at, rate_waited = true FROM o
WHERE r.rate_name = %(name)s AND r.rate_key = %(key)s AND r.rate_name IS NOT NULL
  AND r.status = 'pending' AND NOT r.held AND r.due_at <= {now} AND r.due_at < o.at
  AND (SELECT count(*) FROM w) >= (SELECT max FROM t)

-- name: flow_prune
-- a locked rate key's starts that left the window, and those logged later than a window ahead
-- of now (damaged: no claim logs a start in the future); none while the rate's per is out of
-- range (damaged: its window is unknown)
DELETE FROM rota_rate_starts s USING (
    SELECT make_interval(secs => per) AS per FROM rota_rates
    WHERE name = %(name)s AND per BETWEEN 0.001 AND 31622400) t
WHERE s.name = %(name)s AND s.key = %(key)s
  AND (s.started_at <= {now} - t.per OR s.started_at > {now} + t.per)

-- name: flow_keyless
-- transition: keyless
-- Waiting runs with the name of a stored limit or rate and no key (damaged: no claim can take
-- one), each ended failed as damaged (rota/quarantine.py), a worker's check now and then.
-- Found per pool through rota_runs_limit_waiting and rota_runs_rate_waiting (name, NULL key).
UPDATE rota_runs
SET status = 'failed', finished_at = {now}, error = %(error)s
WHERE id IN (SELECT id FROM (
        SELECT r.id FROM rota_limits l JOIN rota_runs r ON r.limit_name = l.name
        WHERE r.limit_key IS NULL AND r.status = 'pending' AND NOT r.held AND r.limit_name IS NOT NULL
        UNION ALL
        SELECT r.id FROM rota_rates t JOIN rota_runs r ON r.rate_name = t.name
        WHERE r.rate_key IS NULL AND r.status = 'pending' AND NOT r.held AND r.rate_name IS NOT NULL) AS k
      LIMIT %(limit)s)
  AND status = 'pending' AND NOT held
RETURNING id, task

-- name: flow_any
SELECT (SELECT count(*) FROM rota_limits) + (SELECT count(*) FROM rota_rates)

-- name: flow_upsert_limit
INSERT INTO rota_limits (name, max, updated_at) VALUES (%(name)s, %(max)s, {now})
ON CONFLICT (name) DO UPDATE SET max = excluded.max, updated_at = excluded.updated_at

-- name: flow_rate_reopen
-- transition: rate_reopen
-- Before a deploy stores a rate with a new max or per: the runs waiting for its old window
-- (rate_waited, set by flow_bump, which moves only due runs) are due again, and the next
-- claim judges them by the new rate.
UPDATE rota_runs r SET due_at = {now}, rate_waited = false
FROM rota_rates t
WHERE t.name = %(name)s AND (t.max <> %(max)s OR t.per <> %(per)s)
  AND r.rate_name = t.name AND r.rate_waited AND r.status = 'pending' AND NOT r.held

-- name: flow_upsert_rate
INSERT INTO rota_rates (name, max, per, updated_at) VALUES (%(name)s, %(max)s, %(per)s, {now})
ON CONFLICT (name) DO UPDATE SET max = excluded.max, per = excluded.per, updated_at = excluded.updated_at

-- name: flow_limits
-- each limit with its running and waiting (pending) runs, over all its keys, and its keys whose
-- running runs fill its max (a key at its max: its next run waits)
SELECT l.name, l.max,
       (SELECT count(*) FROM rota_runs r WHERE r.limit_name = l.name AND r.status = 'running'),
       (SELECT count(*) FROM rota_runs r WHERE r.limit_name = l.name AND r.status = 'pending'),
       (SELECT count(DISTINCT limit_key) FROM rota_runs r WHERE r.limit_name = l.name AND r.status IN ('pending', 'running')),
       (SELECT count(*) FROM (SELECT 1 FROM rota_runs r WHERE r.limit_name = l.name AND r.status = 'running'
                              GROUP BY r.limit_key HAVING count(r.id) >= l.max) k)
FROM rota_limits l ORDER BY l.name

-- name: flow_rates
-- each rate with its starts in the current window and its waiting (pending) runs (all keys),
-- and its keys whose starts in the window reach its max
-- (a damaged max or per, out of range, is listed as stored, with no starts counted)
SELECT t.name, t.max, t.per,
       (SELECT count(*) FROM rota_rate_starts s WHERE s.name = t.name
          AND t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400
          AND s.started_at > {now} - make_interval(secs => CASE WHEN t.per BETWEEN 0.001 AND 31622400 THEN t.per END)
          AND s.started_at <= {now} + make_interval(secs => CASE WHEN t.per BETWEEN 0.001 AND 31622400 THEN t.per END)),
       (SELECT count(*) FROM rota_runs r WHERE r.rate_name = t.name AND r.status = 'pending'),
       (SELECT count(DISTINCT rate_key) FROM rota_runs r WHERE r.rate_name = t.name AND r.status = 'pending'),
       (SELECT count(*) FROM (SELECT 1 FROM rota_rate_starts s WHERE s.name = t.name
          AND t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400
          AND s.started_at > {now} - make_interval(secs => CASE WHEN t.per BETWEEN 0.001 AND 31622400 THEN t.per END)
          AND s.started_at <= {now} + make_interval(secs => CASE WHEN t.per BETWEEN 0.001 AND 31622400 THEN t.per END)
          GROUP BY s.key HAVING count(*) >= t.max) k)
FROM rota_rates t ORDER BY t.name

-- name: flow_damaged
-- Every stored limit, rate and task spec, for a worker's check for damaged ones (small tables:
-- one row per pool or task; rota/stores/flow_damage.py judges them)
SELECT 'l', name, max, NULL::float8, NULL FROM rota_limits
UNION ALL
SELECT 'r', name, max, per, NULL FROM rota_rates
UNION ALL
SELECT 's', task, NULL, NULL::float8, spec FROM rota_task_flow

-- ==== stored task declarations (migration 0011, rota/limit_specs.py) ======================
-- name: flow_put_spec
INSERT INTO rota_task_flow (task, spec, updated_at) VALUES (%(task)s, %(spec)s, {now})
ON CONFLICT (task) DO UPDATE SET spec = excluded.spec, updated_at = excluded.updated_at
WHERE rota_task_flow.spec IS DISTINCT FROM excluded.spec

-- name: flow_drop_specs
-- the tasks this deploy declares without a limit or a rate
DELETE FROM rota_task_flow WHERE task = ANY(%(tasks)s::text[])

-- name: flow_spec
SELECT spec FROM rota_task_flow WHERE task = %(task)s

-- name: flow_unresolved
-- Runs made where their task's keys could not be computed (a callable by=), for a worker
-- that declares the task to key (found through rota_runs_limit_waiting). The last column is
-- the tick of a schedule's tick (not of a backfill: NULL), which flow_skip_unkeyed records
-- skipped if the declaring code cannot key it either.
SELECT id, task, args, kwargs, schedule, CASE WHEN schedule IS NOT NULL AND NOT backfill THEN tick END
FROM rota_runs
WHERE limit_name = %(unresolved)s AND status = 'pending' AND NOT held
  AND task = ANY(%(tasks)s::text[])
ORDER BY limit_name, limit_key, priority DESC, due_at, id
LIMIT %(n)s

-- name: flow_resolve
-- transition: keyed
-- An unresolved run's keys, from its declaring worker (its status does not change).
UPDATE rota_runs
SET limit_name = %(limit_name)s, limit_key = %(limit_key)s, rate_name = %(rate_name)s, rate_key = %(rate_key)s
WHERE id = %(id)s AND status = 'pending' AND limit_name = %(unresolved)s

-- name: flow_skip_unkeyed
-- transition: skip_unkeyed
-- An unresolved schedule's tick whose keys its declaring worker cannot compute either (a by=
-- raising on the stored arguments): recorded skipped with the error, as the tick pass inserts
-- one (rota_run_finished counts it in the schedule's skip_count, as rota_run_skipped counts
-- the inserted one; an exclusive schedule's slot is handed on).
UPDATE rota_runs
SET status = 'skipped', error = %(error)s, finished_at = {now},
    limit_name = NULL, limit_key = NULL, rate_name = NULL, rate_key = NULL
WHERE id = %(id)s AND status = 'pending' AND limit_name = %(unresolved)s
RETURNING id

-- name: flow_set_gates
-- transition: retry
-- A retry's limit and rate (retry_insert copies neither: they come from the declaration).
UPDATE rota_runs
SET limit_name = %(limit_name)s, limit_key = %(limit_key)s, rate_name = %(rate_name)s, rate_key = %(rate_key)s
WHERE id = %(id)s AND status = 'pending'

-- name: flow_specs_table
-- whether migration 0011 ran (a store asks once; older schemas have no stored specs)
SELECT to_regclass('rota_task_flow') IS NOT NULL

-- name: flow_unknown_limits
-- The names of limits that pending runs wait under and no stored limit defines (undeclared:
-- a typo in a client's Limit(name=...), a run made before any worker declared the limit, or a
-- row deleted by hand), with how many runs wait under each: they wait (never unlimited) until
-- a worker that declares the limit stores it (rota/undeclared.py). `rota limits` and
-- /api/limits list them; a worker's check (about once a minute) logs each name, rate-limited.
SELECT r.limit_name, count(*) FROM rota_runs r
WHERE r.status = 'pending' AND NOT r.held AND r.limit_name IS NOT NULL AND r.limit_name <> %(unresolved)s
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
SELECT CASE WHEN r.limit_name <> %(unresolved)s
             AND NOT EXISTS (SELECT 1 FROM rota_limits l WHERE l.name = r.limit_name) THEN r.limit_name END,
       CASE WHEN NOT EXISTS (SELECT 1 FROM rota_rates t WHERE t.name = r.rate_name) THEN r.rate_name END
FROM rota_runs r
WHERE r.id = %(id)s AND r.status = 'pending' AND (r.limit_name IS NOT NULL OR r.rate_name IS NOT NULL)

-- name: flow_unresolved_count
-- runs waiting for a worker that declares their task to compute their keys (rota limits)
SELECT count(*) FROM rota_runs
WHERE limit_name = %(unresolved)s AND status = 'pending' AND NOT held
