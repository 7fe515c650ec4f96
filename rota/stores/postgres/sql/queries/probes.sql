-- PostgreSQL queries: the permission and write probes (a worker's start, `rota migrate`).
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- name: probe_privileges
-- The privileges a worker needs that the current role lacks: (role, schema, object, privilege).
SELECT current_user, current_schema(), x.obj, x.priv
FROM (VALUES ('rota_runs'), ('rota_schedules'), ('rota_workers'), ('rota_locks')) AS t(obj)
CROSS JOIN LATERAL (VALUES (t.obj, 'SELECT'), (t.obj, 'INSERT'), (t.obj, 'UPDATE'), (t.obj, 'DELETE')) AS x(obj, priv)
WHERE NOT has_table_privilege(x.obj, x.priv)
UNION ALL
-- the tables of 0008 (flow-deps), 0010 (limits and rates), 0011 (task declarations), 0018
-- (paused queues, declared tasks) and 0017 (history), once they exist
SELECT current_user, current_schema(), x.obj, x.priv
FROM (VALUES ('rota_deps'), ('rota_unique'), ('rota_limits'), ('rota_rates'), ('rota_rate_starts'),
             ('rota_task_flow'), ('rota_history'), ('rota_queue_pauses'), ('rota_tasks')) AS t(obj)
CROSS JOIN LATERAL (VALUES (t.obj, 'SELECT'), (t.obj, 'INSERT'), (t.obj, 'UPDATE'), (t.obj, 'DELETE')) AS x(obj, priv)
WHERE CASE WHEN to_regclass(x.obj) IS NULL THEN false ELSE NOT has_table_privilege(x.obj, x.priv) END
UNION ALL
-- the view of every run, both tables (0017): reads of final runs go through it
SELECT current_user, current_schema(), 'rota_runs_all', 'SELECT'
WHERE CASE WHEN to_regclass('rota_runs_all') IS NULL THEN false
           ELSE NOT has_table_privilege('rota_runs_all', 'SELECT') END
UNION ALL
SELECT current_user, current_schema(), 'rota_migrations', 'SELECT'
WHERE NOT has_table_privilege('rota_migrations', 'SELECT')
UNION ALL
SELECT current_user, current_schema(), q.seq, 'USAGE'
FROM (VALUES ('rota_run_id_seq'), ('rota_token_seq')) AS q(seq)
WHERE NOT has_sequence_privilege(q.seq, 'USAGE')

-- name: probe_can_migrate
-- (current_schema() is NULL when no schema of the search_path exists)
SELECT coalesce(has_schema_privilege(current_schema(), 'CREATE'), false), current_user, current_schema(),
       current_setting('search_path')

-- The write probe (a worker's start, `rota migrate`): each kind of write on each table, in one
-- transaction that is rolled back. Catches what privileges do not show: a read-only
-- transaction or replica, row security, a read-only file.
-- name: probe_insert_run
-- transition: none (a write probe on row -1, rolled back)
INSERT INTO rota_runs (id, task, scheduled_for, due_at) VALUES (-1, %(probe)s, {now}, {now})

-- name: probe_update_run
-- transition: none (a write probe on row -1, rolled back)
UPDATE rota_runs SET status = 'cancelled' WHERE id = -1

-- name: probe_delete_run
-- transition: none (a write probe on row -1, rolled back)
DELETE FROM rota_runs WHERE id = -1

-- name: probe_insert_schedule
INSERT INTO rota_schedules (name, task, every, definition) VALUES (%(probe)s, %(probe)s, 60, '')

-- name: probe_update_schedule
UPDATE rota_schedules SET paused = true WHERE name = %(probe)s

-- name: probe_delete_schedule
DELETE FROM rota_schedules WHERE name = %(probe)s

-- name: probe_insert_worker
INSERT INTO rota_workers (id, host, pid, concurrency) VALUES (%(probe)s, '', 0, 1)

-- name: probe_update_worker
UPDATE rota_workers SET state = 'stopped' WHERE id = %(probe)s

-- name: probe_delete_worker
DELETE FROM rota_workers WHERE id = %(probe)s

-- name: probe_insert_lock
INSERT INTO rota_locks (name, token) VALUES (%(probe)s, 1)

-- name: probe_update_lock
UPDATE rota_locks SET token = 2 WHERE name = %(probe)s

-- name: probe_delete_lock
DELETE FROM rota_locks WHERE name = %(probe)s

-- name: probe_sequences
-- Takes one run id (ids have gaps anyway); the token sequence is left alone.
SELECT nextval('rota_run_id_seq')
