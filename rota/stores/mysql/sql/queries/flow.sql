-- Named queries of the MySQL store: flow control (rota.Limit, rota.Rate; design note in
-- rota/stores/_limits.py) and stored task declarations. A flow claim first locks the token
-- counter's row (flow_lock), so the room it sees is not taken by another claim meanwhile.

-- name: flow_lock
SELECT value FROM rota_counters WHERE name = 'token' FOR UPDATE

-- name: flow_heads
-- The keys with a due waiting run and room, the key whose first run comes first in the
-- claim's order first (a run with a pool's name and no key, damaged, is left out).
WITH firsts AS (
    SELECT kind, name, k, priority, due_at, id,
           ROW_NUMBER() OVER (PARTITION BY kind, name, k ORDER BY priority DESC, due_at, id) AS rn
    FROM (SELECT 'l' AS kind, limit_name AS name, limit_key AS k, priority, due_at, id, queue FROM rota_runs
          WHERE status = 'pending' AND limit_status = 'pending' AND held = 0
            AND limit_name IS NOT NULL AND limit_key IS NOT NULL AND due_at <= {now}
          UNION ALL
          SELECT 'r', rate_name, rate_key, priority, due_at, id, queue FROM rota_runs
          WHERE status = 'pending' AND rate_status = 'pending' AND held = 0
            AND rate_name IS NOT NULL AND rate_key IS NOT NULL AND due_at <= {now}) AS w
    WHERE (%(queues)s IS NULL
           OR queue IN {{queues}})
      AND {{not_paused(w.queue)}}
),
rooms AS (
    SELECT h.kind, h.name, h.k, h.priority, h.due_at, h.id,
           {{room(h.kind, h.name, h.k)}} AS free
    FROM firsts h WHERE h.rn = 1
)
SELECT kind, name, k, free FROM rooms
WHERE free > 0 OR (kind = 'r' AND free IS NOT NULL)
ORDER BY priority DESC, due_at, id
LIMIT %(n)s

-- name: flow_heads_walk
-- As flow_heads, among the first %(m)s waiting runs in the claim's order only.
WITH walked AS (
    SELECT limit_name, limit_key, rate_name, rate_key, priority, due_at, id FROM rota_runs
    WHERE status = 'pending' AND held = 0 AND pending_held = 0 AND (limit_name IS NOT NULL OR rate_name IS NOT NULL)
      AND (%(queues)s IS NULL
           OR queue IN {{queues}})
      AND {{not_paused(rota_runs.queue)}}
    ORDER BY priority DESC, due_at, id
    LIMIT %(m)s
),
firsts AS (
    SELECT kind, name, k, priority, due_at, id,
           ROW_NUMBER() OVER (PARTITION BY kind, name, k ORDER BY priority DESC, due_at, id) AS rn
    FROM (SELECT 'l' AS kind, limit_name AS name, limit_key AS k, priority, due_at, id FROM walked
          WHERE limit_name IS NOT NULL AND limit_key IS NOT NULL AND due_at <= {now}
          UNION ALL
          SELECT 'r', rate_name, rate_key, priority, due_at, id FROM walked
          WHERE rate_name IS NOT NULL AND rate_key IS NOT NULL AND due_at <= {now}) AS w
),
rooms AS (
    SELECT h.kind, h.name, h.k, h.priority, h.due_at, h.id,
           {{room(h.kind, h.name, h.k)}} AS free
    FROM firsts h WHERE h.rn = 1
)
SELECT kind, name, k, free FROM rooms
WHERE free > 0 OR (kind = 'r' AND free IS NOT NULL)
ORDER BY priority DESC, due_at, id
LIMIT %(n)s

-- name: flow_due
SELECT EXISTS (SELECT 1 FROM rota_runs
               WHERE status = 'pending' AND held = 0 AND pending_held = 0 AND due_at <= {now}
                 AND (limit_name IS NOT NULL OR rate_name IS NOT NULL)
                 AND {{not_paused(rota_runs.queue)}})

-- name: flow_due_in_queues
SELECT EXISTS (SELECT 1 FROM rota_runs
               WHERE status = 'pending' AND held = 0 AND pending_held = 0 AND due_at <= {now}
                 AND (limit_name IS NOT NULL OR rate_name IS NOT NULL)
                 AND queue IN {{queues}}
                 AND {{not_paused(rota_runs.queue)}})

