CREATE INDEX rota_runs_finished ON rota_runs (finished_at, status, attempt);
