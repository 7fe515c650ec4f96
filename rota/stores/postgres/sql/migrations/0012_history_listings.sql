-- rota schema, version 12 (PostgreSQL): a task's or a schedule's failed, cancelled or skipped
-- runs listed without walking the history.
--
-- `rota runs --task T --status failed` read rota_runs_unhappy (every failed run, newest first)
-- and kept those of T: the time grew with the failures kept, without bound when T has none
-- (51 ms at 1,000,000 runs: bench/history.py). These two indexes hold only unhappy runs, so a
-- finish writes an entry in them only for a run that did not succeed (a succeeded run, the
-- bulk of any history, pays nothing). On a big table this CREATE INDEX blocks writes while it
-- builds (seconds per 10,000,000 runs): on a busy database create them first by hand with
--   CREATE INDEX CONCURRENTLY rota_runs_unhappy_task ON rota_runs (task, status, id)
--       WHERE status IN ('failed', 'cancelled', 'skipped');
--   CREATE INDEX CONCURRENTLY rota_runs_unhappy_schedule ON rota_runs (schedule, status, id)
--       WHERE schedule IS NOT NULL AND status IN ('failed', 'cancelled', 'skipped');
-- and this migration then does nothing.
CREATE INDEX IF NOT EXISTS rota_runs_unhappy_task ON rota_runs (task, status, id)
    WHERE status IN ('failed', 'cancelled', 'skipped');
CREATE INDEX IF NOT EXISTS rota_runs_unhappy_schedule ON rota_runs (schedule, status, id)
    WHERE schedule IS NOT NULL AND status IN ('failed', 'cancelled', 'skipped');
