-- rota schema, version 10 (PostgreSQL): concurrency limits and rate limits (rota.Limit,
-- rota.Rate; design note in rota/stores/_limits.py).
--
-- A run of a task with a limit or a rate carries the names and resolved keys of its limit
-- and its rate. The plain claim leaves such runs out (its index says so, so it never even
-- walks past them); the flow claim takes them while their limit has a free slot and their
-- rate has room in its sliding window. The running count of a limit key is never stored:
-- it is the number of its runs that are `running` (read through rota_runs_limit_running),
-- so every statement that ends or returns a run (finish, hand-back, rescue, cancel) frees
-- the slot by changing the run, once, and a fenced-off late result frees nothing.
ALTER TABLE rota_runs ADD COLUMN limit_name text, ADD COLUMN limit_key text,
                      ADD COLUMN rate_name text, ADD COLUMN rate_key text;

-- What the code declares, written when a worker starts (the newest deploy wins).
CREATE TABLE rota_limits (
    name       text        PRIMARY KEY,
    max        integer     NOT NULL CHECK (max > 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE rota_rates (
    name       text             PRIMARY KEY,
    max        integer          NOT NULL CHECK (max > 0),
    per        double precision NOT NULL CHECK (per > 0),
    updated_at timestamptz      NOT NULL DEFAULT now()
);
-- The sliding window's log: one row per start of a rated run, pruned once out of the window.
CREATE TABLE rota_rate_starts (
    name       text        NOT NULL,
    key        text        NOT NULL,
    started_at timestamptz NOT NULL
);
CREATE INDEX rota_rate_starts_window ON rota_rate_starts (name, key, started_at);

-- The plain claim's index leaves limited and rated runs out.
DROP INDEX rota_runs_claim;
CREATE INDEX rota_runs_claim ON rota_runs (priority DESC, due_at, id)
    WHERE status = 'pending' AND NOT held AND limit_name IS NULL AND rate_name IS NULL;
-- The flow claim walks the keys that have waiting runs, each key's first due run found
-- through these indexes, and counts each limit key's running runs.
CREATE INDEX rota_runs_limit_waiting ON rota_runs (limit_name, limit_key, priority DESC, due_at, id)
    WHERE status = 'pending' AND NOT held AND limit_name IS NOT NULL;
CREATE INDEX rota_runs_rate_waiting ON rota_runs (rate_name, rate_key, priority DESC, due_at, id)
    WHERE status = 'pending' AND NOT held AND rate_name IS NOT NULL;
-- The flow claim's first walk: the waiting runs in the claim's order.
CREATE INDEX rota_runs_gated_order ON rota_runs (priority DESC, due_at, id)
    WHERE status = 'pending' AND NOT held AND (limit_name IS NOT NULL OR rate_name IS NOT NULL);
CREATE INDEX rota_runs_gated_due ON rota_runs (due_at)
    WHERE status = 'pending' AND NOT held AND (limit_name IS NOT NULL OR rate_name IS NOT NULL);
CREATE INDEX rota_runs_limit_running ON rota_runs (limit_name, limit_key)
    WHERE status = 'running' AND limit_name IS NOT NULL;

-- A limited run that stops running frees a slot: wake the workers at once (they claim the
-- next run of that key), on the schema's channel (as the `notify` query).
CREATE FUNCTION rota_limit_freed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('rota' || CASE
        WHEN current_schema() = 'public' THEN ''
        WHEN octet_length(current_schema()) <= 58 THEN ':' || current_schema()
        ELSE ':' || md5(current_schema()) END, 'run');
    RETURN NULL;
END $$;
CREATE TRIGGER rota_limit_freed AFTER UPDATE OF status ON rota_runs
    FOR EACH ROW WHEN (OLD.status = 'running' AND NEW.status <> 'running' AND OLD.limit_name IS NOT NULL)
    EXECUTE FUNCTION rota_limit_freed();