-- name: plain_due
SELECT EXISTS (SELECT 1 FROM rota_runs
               WHERE status = 'pending' AND held = 0 AND pending_held = 0 AND due_at <= {now}
                 AND (misfire_at IS NULL OR misfire_at >= {now})
                 AND cancel_requested = 0
                 AND limit_name IS NULL AND rate_name IS NULL
                 AND (%(queues)s IS NULL
                      OR queue IN {{queues}})
                 AND {{not_paused(rota_runs.queue)}})

-- name: flow_poll_later
SELECT {now},
       (SELECT min(due_at) FROM rota_runs
        WHERE status = 'pending' AND held = 0 AND pending_held = 0 AND due_at > {now} AND (misfire_at IS NULL OR misfire_at >= {now})
          AND (%(queues)s IS NULL
               OR queue IN {{queues}})
          AND {{not_paused(rota_runs.queue)}}),
       (SELECT min(t) FROM (
            SELECT min(next_run_at) AS t FROM rota_schedules WHERE active <> 0 AND paused = 0
            UNION ALL
            SELECT min(misfire_pending) FROM rota_runs WHERE misfire_pending < {now}) AS x)

-- name: flow_room
SELECT e.kind, e.name, e.k,
       {{room(e.kind, e.name, e.k)}}
FROM JSON_TABLE(%(keys)s, '$[*]' COLUMNS (kind VARCHAR(1) PATH '$[0]', name VARCHAR(255) PATH '$[1]',
                                          k VARCHAR(512) PATH '$[2]')) AS e

-- name: flow_waiting_limit
SELECT id, limit_name, limit_key, rate_name, rate_key FROM rota_runs
WHERE limit_name = %(name)s AND limit_key = %(key)s
  AND status = 'pending' AND limit_status = 'pending' AND held = 0 AND due_at <= {now}
  AND (misfire_at IS NULL OR misfire_at >= {now})
  AND (%(queues)s IS NULL
       OR queue IN {{queues}})
  AND {{not_paused(rota_runs.queue)}}
ORDER BY priority DESC, due_at, id
LIMIT %(n)s
FOR UPDATE SKIP LOCKED

-- name: flow_waiting_rate
SELECT id, limit_name, limit_key, rate_name, rate_key FROM rota_runs
WHERE rate_name = %(name)s AND rate_key = %(key)s
  AND status = 'pending' AND rate_status = 'pending' AND held = 0 AND due_at <= {now}
  AND (misfire_at IS NULL OR misfire_at >= {now})
  AND (%(queues)s IS NULL
       OR queue IN {{queues}})
  AND {{not_paused(rota_runs.queue)}}
ORDER BY priority DESC, due_at, id
LIMIT %(n)s
FOR UPDATE SKIP LOCKED

-- name: flow_take
-- transition: claim
-- %(ids)s in the claim's order: the first %(start)s start, the rest are held (as claim's);
-- tokens in id order.
SELECT id FROM rota_runs
WHERE id IN {{ids(%(ids)s)}}
  AND status = 'pending'
ORDER BY id FOR UPDATE
;
UPDATE rota_runs r
JOIN JSON_TABLE(%(ids)s, '$[*]' COLUMNS (pos FOR ORDINALITY, v BIGINT PATH '$')) AS c ON c.v = r.id
SET r.token = %(token)s + FIND_IN_SET(r.id, %(_idlist)s) - 1,
    r.attempt = r.attempt + (c.pos <= %(start)s AND r.attempt < 2147483647),
    r.started_at = CASE WHEN c.pos <= %(start)s THEN {now} END,
    r.status = 'running', r.owner = %(owner)s, r.rate_waited = 0, r.misfire_at = NULL,
    r.lease_until = {now} + INTERVAL %(lease)s SECOND
WHERE r.id IN %(_ids)s
;
{{claimed_columns}}

-- name: flow_started
INSERT INTO rota_rate_starts (name, `key`, started_at)
SELECT rate_name, rate_key, started_at FROM rota_runs
WHERE id IN {{ids(%(ids)s)}}
  AND rate_name IS NOT NULL AND started_at IS NOT NULL

-- name: flow_bump
-- transition: rate_wait
-- A full window: the key's due waiting runs wait until its oldest counted start leaves it.
UPDATE rota_runs r
JOIN (SELECT w.started_at + INTERVAL t.per SECOND AS at
      FROM rota_rates t
      JOIN (SELECT s.started_at, ROW_NUMBER() OVER (ORDER BY s.started_at) AS rn, count(*) OVER () AS n
            FROM rota_rate_starts s JOIN rota_rates t2 ON t2.name = s.name
            WHERE s.name = %(name)s AND s.`key` = %(key)s
              AND s.started_at > {now} - INTERVAL t2.per SECOND
              AND s.started_at <= {now} + INTERVAL t2.per SECOND) AS w
        ON w.rn = GREATEST(w.n - t.max, 0) + 1 AND w.n >= t.max
      WHERE t.name = %(name)s AND t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400) AS o
