-- rota schema, version 5 (SQLite): a run made ahead of its tick keeps its misfire deadline
-- (see the PostgreSQL migration of the same number for why).

ALTER TABLE rota_runs ADD COLUMN misfire_at REAL;
CREATE INDEX rota_runs_misfire ON rota_runs (misfire_at) WHERE status = 'pending' AND misfire_at IS NOT NULL;
