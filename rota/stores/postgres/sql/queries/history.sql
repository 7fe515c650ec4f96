-- PostgreSQL queries: retention: pruning finished runs, the history table (schema 17).
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- name: prune
-- transition: prune
-- Oldest finish first, through rota_runs_finished (finished_at, status, ...): an index range
-- scan in finish order whatever the plan's guess of the status's share (a generic plan for
-- `status = $1` over the primary key sorted millions of rows), and a pass goes on from the
-- last finish time it deleted (:after, epoch seconds), past the dead entries of what it deleted.
-- Succeeded runs are in both tables (schema 17): the oldest `limit` of the two, together, so
-- that the cursor (the last finish time deleted) passes no run left in either.
WITH hot AS (
    SELECT id, finished_at FROM rota_runs
    WHERE finished_at < {now} - make_interval(secs => %(older_than)s)
      AND finished_at >= to_timestamp(%(after)s) AND status = %(status)s
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
kept AS (
    -- (only succeeded runs are kept there: a one-time filter for the other statuses)
    SELECT id, finished_at FROM rota_history
    WHERE %(status)s::text = 'succeeded'
      AND finished_at < {now} - make_interval(secs => %(older_than)s)
      AND finished_at >= to_timestamp(%(after)s)
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
doomed AS MATERIALIZED (
    SELECT id FROM (SELECT id, finished_at FROM hot UNION ALL SELECT id, finished_at FROM kept) AS both_
    ORDER BY finished_at
    LIMIT %(limit)s
),
gone AS (
    DELETE FROM rota_runs r WHERE r.id = ANY(ARRAY(SELECT id FROM doomed))
    RETURNING r.id, r.finished_at
),
gone_kept AS (
    DELETE FROM rota_history r WHERE r.id = ANY(ARRAY(SELECT id FROM doomed))
    RETURNING r.id, r.finished_at
),
unlinked AS (
    -- a pruned run can no longer wait for anything nor be returned: its edges as a child and
    -- its key's record go with it (0008's trigger did this; schema 17 does it here)
    DELETE FROM rota_deps d WHERE d.child = ANY(ARRAY(SELECT id FROM doomed))
),
forgotten AS (
    DELETE FROM rota_unique u WHERE u.run_id = ANY(ARRAY(SELECT id FROM doomed))
)
SELECT id, extract(epoch FROM finished_at)::float8 FROM gone
UNION ALL
SELECT id, extract(epoch FROM finished_at)::float8 FROM gone_kept

-- name: move_history
-- transition: none (a final run moves to rota_history as it is)
-- The worker's history sweep (rota.worker.maintenance): succeeded runs of no schedule that a
-- finish left in rota_runs (an earlier schema's, a transactional handler's commit), oldest
-- first through rota_runs_stray, to rota_history, whose columns are rota_runs' in its order.
-- A stray whose id is in rota_history already (damaged: a bad restore or copy) stays where it
-- is, and comes back with `true` (the store names it): one such run never fails the batch.
WITH stray AS (
    SELECT r.id, EXISTS (SELECT 1 FROM rota_history h WHERE h.id = r.id) AS twin FROM rota_runs r
    WHERE r.status = 'succeeded' AND r.schedule IS NULL
    ORDER BY r.id
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
),
moved AS (
    DELETE FROM rota_runs r
    WHERE r.id = ANY(ARRAY(SELECT id FROM stray WHERE NOT twin)) AND r.status = 'succeeded' AND r.schedule IS NULL
    RETURNING r.*
),
kept AS (
    INSERT INTO rota_history SELECT * FROM moved
    RETURNING id
)
SELECT id, false FROM kept
UNION ALL
SELECT id, true FROM stray WHERE twin

-- name: history_estimate
-- The planner's estimate of the rows in rota_history (schema 17: succeeded runs only), as
-- run_counts reads rota_runs'. Before its first ANALYZE (autovacuum's comes after 50 rows,
-- within a minute) the table is new and small: counted.
SELECT CASE WHEN c.reltuples < 0 THEN (SELECT count(*) FROM rota_history)::float8
            WHEN c.relpages > 0
            THEN c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::float8)
            ELSE c.reltuples END
FROM pg_class c WHERE c.oid = 'rota_history'::regclass
