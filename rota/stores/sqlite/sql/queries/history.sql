-- SQLite queries: retention: pruning finished runs, the history table (schema 17).
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- name: prune
-- transition: prune
-- Oldest finish first through rota_runs_finished, from the last finish time the pass deleted
-- (:after): see PostgreSQL.
DELETE FROM rota_runs
WHERE id IN (SELECT id FROM rota_runs INDEXED BY rota_runs_finished
             WHERE finished_at < {now} - :older_than AND finished_at >= :after AND status = :status
             ORDER BY finished_at LIMIT :limit)
RETURNING id, finished_at
