ALTER TABLE rota_runs ADD COLUMN traceparent VARCHAR(255);
