-- rota schema, version 10 (SQLite): concurrency limits and rate limits (rota.Limit,
-- rota.Rate; design note in rota/stores/_limits.py). As on PostgreSQL; times are Unix seconds.
-- (No wake-up trigger: other processes see the finish through the data_version watch.)
ALTER TABLE rota_runs ADD COLUMN limit_name TEXT;
ALTER TABLE rota_runs ADD COLUMN limit_key TEXT;
ALTER TABLE rota_runs ADD COLUMN rate_name TEXT;
ALTER TABLE rota_runs ADD COLUMN rate_key TEXT;

CREATE TABLE rota_limits (
    name       TEXT    NOT NULL PRIMARY KEY,
    max        INTEGER NOT NULL CHECK (max > 0),
    updated_at REAL    NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE rota_rates (
    name       TEXT    NOT NULL PRIMARY KEY,
    max        INTEGER NOT NULL CHECK (max > 0),
    per        REAL    NOT NULL CHECK (per > 0),
    updated_at REAL    NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE rota_rate_starts (
    name       TEXT NOT NULL,
    key        TEXT NOT NULL,
    started_at REAL NOT NULL
) STRICT;
CREATE INDEX rota_rate_starts_window ON rota_rate_starts (name, key, started_at);

DROP INDEX rota_runs_claim;
CREATE INDEX rota_runs_claim ON rota_runs (priority DESC, due_at, id)
    WHERE status = 'pending' AND NOT held AND limit_name IS NULL AND rate_name IS NULL;
CREATE INDEX rota_runs_limit_waiting ON rota_runs (limit_name, limit_key, priority DESC, due_at, id)
    WHERE status = 'pending' AND NOT held AND limit_name IS NOT NULL;
CREATE INDEX rota_runs_rate_waiting ON rota_runs (rate_name, rate_key, priority DESC, due_at, id)
    WHERE status = 'pending' AND NOT held AND rate_name IS NOT NULL;
-- The flow claim's first walk: the waiting runs in the claim's order.
CREATE INDEX rota_runs_gated_order ON rota_runs (priority DESC, due_at, id)
    WHERE status = 'pending' AND NOT held AND (limit_name IS NOT NULL OR rate_name IS NOT NULL);
CREATE INDEX rota_runs_gated_due ON rota_runs (due_at)
    WHERE status = 'pending' AND NOT held AND (limit_name IS NOT NULL OR rate_name IS NOT NULL);
CREATE INDEX rota_runs_limit_running ON rota_runs (limit_name, limit_key)
    WHERE status = 'running' AND limit_name IS NOT NULL;
