-- rota schema, version 7 (PostgreSQL): the dashboard's charts read runs by finish time.
--
-- Throughput and lateness charts (rota.web.charts) read the runs that finished in a time
-- range, bucket by bucket with a row cap, in finished_at order. The index covers what the
-- throughput chart counts (status, attempt), so an unfiltered bucket can be an index-only
-- scan. Only finished runs are in it: a finish writes one more index entry (a claim, a
-- heartbeat and a retry none). On a big table this CREATE INDEX blocks writes while it
-- builds: on a busy database create it first by hand with
--   CREATE INDEX CONCURRENTLY rota_runs_finished ON rota_runs (finished_at, status, attempt)
--       WHERE finished_at IS NOT NULL;
-- and this migration then does nothing.
CREATE INDEX IF NOT EXISTS rota_runs_finished ON rota_runs (finished_at, status, attempt)
    WHERE finished_at IS NOT NULL;
