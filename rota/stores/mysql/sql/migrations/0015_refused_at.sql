ALTER TABLE rota_runs ADD COLUMN refused_at DATETIME(6);
