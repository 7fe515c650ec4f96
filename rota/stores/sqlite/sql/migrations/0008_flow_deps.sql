-- rota schema, version 8 (SQLite): uniqueness windows and runs that wait for others. Same
-- tables and trigger as the PostgreSQL migration (see there); every write runs under the
-- file's write lock, so the upsert of rota_unique and the insert of the run are atomic.
-- The cascade (a cancelled child cancels its own dependents) needs the trigger to fire from
-- within itself: the store turns `PRAGMA recursive_triggers` on for its connections.
--   transition: release_dependents, cancel_dependents (in rota_run_settled below)

CREATE TABLE rota_unique (
    task       TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    run_id     INTEGER,
    created_at REAL    NOT NULL,
    PRIMARY KEY (task, key)
) STRICT;

CREATE TABLE rota_deps (
    parent INTEGER NOT NULL,
    child  INTEGER NOT NULL,
    PRIMARY KEY (parent, child)
) STRICT, WITHOUT ROWID;
CREATE INDEX rota_deps_child ON rota_deps (child);

ALTER TABLE rota_runs ADD COLUMN waiting_on INTEGER NOT NULL DEFAULT 0;
ALTER TABLE rota_runs ADD COLUMN has_dependents INTEGER NOT NULL DEFAULT 0;
ALTER TABLE rota_runs ADD COLUMN after_depth INTEGER NOT NULL DEFAULT 0;  -- see PostgreSQL

CREATE TRIGGER rota_run_settled AFTER UPDATE OF status ON rota_runs
WHEN NEW.has_dependents
     AND OLD.status IN ('pending', 'running')
     AND NEW.status NOT IN ('pending', 'running')
BEGIN
    UPDATE rota_runs
    SET waiting_on = waiting_on - 1,
        held = waiting_on > 1,
        after_depth = CASE WHEN waiting_on = 1 THEN 0 ELSE after_depth END,
        scheduled_for = CASE WHEN waiting_on = 1
                             THEN max(scheduled_for, coalesce(NEW.finished_at, (julianday('now') - 2440587.5) * 86400.0))
                             ELSE scheduled_for END,
        due_at = CASE WHEN waiting_on = 1
                      THEN max(due_at, coalesce(NEW.finished_at, (julianday('now') - 2440587.5) * 86400.0))
                      ELSE due_at END
    WHERE NEW.status = 'succeeded'
      AND id IN (SELECT child FROM rota_deps WHERE parent = NEW.id)
      AND status = 'pending' AND waiting_on > 0;
    UPDATE rota_runs
    SET status = 'cancelled', held = 0, waiting_on = 0,
        finished_at = coalesce(NEW.finished_at, (julianday('now') - 2440587.5) * 86400.0),
        error = json_object('type', 'DependencyFailed',
                            'message', 'parent run ' || NEW.id || ' (' || NEW.task || ') ended ' || NEW.status,
                            'traceback', NULL)
    WHERE NEW.status <> 'succeeded'
      AND id IN (SELECT child FROM rota_deps WHERE parent = NEW.id)
      AND status = 'pending';
END;

-- Pruning a run drops its edges as a child and its key's record (see PostgreSQL).
CREATE INDEX rota_unique_run ON rota_unique (run_id);

CREATE TRIGGER rota_run_pruned AFTER DELETE ON rota_runs
BEGIN
    DELETE FROM rota_deps WHERE child = OLD.id;
    DELETE FROM rota_unique WHERE run_id = OLD.id;
END;
