-- rota schema, version 4 (PostgreSQL): fewer index entries per claim and finish.
--
-- A claim (pending -> running) and a finish (running -> final) change `status`, which the
-- claim index's predicate reads, so neither can be a HOT update: each new row version gets
-- an entry in every index whose predicate it satisfies. Version 1 gave a plain run seven:
-- claim in pkey, lease, status, task; finish in pkey, status, task. Now it gets five:
-- claim in pkey, active, task; finish in pkey, task (a failed, cancelled or skipped run
-- also in rota_runs_unhappy).
--
-- rota_runs_active replaces both the lease index and the (status, id) index for the active
-- statuses: the rescue sweep reads the running runs through it (they are few: at most the
-- workers' concurrency) and checks their lease on the row. Succeeded runs, the bulk of any
-- history, are in no status index: listing them walks the primary key from the newest run
-- (they are most of the recent runs), pruning them walks it from the oldest.
--
-- `lease_until` is no longer in any index, so a heartbeat (it changes nothing else) is a
-- HOT update when the row's page has room: leave some.

DROP INDEX rota_runs_lease;
DROP INDEX rota_runs_status;
CREATE INDEX rota_runs_active ON rota_runs (status, id) WHERE status IN ('pending', 'running');
CREATE INDEX rota_runs_unhappy ON rota_runs (status, id) WHERE status IN ('failed', 'cancelled', 'skipped');
ALTER TABLE rota_runs SET (fillfactor = 90);
