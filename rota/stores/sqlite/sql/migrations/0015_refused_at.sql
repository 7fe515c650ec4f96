-- rota schema, version 15 (SQLite): when a run was first given back by a worker that does not
-- register its task (see the PostgreSQL file). One nullable column: no row is rewritten.
ALTER TABLE rota_runs ADD COLUMN refused_at REAL;
