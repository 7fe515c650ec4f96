-- rota schema, version 15 (PostgreSQL): when a run was first given back by a worker that does
-- not register its task (the `refuse` transition).
--
-- A release that adds a task is deployed worker by worker: a worker of the old release that
-- claims the new task's run gives it back for a worker that registers it. The run fails with
-- TaskNotFound only once it has been refused for longer than the grace the refusing worker
-- sends, counted from its first refusal on the database's clock (not from its scheduled time,
-- which a jittered tick, a retry's backoff or a backlog leave far behind). One nullable column:
-- no row is rewritten.
ALTER TABLE rota_runs ADD COLUMN refused_at timestamptz;
