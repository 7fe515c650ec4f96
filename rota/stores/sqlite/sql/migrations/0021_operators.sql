-- rota schema, version 21 (SQLite): queues paused fleet-wide, and every declared task's name
-- (issue 44). See the PostgreSQL migration of the same number.
CREATE TABLE rota_queue_pauses (
    queue     TEXT NOT NULL PRIMARY KEY,
    paused_at REAL NOT NULL,
    paused_by TEXT
) STRICT, WITHOUT ROWID;

CREATE TABLE rota_tasks (
    task        TEXT NOT NULL PRIMARY KEY,
    declared_at REAL NOT NULL
) STRICT, WITHOUT ROWID;

ALTER TABLE rota_schedules ADD COLUMN notify_on TEXT;
