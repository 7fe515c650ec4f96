-- rota schema, version 5 (PostgreSQL): a run made ahead of its tick keeps its misfire deadline.
--
-- A tick's run is made a short lead before the tick (rota/worker/ticks.py). If no worker
-- claims it by its tick + misfire_grace (its maker was killed, no other worker ran), it must
-- meet the misfire policy as a tick made late would. `misfire_at` is that deadline, set
-- only on runs made ahead of a schedule whose policy is not "all": claims leave a run past
-- it alone (and clear it when they take one in time), and the next worker to plan ticks
-- judges it (skipped, or kept to run under misfire="coalesce"; see docs/concepts/ticks.md).
-- The partial index holds only such runs while pending: a handful at most, so finding the
-- ones past their deadline on every poll costs nothing, and plain runs never enter it.

ALTER TABLE rota_runs ADD COLUMN misfire_at timestamptz;
CREATE INDEX rota_runs_misfire ON rota_runs (misfire_at) WHERE status = 'pending' AND misfire_at IS NOT NULL;
