-- rota schema, version 3 (PostgreSQL): a schedule's planning error.
--
-- A schedule a worker cannot plan (its zone unknown on that host, a cron that no longer
-- parses) gets `plan_error` and a NULL next_run_at, so it is no longer due on every poll.
-- Any later write that gives it a next_run_at (an update, a re-synced definition, a resume)
-- clears the error: the trigger below keeps "plan_error set => next_run_at NULL" true.
--
-- Run counts by status are NOT kept in a table here: a counter row per status would be
-- updated by every claim and finish of every worker, one hot row serializing them all.
-- The store counts active runs exactly through the status index and, on a big table,
-- estimates the final statuses from the planner's statistics (and says so).

ALTER TABLE rota_schedules ADD COLUMN plan_error text;

CREATE FUNCTION rota_schedule_replanned() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.plan_error := NULL;
    RETURN NEW;
END
$$;

CREATE TRIGGER rota_schedule_replanned BEFORE UPDATE OF next_run_at ON rota_schedules FOR EACH ROW
    WHEN (NEW.next_run_at IS NOT NULL AND NEW.plan_error IS NOT NULL)
    EXECUTE FUNCTION rota_schedule_replanned();
