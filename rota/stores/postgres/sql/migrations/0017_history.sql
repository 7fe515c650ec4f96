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

-- The strongest lock this migration takes on rota_runs (DROP TRIGGER's), first: taking weaker
-- ones first and upgrading could deadlock with a running worker's transaction.
LOCK TABLE rota_runs IN ACCESS EXCLUSIVE MODE;
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

-- Deleting from rota_runs is no longer only pruning, so 0008's statement trigger (which dropped
-- a deleted run's edges and key record) goes: the prune statement does that itself, for both
-- tables, and a move keeps them (the run is kept). A statement trigger also cost a function call
-- and a copy of every deleted row per finish, felt at small batches (W7: 6 µs of PostgreSQL
-- CPU per run). What a move must still do is the work rota_run_settled does for an UPDATE: a
-- moved parent (it was `running`) releases its dependents. A row trigger whose WHEN is false for
-- a run with no dependents costs nothing else; it runs at the end of the finish's statement, on
-- a fresh snapshot, so a dependent added while the finish waited for the parent's row lock is
-- seen. A row deleted by hand (not by `rota prune`) leaves its edges and key record behind:
-- harmless (a key record's run is checked to exist), but prune with rota.
-- transition: release_dependents
CREATE FUNCTION rota_run_moved() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    at timestamptz := coalesce((SELECT finished_at FROM rota_history WHERE id = OLD.id), now());
BEGIN
    UPDATE rota_runs c
    SET waiting_on = c.waiting_on - 1,
        held = c.waiting_on > 1,
        after_depth = CASE WHEN c.waiting_on = 1 THEN 0 ELSE c.after_depth END,
        scheduled_for = CASE WHEN c.waiting_on = 1 THEN greatest(c.scheduled_for, at) ELSE c.scheduled_for END,
        due_at = CASE WHEN c.waiting_on = 1 THEN greatest(c.due_at, at) ELSE c.due_at END
    WHERE c.id IN (SELECT d.child FROM rota_deps d WHERE d.parent = OLD.id)
      AND c.status = 'pending' AND c.waiting_on > 0;
    IF FOUND THEN
        PERFORM pg_notify('rota' || CASE
            WHEN current_schema() = 'public' THEN ''
            WHEN octet_length(current_schema()) <= 58 THEN ':' || current_schema()
            ELSE ':' || md5(current_schema()) END, 'run');
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER rota_runs_pruned ON rota_runs;
CREATE TRIGGER rota_run_moved AFTER DELETE ON rota_runs FOR EACH ROW
    WHEN (OLD.status = 'running' AND OLD.has_dependents)
    EXECUTE FUNCTION rota_run_moved();
