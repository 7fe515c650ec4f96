-- rota schema, version 14 (SQLite): which pending runs wait for a rate's window (see the
-- PostgreSQL migration of the same number): set by flow_bump, cleared by flow_take, read by
-- flow_rate_reopen. Runs moved before this version carry no flag: they keep the old opening.
ALTER TABLE rota_runs ADD COLUMN rate_waited INTEGER NOT NULL DEFAULT 0;
