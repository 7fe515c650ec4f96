-- rota schema, version 11 (PostgreSQL): each task's limit and rate as declared (rota.Limit,
-- rota.Rate), so that runs made by a process that does not declare the task (rota trigger,
-- rota retry, retry_many, backfill, another app's schedule ticks) get their keys (see
-- rota/limit_specs.py). Written when a worker starts: the newest deploy wins.
CREATE TABLE rota_task_flow (
    task       text        PRIMARY KEY,
    spec       text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The hand-over of an exclusive schedule's slot (as in 0001) wakes the workers when it gives
-- the slot to a queued run (a queued tick, a backfilled tick, a queued retry): it starts
-- within a wake-up of the end of the run before it, not at the next poll. On the schema's
-- channel, as the `notify` query and rota_limit_freed (0010).
CREATE OR REPLACE FUNCTION rota_run_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE rota_schedules SET
        run_count     = run_count     + (NEW.started_at IS NOT NULL AND NEW.status <> 'skipped')::int,
        success_count = success_count + (NEW.status = 'succeeded')::int,
        failure_count = failure_count + (NEW.status = 'failed')::int,
        skip_count    = skip_count    + (NEW.status = 'skipped')::int,
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
