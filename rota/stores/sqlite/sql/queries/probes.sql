-- SQLite queries: the permission and write probes (a worker's start, `rota migrate`).
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- name: probe_privileges
-- SQLite has no roles: file permissions decide (checked before the write probe).
SELECT NULL, NULL, NULL, NULL WHERE 0

-- name: probe_can_migrate
SELECT 1, NULL, NULL

-- The write probe (a worker's start, `rota migrate`): each kind of write on each table, in one
-- transaction that is rolled back. Catches what privileges do not show: a read-only
-- transaction or replica, row security, a read-only file.
-- name: probe_insert_run
-- transition: none (a write probe on row -1, rolled back)
INSERT INTO rota_runs (id, task, scheduled_for, due_at, created_at) VALUES (-1, :probe, {now}, {now}, {now})

-- name: probe_update_run
-- transition: none (a write probe on row -1, rolled back)
UPDATE rota_runs SET status = 'cancelled' WHERE id = -1

-- name: probe_delete_run
-- transition: none (a write probe on row -1, rolled back)
DELETE FROM rota_runs WHERE id = -1

-- name: probe_insert_schedule
INSERT INTO rota_schedules (name, task, every, definition, created_at, updated_at)
VALUES (:probe, :probe, 60, '', {now}, {now})

-- name: probe_update_schedule
UPDATE rota_schedules SET paused = 1 WHERE name = :probe

-- name: probe_delete_schedule
DELETE FROM rota_schedules WHERE name = :probe

-- name: probe_insert_worker
INSERT INTO rota_workers (id, host, pid, concurrency, started_at, last_seen) VALUES (:probe, '', 0, 1, {now}, {now})

-- name: probe_update_worker
UPDATE rota_workers SET state = 'stopped' WHERE id = :probe

-- name: probe_delete_worker
DELETE FROM rota_workers WHERE id = :probe

-- name: probe_insert_lock
INSERT INTO rota_locks (name, token) VALUES (:probe, 1)

-- name: probe_update_lock
UPDATE rota_locks SET token = 2 WHERE name = :probe

-- name: probe_delete_lock
DELETE FROM rota_locks WHERE name = :probe

-- name: probe_sequences
UPDATE rota_counters SET value = value WHERE name = 'token'
