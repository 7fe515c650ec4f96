-- A schedule's planning error (see SQLite's 0003). A later write that gives it a new
-- next_run_at clears the error: a BEFORE trigger (an AFTER trigger may not update its table).
ALTER TABLE rota_schedules ADD COLUMN plan_error LONGTEXT;

CREATE TRIGGER rota_schedule_replanned BEFORE UPDATE ON rota_schedules FOR EACH ROW
SET NEW.plan_error = CASE WHEN NEW.next_run_at IS NOT NULL AND NEW.plan_error IS NOT NULL
                           AND NOT (OLD.next_run_at <=> NEW.next_run_at)
                          THEN NULL ELSE NEW.plan_error END;
