-- rota schema, version 7 (SQLite): the dashboard's charts read runs by finish time.
--
-- Throughput and lateness charts (rota.web.charts) read the runs that finished in a time
-- range, bucket by bucket with a row cap, in finished_at order. The index covers what the
-- throughput chart counts (status, attempt), so an unfiltered bucket never reads the table.
-- Only finished runs are in it: a finish (and nothing else) writes one entry.
CREATE INDEX rota_runs_finished ON rota_runs (finished_at, status, attempt) WHERE finished_at IS NOT NULL;
