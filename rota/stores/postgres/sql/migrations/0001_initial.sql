-- rota schema, version 1 (PostgreSQL).
--
-- Lease terms are visible in the columns: `owner` holds the run until `lease_until` (database
-- clock) under fencing `token`; every write about a running run is conditioned on that token.
--
-- Exclusive schedules (overlap skip/queue/replace) keep at most ONE active run: a partial
-- unique index over (schedule) for pending-or-running rows that are not `held`. Ticks that
-- must wait (overlap=queue, or the successor of a replaced run) are inserted `held`; the
-- trigger below hands the slot to the oldest held run when the active one reaches a final
-- status, and keeps the schedule's counters (count = count + 1, in SQL).

CREATE SEQUENCE rota_token_seq;
CREATE SEQUENCE rota_run_id_seq;

CREATE TABLE rota_runs (
    id               bigint           PRIMARY KEY DEFAULT nextval('rota_run_id_seq'),
    task             text             NOT NULL,
    queue            text             NOT NULL DEFAULT 'default',
    priority         integer          NOT NULL DEFAULT 0,
    status           text             NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'skipped', 'cancelled')),
    args             text             NOT NULL DEFAULT '[]',
    kwargs           text             NOT NULL DEFAULT '{}',
    key              text,
    schedule         text,
    tick             timestamptz,
    exclusive        boolean          NOT NULL DEFAULT false,
    held             boolean          NOT NULL DEFAULT false,
    scheduled_for    timestamptz      NOT NULL,
    due_at           timestamptz      NOT NULL,
    attempt          integer          NOT NULL DEFAULT 0,
    max_attempts     integer          NOT NULL DEFAULT 1,
    timeout          double precision,
    backoff          text,
    owner            text,
    token            bigint,
    lease_until      timestamptz,
    cancel_requested boolean          NOT NULL DEFAULT false,
    created_at       timestamptz      NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    result           text,
    error            text,
    attempts         jsonb            NOT NULL DEFAULT '[]',
    retry_of         bigint
);

-- A queue table churns: every run is updated at least twice (claim, finish), and each update
-- leaves a dead entry in the claim and status indexes until VACUUM removes it. Vacuum after
-- 2 % of the rows changed (PostgreSQL's default waits for 20 %), so that claims do not wade
-- through dead index entries on a large table.
ALTER TABLE rota_runs SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02
);

-- The claim: due pending runs by priority, then due time, then enqueue order.
CREATE INDEX rota_runs_claim ON rota_runs (priority DESC, due_at, id)
    WHERE status = 'pending' AND NOT held;
-- When is the next pending run due (the worker sleeps until then).
CREATE INDEX rota_runs_due ON rota_runs (due_at) WHERE status = 'pending' AND NOT held;
-- The rescue sweep: running runs whose lease has expired.
CREATE INDEX rota_runs_lease ON rota_runs (lease_until) WHERE status = 'running';
-- Deduplication: one pending-or-running run per (task, key).
CREATE UNIQUE INDEX rota_runs_key ON rota_runs (task, key)
    WHERE key IS NOT NULL AND status IN ('pending', 'running');
-- One run per schedule tick, whichever instance materializes it.
CREATE UNIQUE INDEX rota_runs_tick ON rota_runs (schedule, tick) WHERE tick IS NOT NULL;
-- Never two active runs of an exclusive schedule.
CREATE UNIQUE INDEX rota_runs_exclusive ON rota_runs (schedule)
    WHERE exclusive AND NOT held AND status IN ('pending', 'running');
CREATE INDEX rota_runs_schedule ON rota_runs (schedule, id) WHERE schedule IS NOT NULL;
CREATE INDEX rota_runs_held ON rota_runs (schedule, scheduled_for, id)
    WHERE held AND status = 'pending';
CREATE INDEX rota_runs_status ON rota_runs (status, id);
CREATE INDEX rota_runs_task ON rota_runs (task, id);

