ALTER TABLE rota_runs ADD COLUMN backfill TINYINT NOT NULL DEFAULT 0;
ALTER TABLE rota_schedules ADD COLUMN jitter DOUBLE;
CREATE INDEX rota_runs_retry_of ON rota_runs (retry_of);
