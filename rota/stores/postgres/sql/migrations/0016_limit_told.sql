-- rota schema, version 16 (PostgreSQL): the finish wakes the workers once per batch for the
-- limit slots it frees, not once per run.
--
-- rota_limit_freed (0010) NOTIFYs when a limited run stops running: a plpgsql call per row,
-- about 8 µs each, paid by every finish of a limited run (most of what a `limit=100` drain's
-- finish cost more than a plain one's, measured with EXPLAIN ANALYZE). The two finish
-- statements now send that NOTIFY themselves, once, when their batch holds a limited run,
-- and say so in the transaction's setting `rota.limit_told`; the trigger's WHEN skips the rows
-- of such a transaction (a NOTIFY of the same channel and payload is sent once per
-- transaction anyway). Every other way a limited run stops running (hand-back, refusal,
-- rescue, cancellation, a transactional handler's commit, and any statement added later)
-- still fires the trigger. A worker of the previous release sets no such setting: its
-- finishes fire the trigger as before, so a rolling upgrade loses no wake-up.
DROP TRIGGER rota_limit_freed ON rota_runs;
CREATE TRIGGER rota_limit_freed AFTER UPDATE OF status ON rota_runs
    FOR EACH ROW WHEN (OLD.status = 'running' AND NEW.status <> 'running' AND OLD.limit_name IS NOT NULL
                       AND current_setting('rota.limit_told', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION rota_limit_freed();
