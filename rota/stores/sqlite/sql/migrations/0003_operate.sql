-- rota schema, version 3 (SQLite): a schedule's planning error, and run counts by status.
--
-- A schedule a worker cannot plan (its zone unknown on that host, a cron that no longer
-- parses) gets `plan_error` and a NULL next_run_at, so it is no longer due on every poll.
-- Any later write that gives it a next_run_at (an update, a re-synced definition, a resume)
-- clears the error: the trigger below keeps "plan_error set => next_run_at NULL" true.
--
-- `rota_run_counts` keeps the number of runs per status, maintained by triggers in the same
-- transaction as the change, so `rota status` and /metrics never count a big table. SQLite
-- serializes writers, so one row per status costs no contention.

ALTER TABLE rota_schedules ADD COLUMN plan_error TEXT;

CREATE TRIGGER rota_schedule_replanned AFTER UPDATE OF next_run_at ON rota_schedules
WHEN NEW.next_run_at IS NOT NULL AND NEW.plan_error IS NOT NULL
BEGIN
    UPDATE rota_schedules SET plan_error = NULL WHERE name = NEW.name;
END;

CREATE TABLE rota_run_counts (
    status TEXT    PRIMARY KEY,
    n      INTEGER NOT NULL
) STRICT;
INSERT INTO rota_run_counts (status, n)
    SELECT value, 0 FROM json_each('["pending","running","succeeded","failed","skipped","cancelled"]');
UPDATE rota_run_counts SET n = (SELECT count(*) FROM rota_runs r WHERE r.status = rota_run_counts.status);

CREATE TRIGGER rota_run_counted AFTER INSERT ON rota_runs
BEGIN
    UPDATE rota_run_counts SET n = n + 1 WHERE status = NEW.status;
END;

CREATE TRIGGER rota_run_uncounted AFTER DELETE ON rota_runs
BEGIN
    UPDATE rota_run_counts SET n = n - 1 WHERE status = OLD.status;
END;

CREATE TRIGGER rota_run_recounted AFTER UPDATE OF status ON rota_runs
WHEN OLD.status <> NEW.status
BEGIN
    UPDATE rota_run_counts SET n = n - 1 WHERE status = OLD.status;
    UPDATE rota_run_counts SET n = n + 1 WHERE status = NEW.status;
END;
