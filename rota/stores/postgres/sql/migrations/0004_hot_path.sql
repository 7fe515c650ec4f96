-- rota schema, version 4 (PostgreSQL): fewer index entries per claim and finish.
--
-- A claim (pending -> running) and a finish (running -> final) change `status`, which the
-- claim index's predicate reads, so neither can be a HOT update: each new row version gets
-- an entry in every index whose predicate it satisfies. Version 1 gave a plain run seven:
-- the claim in pkey, lease, status and task; the finish in pkey, status and task. Now it
-- gets four: the claim in pkey and active; the finish in pkey and task. (A failed, cancelled
-- or skipped run's finish also writes rota_runs_unhappy; a schedule's run writes
-- rota_runs_tick at both and rota_runs_schedule at the finish; a keyed or exclusive run's
-- claim writes its uniqueness index.)
--
-- rota_runs_active replaces both the lease index and the (status, id) index for the active
-- statuses: the rescue sweep reads the running runs through it (they are few: at most the
-- workers' concurrency) and checks their lease on the row. Succeeded runs, the bulk of any
-- history, are in no status index: listing them walks the primary key from the newest run
-- (they are most of the recent runs), pruning them walks it from the oldest.
--
-- The task and schedule indexes leave running runs out; the store lists a task's or a
-- schedule's runs from them and from rota_runs_active, merged (rota/stores/_pg_lists.py).
--
-- `lease_until` is no longer in any index, so a heartbeat (it changes nothing else) is a
-- HOT update when the row's page has room: leave some.

DROP INDEX rota_runs_lease;
DROP INDEX rota_runs_status;
DROP INDEX rota_runs_task;
DROP INDEX rota_runs_schedule;
CREATE INDEX rota_runs_active ON rota_runs (status, id) WHERE status IN ('pending', 'running');
CREATE INDEX rota_runs_unhappy ON rota_runs (status, id) WHERE status IN ('failed', 'cancelled', 'skipped');
CREATE INDEX rota_runs_task ON rota_runs (task, id) WHERE status <> 'running';
CREATE INDEX rota_runs_schedule ON rota_runs (schedule, id) WHERE schedule IS NOT NULL AND status <> 'running';
ALTER TABLE rota_runs SET (fillfactor = 90);