CREATE TABLE rota_schedules (
    name            text             PRIMARY KEY,
    task            text             NOT NULL,
    cron            text,
    every           double precision,
    tz              text             NOT NULL DEFAULT 'UTC',
    args            text             NOT NULL DEFAULT '[]',
    kwargs          text             NOT NULL DEFAULT '{}',
    overlap         text             NOT NULL DEFAULT 'skip',
    misfire         text             NOT NULL DEFAULT 'coalesce',
    misfire_grace   double precision NOT NULL DEFAULT 60,
    run_immediately boolean          NOT NULL DEFAULT false,
    queue           text             NOT NULL DEFAULT 'default',
    priority        integer          NOT NULL DEFAULT 0,
    max_attempts    integer          NOT NULL DEFAULT 1,
    timeout         double precision,
    backoff         text,
    source          text             NOT NULL DEFAULT 'api' CHECK (source IN ('code', 'api')),
    app             text,
    definition      text             NOT NULL,
    active          boolean          NOT NULL DEFAULT true,
    paused          boolean          NOT NULL DEFAULT false,
    next_run_at     timestamptz,
    last_run_at     timestamptz,
    last_status     text,
    run_count       bigint           NOT NULL DEFAULT 0,
    success_count   bigint           NOT NULL DEFAULT 0,
    failure_count   bigint           NOT NULL DEFAULT 0,
    skip_count      bigint           NOT NULL DEFAULT 0,
    created_at      timestamptz      NOT NULL DEFAULT now(),
    updated_at      timestamptz      NOT NULL DEFAULT now()
);
CREATE INDEX rota_schedules_due ON rota_schedules (next_run_at) WHERE active AND NOT paused;

CREATE TABLE rota_workers (
    id          text        PRIMARY KEY,
    host        text        NOT NULL,
    pid         integer     NOT NULL,
    concurrency integer     NOT NULL,
    queues      text,
    state       text        NOT NULL DEFAULT 'running',
    started_at  timestamptz NOT NULL DEFAULT now(),
    last_seen   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE rota_locks (
    name        text        PRIMARY KEY,
    owner       text,
    token       bigint      NOT NULL,
    acquired_at timestamptz,
    expires_at  timestamptz
);

-- A run of a schedule reached a final status: count it, and hand an exclusive schedule's
-- slot to its oldest held run. The counters UPDATE comes first: it takes the schedule's row
-- lock, so a materializer that inserted held runs in an uncommitted transaction (it holds the
-- same lock) has committed before we look for held runs.
CREATE FUNCTION rota_run_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE rota_schedules SET
        run_count     = run_count     + (NEW.started_at IS NOT NULL AND NEW.status <> 'skipped')::int,
        success_count = success_count + (NEW.status = 'succeeded')::int,
        failure_count = failure_count + (NEW.status = 'failed')::int,
        skip_count    = skip_count    + (NEW.status = 'skipped')::int,
        last_status   = CASE WHEN NEW.started_at IS NOT NULL AND NEW.started_at >= coalesce(last_run_at, '-infinity')
                             THEN NEW.status ELSE last_status END,
        last_run_at   = CASE WHEN NEW.started_at IS NOT NULL
                             THEN greatest(coalesce(last_run_at, '-infinity'), NEW.started_at) ELSE last_run_at END
    WHERE name = NEW.schedule;
    IF NEW.exclusive AND NOT NEW.held AND TG_OP = 'UPDATE' THEN
        UPDATE rota_runs SET held = false
        WHERE id = (SELECT id FROM rota_runs
                    WHERE schedule = NEW.schedule AND held AND status = 'pending'
                    ORDER BY scheduled_for, id LIMIT 1)
          AND NOT EXISTS (SELECT 1 FROM rota_runs
                          WHERE schedule = NEW.schedule AND exclusive AND NOT held
                            AND status IN ('pending', 'running'));
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER rota_run_finished AFTER UPDATE OF status ON rota_runs FOR EACH ROW
    WHEN (NEW.schedule IS NOT NULL
          AND OLD.status IN ('pending', 'running')
          AND NEW.status NOT IN ('pending', 'running'))
    EXECUTE FUNCTION rota_run_finished();

CREATE TRIGGER rota_run_skipped AFTER INSERT ON rota_runs FOR EACH ROW
    WHEN (NEW.schedule IS NOT NULL AND NEW.status = 'skipped')
    EXECUTE FUNCTION rota_run_finished();
