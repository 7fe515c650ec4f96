-- rota schema, version 11 (PostgreSQL): each task's limit and rate as declared (rota.Limit,
-- rota.Rate), so that runs made by a process that does not declare the task (rota trigger,
-- rota retry, retry_many, backfill, another app's schedule ticks) get their keys (see
-- rota/limit_specs.py). Written when a worker starts: the newest deploy wins.
CREATE TABLE rota_task_flow (
    task       text        PRIMARY KEY,
    spec       text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
