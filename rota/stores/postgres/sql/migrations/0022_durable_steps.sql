-- rota schema, version 22 (PostgreSQL): durable steps, parked runs, signals and progress
-- (issue 43). Four tables beside rota_runs, none of its columns: rota_runs and rota_history
-- keep their column order (the history sweep moves rows as they are), and a run that never
-- uses steps costs nothing here.
--
-- A step's checkpoint: one row per (run, step name), written by the worker whose token holds
-- the run (the INSERT reads rota_runs in the same statement: a stale token saves nothing).
-- outcome is 'succeeded' (result: its JSON) or 'failed' (error: its JSON); a failed step is
-- run again on the next attempt and its row replaced.
CREATE TABLE rota_steps (
    run_id      bigint      NOT NULL,
    name        text        NOT NULL,
    seq         integer     NOT NULL,
    attempt     integer     NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    outcome     text        NOT NULL,
    result      text,
    error       text,
    PRIMARY KEY (run_id, name)
);

-- A parked run (ctx.sleep / ctx.wait_for): pending, due at `until` (its due_at), no token,
-- no lease, no slot. kind 'sleep' or 'signal' (name: the signal's). Deleted when the handler
-- passes the wait it parked on. `token`: the run's at the park; a row whose run has been
-- claimed since (another token) or is not pending is over, and ignored.
CREATE TABLE rota_waits (
    run_id bigint      PRIMARY KEY,
    token  bigint      NOT NULL,
    kind   text        NOT NULL,
    name   text,
    until  timestamptz NOT NULL,
    since  timestamptz NOT NULL
);

-- Signals (App.signal): kept from the moment they are sent, before or during the wait; the
-- first of a name per run is kept.
CREATE TABLE rota_signals (
    run_id  bigint      NOT NULL,
    name    text        NOT NULL,
    payload text        NOT NULL,
    sent_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, name)
);

-- ctx.progress, written with the heartbeat (at most one write per run per heartbeat).
CREATE TABLE rota_progress (
    run_id     bigint      PRIMARY KEY,
    fraction   real        NOT NULL,
    message    text,
    updated_at timestamptz NOT NULL
);