SET r.due_at = o.at, r.rate_waited = 1
WHERE r.rate_name = %(name)s AND r.rate_key = %(key)s
  AND r.status = 'pending' AND r.rate_status = 'pending' AND r.held = 0 AND r.due_at <= {now} AND r.due_at < o.at

-- name: flow_prune
DELETE FROM rota_rate_starts
WHERE name = %(name)s AND `key` = %(key)s
  AND (started_at <= {now} - INTERVAL (SELECT per FROM rota_rates WHERE name = %(name)s AND per BETWEEN 0.001 AND 31622400) SECOND
       OR started_at > {now} + INTERVAL (SELECT per FROM rota_rates WHERE name = %(name)s AND per BETWEEN 0.001 AND 31622400) SECOND)

-- name: flow_keyless
-- transition: keyless
SELECT id FROM (
    SELECT r.id FROM rota_limits l JOIN rota_runs r ON r.limit_name = l.name
    WHERE r.limit_key IS NULL AND r.status = 'pending' AND r.limit_status = 'pending' AND r.held = 0
    UNION
    SELECT r.id FROM rota_rates t JOIN rota_runs r ON r.rate_name = t.name
    WHERE r.rate_key IS NULL AND r.status = 'pending' AND r.rate_status = 'pending' AND r.held = 0) AS k
ORDER BY id LIMIT %(limit)s
;
UPDATE rota_runs SET status = 'failed', finished_at = {now}, error = %(error)s
WHERE id IN %(_ids)s AND status = 'pending' AND held = 0 AND pending_held = 0
;
SELECT id, task FROM rota_runs WHERE id IN %(_ids)s AND status = 'failed'

-- name: flow_any
SELECT (SELECT count(*) FROM rota_limits) + (SELECT count(*) FROM rota_rates)

-- name: flow_upsert_limit
INSERT INTO rota_limits (name, max, updated_at) VALUES (%(name)s, %(max)s, {now})
ON DUPLICATE KEY UPDATE max = VALUES(max), updated_at = VALUES(updated_at)

-- name: flow_rate_reopen
-- transition: rate_reopen
UPDATE rota_runs SET due_at = {now}, rate_waited = 0
WHERE rate_name = %(name)s AND rate_waited <> 0 AND status = 'pending' AND rate_status = 'pending' AND held = 0
  AND EXISTS (SELECT 1 FROM rota_rates t WHERE t.name = %(name)s AND (t.max <> %(max)s OR t.per <> %(per)s))

-- name: flow_upsert_rate
INSERT INTO rota_rates (name, max, per, updated_at) VALUES (%(name)s, %(max)s, %(per)s, {now})
ON DUPLICATE KEY UPDATE max = VALUES(max), per = VALUES(per), updated_at = VALUES(updated_at)

-- name: flow_limits
SELECT l.name, l.max,
       (SELECT count(*) FROM rota_runs r WHERE r.limit_name = l.name AND r.limit_status = 'running'),
       (SELECT count(*) FROM rota_runs r WHERE r.limit_name = l.name AND r.limit_status = 'pending'),
       (SELECT count(DISTINCT limit_key) FROM rota_runs r WHERE r.limit_name = l.name AND r.limit_status IN ('pending', 'running')),
       count(k.limit_name)
FROM rota_limits l
-- its keys whose running runs fill its max (a derived table cannot name l here: joined instead)
LEFT JOIN (SELECT r.limit_name, r.limit_key, count(*) AS n FROM rota_limits m
           JOIN rota_runs r ON r.limit_name = m.name AND r.limit_status = 'running'
           GROUP BY r.limit_name, r.limit_key) k ON k.limit_name = l.name AND k.n >= l.max
GROUP BY l.name, l.max ORDER BY l.name

-- name: flow_rates
SELECT t.name, t.max, t.per,
       (SELECT count(*) FROM rota_rate_starts s WHERE s.name = t.name
          AND s.started_at > {now} - INTERVAL t.per SECOND AND s.started_at <= {now} + INTERVAL t.per SECOND
          AND t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400),
       (SELECT count(*) FROM rota_runs r WHERE r.rate_name = t.name AND r.rate_status = 'pending'),
       (SELECT count(DISTINCT rate_key) FROM rota_runs r WHERE r.rate_name = t.name AND r.rate_status = 'pending'),
       count(k.name)
