-- PostgreSQL queries: runs after others (App.enqueue after=...): parents, dependents, orphans.
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- name: lock_parents
-- transition: enqueue
-- (of the dependent: no parent's status changes; sets has_dependents on the parents)
-- after=: lock the parents in id order (a finish of one waits until this enqueue commits,
-- so its trigger sees the new edges) and flag them; their status says what the child waits for.
-- A parent in rota_history succeeded (schema 17): nothing to lock or flag. One that moved there
-- while this statement waited for its lock is in neither answer (the lock skips a deleted row;
-- the history is read on this statement's snapshot): the caller asks again for the missing ones.
WITH p AS (
    SELECT id FROM rota_runs
    WHERE id = ANY(ARRAY(SELECT value::bigint FROM json_array_elements_text(%(ids)s::json)))
    ORDER BY id
    FOR UPDATE
),
flagged AS (
    UPDATE rota_runs r SET has_dependents = true
    FROM p WHERE r.id = p.id
    RETURNING r.id, r.status, r.task, r.after_depth
)
SELECT id, status, task, after_depth FROM flagged
UNION ALL
SELECT id, status, task, after_depth FROM rota_history
WHERE id = ANY(ARRAY(SELECT value::bigint FROM json_array_elements_text(%(ids)s::json)))

-- name: add_deps
INSERT INTO rota_deps (parent, child)
SELECT value::bigint, %(child)s FROM json_array_elements_text(%(ids)s::json)
ON CONFLICT DO NOTHING

-- name: depend_run
-- transition: enqueue
-- The new dependent's count of parents still to succeed (it was inserted held, or cancelled).
UPDATE rota_runs SET waiting_on = %(waiting)s, after_depth = %(depth)s,
    finished_at = CASE WHEN status = 'cancelled' THEN {now} ELSE finished_at END
WHERE id = %(id)s

-- name: deps_orphaned
-- transition: orphaned
-- Runs waiting on parents none of which is pending or running any more (rota_runs_held): a
-- parent deleted by hand, or a damaged waiting_on. Each ended failed as damaged (rota/quarantine.py),
-- a worker's check now and then; a failed run's dependents are cancelled by rota_run_settled.
UPDATE rota_runs
SET status = 'failed', held = false, waiting_on = 0, finished_at = {now}, error = %(error)s
WHERE id IN (SELECT w.id FROM rota_runs w
             WHERE w.held AND w.status = 'pending' AND w.waiting_on > 0
               AND NOT EXISTS (SELECT 1 FROM rota_deps d JOIN rota_runs p ON p.id = d.parent
                               WHERE d.child = w.id AND p.status IN ('pending', 'running'))
             ORDER BY w.id LIMIT %(limit)s
               FOR UPDATE SKIP LOCKED)
  AND status = 'pending' AND held AND waiting_on > 0
RETURNING id, task

-- name: run_parents
SELECT parent FROM rota_deps WHERE child = %(id)s ORDER BY parent

-- name: run_dependents
SELECT child FROM rota_deps WHERE parent = %(id)s ORDER BY child

-- name: parent_results
SELECT r.id, r.result FROM rota_deps d JOIN rota_runs_all r ON r.id = d.parent
WHERE d.child = %(id)s ORDER BY r.id

-- name: web_run_waiting
-- (run_rows appends WHERE id = ...)
SELECT waiting_on FROM rota_runs_all
