-- rota schema, version 21 (PostgreSQL): queues paused fleet-wide, and every declared task's
-- name (issue 44).
--
-- A paused queue is a row here: every claim skips the runs of a queue named here (a filter
-- on this small table read once by the claim's own statement: no extra round trip, and the claim index
-- stays in use). Runs already running finish; runs claimed ahead (held) start at their time.
CREATE TABLE rota_queue_pauses (
    queue     text        PRIMARY KEY,
    paused_at timestamptz NOT NULL DEFAULT now(),
    paused_by text
);

-- Every task a worker declares, written when it starts (never removed by a later deploy: a
-- task no worker declares any more stays known until deleted here by hand). A process without
-- the App's code (rota schedules add, rota enqueue without APP, the dashboard's API) refuses
-- a task name that is not here.
CREATE TABLE rota_tasks (
    task        text        PRIMARY KEY,
    declared_at timestamptz NOT NULL DEFAULT now()
);

-- A stored schedule's notify_on= (a JSON array of words: rota.notify), NULL for none. Workers
-- read it every few seconds (rota/operate.py): a notifier sends those events of its runs, as it
-- does for a schedule declared in code with notify_on=.
ALTER TABLE rota_schedules ADD COLUMN notify_on text;