FROM rota_rates t
-- its keys whose starts in the window reach its max (a derived table cannot name t: joined)
LEFT JOIN (SELECT s.name, s.`key`, count(*) AS n FROM rota_rates m
           JOIN rota_rate_starts s ON s.name = m.name
            AND s.started_at > {now} - INTERVAL m.per SECOND AND s.started_at <= {now} + INTERVAL m.per SECOND
            AND m.max BETWEEN 1 AND 1000000 AND m.per BETWEEN 0.001 AND 31622400
           GROUP BY s.name, s.`key`) k ON k.name = t.name AND k.n >= t.max
GROUP BY t.name, t.max, t.per ORDER BY t.name

-- name: flow_damaged
SELECT 'l', name, max, NULL, NULL FROM rota_limits
UNION ALL
SELECT 'r', name, max, per, NULL FROM rota_rates
UNION ALL
SELECT 's', task, NULL, NULL, spec FROM rota_task_flow

-- name: flow_put_spec
INSERT INTO rota_task_flow (task, spec, updated_at) VALUES (%(task)s, %(spec)s, {now})
ON DUPLICATE KEY UPDATE updated_at = IF(spec <=> VALUES(spec), updated_at, VALUES(updated_at)),
                        spec = VALUES(spec)

-- name: flow_drop_specs
DELETE FROM rota_task_flow
WHERE task IN (SELECT j.v FROM JSON_TABLE(%(tasks)s, '$[*]' COLUMNS (v VARCHAR(255) PATH '$')) AS j)

-- name: flow_spec
SELECT spec FROM rota_task_flow WHERE task = %(task)s

-- name: flow_unresolved
SELECT id, task, args, kwargs, schedule, CASE WHEN schedule IS NOT NULL AND backfill = 0 THEN tick END
FROM rota_runs
WHERE limit_name = %(unresolved)s AND status = 'pending' AND limit_status = 'pending' AND held = 0
  AND task IN (SELECT j.v FROM JSON_TABLE(%(tasks)s, '$[*]' COLUMNS (v VARCHAR(255) PATH '$')) AS j)
ORDER BY limit_name, limit_key, priority DESC, due_at, id
LIMIT %(n)s

-- name: flow_resolve
-- transition: keyed
UPDATE rota_runs
SET limit_name = %(limit_name)s, limit_key = %(limit_key)s, rate_name = %(rate_name)s, rate_key = %(rate_key)s
WHERE id = %(id)s AND status = 'pending' AND limit_name = %(unresolved)s

-- name: flow_skip_unkeyed
-- transition: skip_unkeyed
SELECT id FROM rota_runs WHERE id = %(id)s AND status = 'pending' AND limit_name = %(unresolved)s FOR UPDATE
;
UPDATE rota_runs
SET status = 'skipped', error = %(error)s, finished_at = {now},
    limit_name = NULL, limit_key = NULL, rate_name = NULL, rate_key = NULL
WHERE id IN %(_ids)s

-- name: flow_set_gates
-- transition: retry
UPDATE rota_runs
SET limit_name = %(limit_name)s, limit_key = %(limit_key)s, rate_name = %(rate_name)s, rate_key = %(rate_key)s
WHERE id = %(id)s AND status = 'pending'

-- name: flow_specs_table
SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'rota_task_flow'

-- name: flow_unknown_limits
-- The names of limits that pending runs wait under and no stored limit defines (undeclared:
-- a typo in a client's Limit(name=...), a run made before any worker declared the limit, or a
-- row deleted by hand), with how many runs wait under each: they wait (never unlimited) until
-- a worker that declares the limit stores it (rota/undeclared.py). `rota limits` and
-- /api/limits list them; a worker's check (about once a minute) logs each name, rate-limited.
SELECT r.limit_name, count(*) FROM rota_runs r
WHERE r.limit_status = 'pending' AND r.held = 0 AND r.limit_name IS NOT NULL AND r.limit_name <> %(unresolved)s
  AND NOT EXISTS (SELECT 1 FROM rota_limits l WHERE l.name = r.limit_name)
GROUP BY r.limit_name ORDER BY r.limit_name
LIMIT 100

-- name: flow_unknown_rates
-- As flow_unknown_limits, for rates: the names pending runs are rated under and no stored rate
-- defines, with how many runs wait under each.
SELECT r.rate_name, count(*) FROM rota_runs r
WHERE r.rate_status = 'pending' AND r.held = 0 AND r.rate_name IS NOT NULL
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
SELECT count(*) FROM rota_runs
WHERE limit_name = %(unresolved)s AND status = 'pending' AND limit_status = 'pending' AND held = 0
