-- rota schema, version 11 (SQLite): each task's limit and rate as declared (rota.Limit,
-- rota.Rate), so that runs made by a process that does not declare the task get their keys
-- (see rota/limit_specs.py). Written when a worker starts: the newest deploy wins.
CREATE TABLE rota_task_flow (
    task       TEXT NOT NULL PRIMARY KEY,
    spec       TEXT NOT NULL,
    updated_at REAL NOT NULL
) STRICT, WITHOUT ROWID;
