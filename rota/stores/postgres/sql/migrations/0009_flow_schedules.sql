-- rota schema, version 9 (PostgreSQL): backfilled runs and jittered schedules (issue 20).
--
-- `backfill` marks a run made by App.backfill / `rota backfill` for a past tick, so history
-- tells it from the run the schedule made at the time. `jitter` is the schedule's spread
-- in seconds (NULL: none); each tick's run is due a stable offset in [0, jitter) after the
-- tick (rota.timing.jitter). Adding a column with a constant default rewrites no rows.
-- rota_runs_retry_of lets App.retry_many pass over runs already retried (only retries have
-- the column set, so the index stays small and a plain run's insert writes nothing to it).
ALTER TABLE rota_runs ADD COLUMN backfill boolean NOT NULL DEFAULT false;
ALTER TABLE rota_schedules ADD COLUMN jitter double precision;
CREATE INDEX rota_runs_retry_of ON rota_runs (retry_of) WHERE retry_of IS NOT NULL;
