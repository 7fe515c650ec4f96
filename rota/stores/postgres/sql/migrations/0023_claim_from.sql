-- rota schema, version 23 (PostgreSQL): the claim index keyed so that a claim can start
-- where the last one ended (issue 45, item 3).
--
-- Each claimed run leaves its pending row version behind in this index, at its front (the
-- earliest due). Vacuum removes them, and a scan marks them dead for later scans, only once
-- no transaction could still see them: while a session sits idle in a transaction (or any
-- other holder of the xmin horizon), they pile up, and a claim that walks from the front of
-- the index visits every one of them (7x slower after 10 minutes at 300 runs/s). With every
-- key ascending, the claim's `(-priority, due_at, id) > (last claimed, less a second)` is
-- a start position in the index: a busy worker's claim walks only what was claimed in the
-- last second, however many dead entries lie before it (rota.stores.postgres.claim_from).
-- The same order as before (priority descending, then due time, then id); bigint, so that
-- the lowest integer priority has a negation.
--
-- On a big table this CREATE INDEX blocks writes while it builds; to build it without, run
-- before upgrading:
--   CREATE INDEX CONCURRENTLY rota_runs_claim_from ON rota_runs ((-priority::bigint), due_at, id)
--       WHERE status = 'pending' AND NOT held AND limit_name IS NULL AND rate_name IS NULL;
-- and this migration then only drops the old index.
DROP INDEX IF EXISTS rota_runs_claim;
CREATE INDEX IF NOT EXISTS rota_runs_claim_from ON rota_runs ((-priority::bigint), due_at, id)
    WHERE status = 'pending' AND NOT held AND limit_name IS NULL AND rate_name IS NULL;
