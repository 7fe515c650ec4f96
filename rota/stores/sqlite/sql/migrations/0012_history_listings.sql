-- rota schema, version 12 (SQLite): a task's or a schedule's failed, cancelled or skipped runs
-- listed without walking the history (see the PostgreSQL migration). The store's listing adds
-- the redundant `status IN (...)` term to such a filter: SQLite uses a partial index only
-- when the query's WHERE repeats the index's.
CREATE INDEX rota_runs_unhappy_task ON rota_runs (task, status, id)
    WHERE status IN ('failed', 'cancelled', 'skipped');
CREATE INDEX rota_runs_unhappy_schedule ON rota_runs (schedule, status, id)
    WHERE schedule IS NOT NULL AND status IN ('failed', 'cancelled', 'skipped');
