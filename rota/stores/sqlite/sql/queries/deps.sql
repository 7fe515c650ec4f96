-- SQLite queries: runs after others (App.enqueue after=...): parents, dependents, orphans.
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- name: lock_parents
-- transition: enqueue
-- (of the dependent: no parent's status changes; sets has_dependents on the parents)
UPDATE rota_runs SET has_dependents = 1
WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING id, status, task, after_depth

-- name: add_deps
INSERT INTO rota_deps (parent, child)
SELECT value, :child FROM json_each(:ids)
WHERE true
ON CONFLICT DO NOTHING

-- name: depend_run
-- transition: enqueue
UPDATE rota_runs SET waiting_on = :waiting, after_depth = :depth,
    finished_at = CASE WHEN status = 'cancelled' THEN {now} ELSE finished_at END
WHERE id = :id

-- name: deps_orphaned
-- transition: orphaned
-- Runs waiting on parents none of which is pending or running any more (rota_runs_held): a
-- parent deleted by hand, or a damaged waiting_on. Each ended failed as damaged (rota/quarantine.py),
-- a worker's check now and then; a failed run's dependents are cancelled by rota_run_settled.
UPDATE rota_runs
SET status = 'failed', held = false, waiting_on = 0, finished_at = {now}, error = :error
WHERE id IN (SELECT w.id FROM rota_runs w
             WHERE w.held AND w.status = 'pending' AND w.waiting_on > 0
               AND NOT EXISTS (SELECT 1 FROM rota_deps d JOIN rota_runs p ON p.id = d.parent
                               WHERE d.child = w.id AND p.status IN ('pending', 'running'))
             ORDER BY w.id LIMIT :limit)
  AND status = 'pending' AND held AND waiting_on > 0
RETURNING id, task

-- name: run_parents
SELECT parent FROM rota_deps WHERE child = :id ORDER BY parent

-- name: run_dependents
SELECT child FROM rota_deps WHERE parent = :id ORDER BY child

-- name: parent_results
SELECT r.id, r.result FROM rota_deps d JOIN rota_runs r ON r.id = d.parent
WHERE d.child = :id ORDER BY r.id

-- name: web_run_waiting
-- (run_rows appends WHERE id = ...)
SELECT waiting_on FROM rota_runs
