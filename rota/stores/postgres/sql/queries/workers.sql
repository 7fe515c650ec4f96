-- PostgreSQL queries: the workers' registry: leases, lost and stuck workers.
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- name: register_worker
-- The row and the worker's own lease in one statement: a crash or a cut connection never
-- leaves a live worker's row without its lease (judged by the viewer's lease instead).
INSERT INTO rota_workers (id, host, pid, concurrency, queues, state, started_at, last_seen, lease)
VALUES (%(id)s, %(host)s, %(pid)s, %(concurrency)s, %(queues)s, 'running', {now}, {now}, %(lease)s)
ON CONFLICT (id) DO UPDATE SET state = 'running', last_seen = {now}, lease = EXCLUDED.lease

-- name: register_worker_before_20
-- The same on a schema before version 20 (an upgrade under way: no lease column yet).
INSERT INTO rota_workers (id, host, pid, concurrency, queues, state, started_at, last_seen)
VALUES (%(id)s, %(host)s, %(pid)s, %(concurrency)s, %(queues)s, 'running', {now}, {now})
ON CONFLICT (id) DO UPDATE SET state = 'running', last_seen = {now}

-- name: worker_seen
UPDATE rota_workers SET last_seen = {now}, state = %(state)s WHERE id = %(id)s

-- name: list_workers
-- A worker whose heartbeat is older than its own lease reads lost, not alive; a worker without
-- one (an older release) or with a lease no release writes (NaN, infinite, negative: a damaged
-- row; NaN > 0 holds in PostgreSQL, the upper bound excludes it) is judged by stale_after.
SELECT id, host, pid, concurrency, queues,
       CASE WHEN state NOT IN ('stopped', 'lost') AND last_seen < {now} - make_interval(secs => stale)
            THEN 'lost' ELSE state END,
       started_at, last_seen,
       last_seen >= {now} - make_interval(secs => stale) AND state NOT IN ('stopped', 'lost'),
       lease
FROM (SELECT *, CASE WHEN lease > 0 AND lease <= 31536000 THEN lease
                     ELSE %(stale_after)s::double precision END AS stale
      FROM rota_workers) AS w
WHERE last_seen >= {now} - make_interval(secs => stale * 10)
   OR state NOT IN ('stopped', 'lost')
ORDER BY started_at

-- name: mark_lost_workers
UPDATE rota_workers SET state = 'lost'
WHERE state NOT IN ('stopped', 'lost')
  AND last_seen < {now} - make_interval(secs => greatest(%(lost_after)s::double precision,
                                        CASE WHEN lease > 0 AND lease <= 31536000 THEN lease * 3 ELSE 0 END))
RETURNING id

-- name: prune_workers
DELETE FROM rota_workers
WHERE state IN ('stopped', 'lost') AND last_seen < {now} - make_interval(secs => %(older_than)s)
RETURNING id

-- ===== issue 10, worker side (branch faults-worker) =====================================
-- name: worker_seen_stuck
UPDATE rota_workers SET last_seen = {now}, state = %(state)s, stuck = %(stuck)s WHERE id = %(id)s

-- name: workers_stuck
SELECT id, stuck FROM rota_workers

-- name: database_started
SELECT pg_postmaster_start_time()
