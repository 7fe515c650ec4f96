-- rota schema, version 25 (MySQL/MariaDB): names compared as exact strings. utf8mb4_bin is a
-- PAD SPACE collation: it compares 'a' and 'a ' as equal (trailing spaces ignored), so a
-- schedule 'nightly ' upserted over 'nightly', a unique key 'x ' was deduplicated against
-- 'x', a limit pool or key 'l ' shared the room of 'l', a task 'job ' was declared as 'job',
-- a step 'b ' collided with 'b' in rota_steps' primary key; SQLite and PostgreSQL tell them
-- apart. Every table holding names converts to a binary NO PAD collation, chosen when this
-- migration runs (rota/stores/mysql/migrate.py): utf8mb4_nopad_bin on MariaDB,
-- utf8mb4_0900_bin on MySQL 8.0.17+. Both compare and sort by code point as utf8mb4_bin did
-- (case and accents were told apart already); only trailing spaces now count. Index lengths
-- do not change (utf8mb4 either way). A table is rebuilt by its ALTER (rota_runs: writes
-- wait for it); each is run again whole if the migration is cut short.
ALTER TABLE rota_counters CONVERT TO CHARACTER SET utf8mb4 COLLATE {nopad_bin};
ALTER TABLE rota_runs CONVERT TO CHARACTER SET utf8mb4 COLLATE {nopad_bin};
ALTER TABLE rota_schedules CONVERT TO CHARACTER SET utf8mb4 COLLATE {nopad_bin};
ALTER TABLE rota_workers CONVERT TO CHARACTER SET utf8mb4 COLLATE {nopad_bin};
ALTER TABLE rota_locks CONVERT TO CHARACTER SET utf8mb4 COLLATE {nopad_bin};
ALTER TABLE rota_dashboard_signouts CONVERT TO CHARACTER SET utf8mb4 COLLATE {nopad_bin};
ALTER TABLE rota_unique CONVERT TO CHARACTER SET utf8mb4 COLLATE {nopad_bin};
ALTER TABLE rota_limits CONVERT TO CHARACTER SET utf8mb4 COLLATE {nopad_bin};
ALTER TABLE rota_rates CONVERT TO CHARACTER SET utf8mb4 COLLATE {nopad_bin};
ALTER TABLE rota_rate_starts CONVERT TO CHARACTER SET utf8mb4 COLLATE {nopad_bin};
ALTER TABLE rota_task_flow CONVERT TO CHARACTER SET utf8mb4 COLLATE {nopad_bin};
ALTER TABLE rota_queue_pauses CONVERT TO CHARACTER SET utf8mb4 COLLATE {nopad_bin};
ALTER TABLE rota_tasks CONVERT TO CHARACTER SET utf8mb4 COLLATE {nopad_bin};
ALTER TABLE rota_steps CONVERT TO CHARACTER SET utf8mb4 COLLATE {nopad_bin};
ALTER TABLE rota_waits CONVERT TO CHARACTER SET utf8mb4 COLLATE {nopad_bin};
ALTER TABLE rota_signals CONVERT TO CHARACTER SET utf8mb4 COLLATE {nopad_bin};
ALTER TABLE rota_progress CONVERT TO CHARACTER SET utf8mb4 COLLATE {nopad_bin};
