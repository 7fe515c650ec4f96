-- rota schema, version 18 (SQLite): counters saturate at their column's maximum (issue 41:
-- one damaged row never stops the others).
--
-- A schedule's run_count, success_count, failure_count and skip_count (rota_run_finished,
-- rota_run_skipped, 0001) and the runs per status (rota_run_counts, 0003) were kept by adding
-- or taking 1. At the column's limit (a manual edit, a bad migration) the sum becomes a REAL,
-- which the STRICT table refuses: the statement that ended, inserted or pruned the run failed,
-- again at every try, and with it the whole batch. A count at its limit now stays there
-- (rota/quarantine.py); the triggers are otherwise 0001's and 0003's.
DROP TRIGGER rota_run_finished;
CREATE TRIGGER rota_run_finished AFTER UPDATE OF status ON rota_runs
WHEN NEW.schedule IS NOT NULL
     AND OLD.status IN ('pending', 'running')
     AND NEW.status NOT IN ('pending', 'running')
BEGIN
    UPDATE rota_schedules SET
        run_count     = run_count     + (run_count < 9223372036854775807
                                         AND NEW.started_at IS NOT NULL AND NEW.status <> 'skipped'),
        success_count = success_count + (success_count < 9223372036854775807 AND NEW.status = 'succeeded'),
        failure_count = failure_count + (failure_count < 9223372036854775807 AND NEW.status = 'failed'),
        skip_count    = skip_count    + (skip_count < 9223372036854775807 AND NEW.status = 'skipped'),
        last_status   = CASE WHEN NEW.started_at IS NOT NULL AND NEW.started_at >= coalesce(last_run_at, -1e300)
                             THEN NEW.status ELSE last_status END,
        last_run_at   = CASE WHEN NEW.started_at IS NOT NULL
                             THEN max(coalesce(last_run_at, -1e300), NEW.started_at) ELSE last_run_at END
    WHERE name = NEW.schedule;
    UPDATE rota_runs SET held = 0
    WHERE NEW.exclusive AND NOT NEW.held
      AND id = (SELECT id FROM rota_runs
                WHERE schedule = NEW.schedule AND held AND status = 'pending'
                ORDER BY scheduled_for, id LIMIT 1)
      AND NOT EXISTS (SELECT 1 FROM rota_runs
                      WHERE schedule = NEW.schedule AND exclusive AND NOT held
                        AND status IN ('pending', 'running'));
END;

DROP TRIGGER rota_run_skipped;
CREATE TRIGGER rota_run_skipped AFTER INSERT ON rota_runs
WHEN NEW.schedule IS NOT NULL AND NEW.status = 'skipped'
BEGIN
    UPDATE rota_schedules SET skip_count = skip_count + (skip_count < 9223372036854775807) WHERE name = NEW.schedule;
END;

DROP TRIGGER rota_run_counted;
CREATE TRIGGER rota_run_counted AFTER INSERT ON rota_runs
BEGIN
    UPDATE rota_run_counts SET n = n + (n < 9223372036854775807) WHERE status = NEW.status;
END;

DROP TRIGGER rota_run_uncounted;
CREATE TRIGGER rota_run_uncounted AFTER DELETE ON rota_runs
BEGIN
    UPDATE rota_run_counts SET n = n - (n > -9223372036854775807) WHERE status = OLD.status;
END;

DROP TRIGGER rota_run_recounted;
CREATE TRIGGER rota_run_recounted AFTER UPDATE OF status ON rota_runs
WHEN OLD.status <> NEW.status
BEGIN
    UPDATE rota_run_counts SET n = n - (n > -9223372036854775807) WHERE status = OLD.status;
    UPDATE rota_run_counts SET n = n + (n < 9223372036854775807) WHERE status = NEW.status;
END;
