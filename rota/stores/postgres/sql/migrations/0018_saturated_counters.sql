-- rota schema, version 18 (PostgreSQL): a schedule's counters saturate at their column's
-- maximum (issue 41: one damaged row never stops the others).
--
-- rota_run_finished (0001, 0011) adds 1 to run_count, success_count, failure_count and
-- skip_count when a run of the schedule ends or is recorded skipped. A count at bigint's
-- maximum (a manual edit, a bad migration) made that addition fail, and with it the statement
-- that ended the run: every finish, rescue or cancel of a batch holding one of the schedule's
-- runs, again at every try. A count at the maximum now stays there (rota/quarantine.py).
-- The rest of the function is 0011's.
CREATE OR REPLACE FUNCTION rota_run_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE rota_schedules SET
        run_count     = run_count     + CASE WHEN run_count < 9223372036854775807
                                             THEN (NEW.started_at IS NOT NULL AND NEW.status <> 'skipped')::int ELSE 0 END,
        success_count = success_count + CASE WHEN success_count < 9223372036854775807
                                             THEN (NEW.status = 'succeeded')::int ELSE 0 END,
        failure_count = failure_count + CASE WHEN failure_count < 9223372036854775807
                                             THEN (NEW.status = 'failed')::int ELSE 0 END,
        skip_count    = skip_count    + CASE WHEN skip_count < 9223372036854775807
                                             THEN (NEW.status = 'skipped')::int ELSE 0 END,
        last_status   = CASE WHEN NEW.started_at IS NOT NULL AND NEW.started_at >= coalesce(last_run_at, '-infinity')
                             THEN NEW.status ELSE last_status END,
        last_run_at   = CASE WHEN NEW.started_at IS NOT NULL
                             THEN greatest(coalesce(last_run_at, '-infinity'), NEW.started_at) ELSE last_run_at END
    WHERE name = NEW.schedule;
    IF NEW.exclusive AND NOT NEW.held AND TG_OP = 'UPDATE' THEN
        UPDATE rota_runs SET held = false
        WHERE id = (SELECT id FROM rota_runs
                    WHERE schedule = NEW.schedule AND held AND status = 'pending'
                    ORDER BY scheduled_for, id LIMIT 1)
          AND NOT EXISTS (SELECT 1 FROM rota_runs
                          WHERE schedule = NEW.schedule AND exclusive AND NOT held
                            AND status IN ('pending', 'running'));
        IF FOUND THEN
            PERFORM pg_notify('rota' || CASE
                WHEN current_schema() = 'public' THEN ''
                WHEN octet_length(current_schema()) <= 58 THEN ':' || current_schema()
                ELSE ':' || md5(current_schema()) END, 'run');
        END IF;
    END IF;
    RETURN NULL;
END
$$;
