-- rota schema, version 17 (PostgreSQL): succeeded one-off runs leave rota_runs for rota_history
-- (issue 19).
--
-- A queue table churns: the finish of a run used to write a new version of its row (and an entry
-- in the primary key, the task and finish-time indexes) into the table the claims walk, and
-- left the old one dead there until VACUUM. Now the finish of a successful run of a one-off
-- task (no schedule) deletes the row and appends it, final, to rota_history, in the same
-- statement (`finish_succeeded`): rota_runs keeps the active work and, for a while, the runs
-- that ended otherwise. `bench/split_probe.py --layouts one-table,move` measured the move at
-- about a sixth less PostgreSQL CPU per no-op run (bench/results/issue19-history-table-*.md).
--
-- What stays in rota_runs, and why:
-- - runs of a schedule: one run per tick is rota_runs_tick's unique index, which cannot span
--   two tables (a tick made while its twin moves would pass both checks);
-- - runs that failed, were cancelled or skipped, and successes written by a transactional
--   handler's commit: the statements that end them fire triggers on UPDATE (dependents,
--   schedules, limits) and stay as they are; they are few.
-- rota_history is append-only but for pruning, and holds only succeeded runs of no schedule
-- (a CHECK says so: a listing of failed runs or of a schedule's runs skips the table by
-- constraint exclusion). Reads that may find a final run read the view rota_runs_all.
--
-- The columns are rota_runs' own, in its order: a later migration that adds a column to
-- rota_runs adds it here too and recreates the view (tests/test_history_table.py checks both,
-- and the finish's column list).

CREATE TABLE rota_history (LIKE rota_runs INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE rota_history
    ADD PRIMARY KEY (id),
    ADD CONSTRAINT rota_history_final CHECK (status = 'succeeded' AND schedule IS NULL);
CREATE INDEX rota_history_task ON rota_history (task, id);
CREATE INDEX rota_history_finished ON rota_history (finished_at, status, attempt);
CREATE INDEX rota_history_retry_of ON rota_history (retry_of) WHERE retry_of IS NOT NULL;

CREATE VIEW rota_runs_all AS
    SELECT * FROM rota_runs
    UNION ALL
    SELECT * FROM rota_history;

-- Succeeded one-off runs still in rota_runs: those of an earlier schema version, and those a
-- transactional handler's commit ended. Workers move them in small batches (`move_history`,
-- each its own transaction: no long lock), found through this index, which a finish's move
-- never writes to. On a big table this CREATE INDEX blocks writes while it builds (seconds per
-- 10,000,000 runs): on a busy database create it first by hand with
--   CREATE INDEX CONCURRENTLY rota_runs_stray ON rota_runs (id)
--       WHERE status = 'succeeded' AND schedule IS NULL;
-- and this migration then does nothing more than create the (empty) history.
CREATE INDEX IF NOT EXISTS rota_runs_stray ON rota_runs (id) WHERE status = 'succeeded' AND schedule IS NULL;

-- Deleting from rota_runs is no longer only pruning. A statement-level trigger (one call per
-- statement, not per row) tells the three kinds apart by the deleted rows:
-- - a finish's move (the row was `running`): release its dependents, as rota_run_settled does
--   for an UPDATE (that trigger cannot fire: no UPDATE happens). A dependent added while the
--   finish waited for the parent's row lock is seen here: this runs on a fresh snapshot;
-- - a move of a run already final (move_history): nothing; it is kept;
-- - a prune: drop its edges as a child and its key's record (as 0008's rota_runs_pruned).
CREATE FUNCTION rota_runs_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM gone WHERE status = 'running' AND has_dependents) THEN
        UPDATE rota_runs c
        SET waiting_on = c.waiting_on - x.n,
            held = c.waiting_on > x.n,
            after_depth = CASE WHEN c.waiting_on = x.n THEN 0 ELSE c.after_depth END,
            scheduled_for = CASE WHEN c.waiting_on = x.n THEN greatest(c.scheduled_for, x.at) ELSE c.scheduled_for END,
            due_at = CASE WHEN c.waiting_on = x.n THEN greatest(c.due_at, x.at) ELSE c.due_at END
        FROM (SELECT d.child, count(*)::integer AS n, max(coalesce(h.finished_at, now())) AS at
              FROM gone g
              JOIN rota_deps d ON d.parent = g.id
              LEFT JOIN rota_history h ON h.id = g.id
              WHERE g.status = 'running' AND g.has_dependents
              GROUP BY d.child) AS x
        WHERE c.id = x.child AND c.status = 'pending' AND c.waiting_on > 0;
        IF FOUND THEN
            PERFORM pg_notify('rota' || CASE
                WHEN current_schema() = 'public' THEN ''
                WHEN octet_length(current_schema()) <= 58 THEN ':' || current_schema()
                ELSE ':' || md5(current_schema()) END, 'run');
        END IF;
    END IF;
    DELETE FROM rota_deps d USING gone g
    WHERE d.child = g.id AND g.status <> 'running'
      AND NOT EXISTS (SELECT 1 FROM rota_history h WHERE h.id = g.id);
    DELETE FROM rota_unique u USING gone g
    WHERE u.run_id = g.id AND g.status <> 'running'
      AND NOT EXISTS (SELECT 1 FROM rota_history h WHERE h.id = g.id);
    RETURN NULL;
END
$$;

DROP TRIGGER rota_runs_pruned ON rota_runs;
CREATE TRIGGER rota_runs_deleted AFTER DELETE ON rota_runs REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION rota_runs_deleted();
-- Pruning the history: as 0008's rota_runs_pruned.
CREATE TRIGGER rota_history_pruned AFTER DELETE ON rota_history REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION rota_runs_pruned();
