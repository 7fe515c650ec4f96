ALTER TABLE rota_runs ADD COLUMN misfire_at DATETIME(6);
CREATE INDEX rota_runs_misfire ON rota_runs (status, misfire_at);
