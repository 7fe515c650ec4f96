-- rota schema, version 1 (SQLite). Same tables, indexes and trigger as the PostgreSQL
-- schema; times are REAL Unix epoch seconds (UTC), booleans INTEGER 0/1.
--
-- Lease terms are visible in the columns: `owner` holds the run until `lease_until` under
-- fencing `token`. Exclusive schedules keep at most one active run (partial unique index);
-- the trigger hands the slot to the oldest held run and keeps the schedule's counters.

CREATE TABLE rota_counters (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
) STRICT;
INSERT INTO rota_counters (name, value) VALUES ('token', 0);

CREATE TABLE rota_runs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    task             TEXT    NOT NULL,
    queue            TEXT    NOT NULL DEFAULT 'default',
    priority         INTEGER NOT NULL DEFAULT 0,
    status           TEXT    NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'skipped', 'cancelled')),
    args             TEXT    NOT NULL DEFAULT '[]',
    kwargs           TEXT    NOT NULL DEFAULT '{}',
    key              TEXT,
    schedule         TEXT,
    tick             REAL,
    exclusive        INTEGER NOT NULL DEFAULT 0,
    held             INTEGER NOT NULL DEFAULT 0,
    scheduled_for    REAL    NOT NULL,
    due_at           REAL    NOT NULL,
    attempt          INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL DEFAULT 1,
    timeout          REAL,
    backoff          TEXT,
    owner            TEXT,
    token            INTEGER,
    lease_until      REAL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    created_at       REAL    NOT NULL,
    started_at       REAL,
    finished_at      REAL,
    result           TEXT,
    error            TEXT,
    attempts         TEXT    NOT NULL DEFAULT '[]',
    retry_of         INTEGER
) STRICT;

CREATE INDEX rota_runs_claim ON rota_runs (priority DESC, due_at, id)
    WHERE status = 'pending' AND NOT held;
CREATE INDEX rota_runs_due ON rota_runs (due_at) WHERE status = 'pending' AND NOT held;
CREATE INDEX rota_runs_lease ON rota_runs (lease_until) WHERE status = 'running';
CREATE UNIQUE INDEX rota_runs_key ON rota_runs (task, key)
    WHERE key IS NOT NULL AND status IN ('pending', 'running');
CREATE UNIQUE INDEX rota_runs_tick ON rota_runs (schedule, tick) WHERE tick IS NOT NULL;
CREATE UNIQUE INDEX rota_runs_exclusive ON rota_runs (schedule)
    WHERE exclusive AND NOT held AND status IN ('pending', 'running');
CREATE INDEX rota_runs_schedule ON rota_runs (schedule, id) WHERE schedule IS NOT NULL;
CREATE INDEX rota_runs_held ON rota_runs (schedule, scheduled_for, id)
    WHERE held AND status = 'pending';
CREATE INDEX rota_runs_status ON rota_runs (status, id);
CREATE INDEX rota_runs_task ON rota_runs (task, id);

CREATE TABLE rota_schedules (
    name            TEXT    PRIMARY KEY,
    task            TEXT    NOT NULL,
    cron            TEXT,
    every           REAL,
    tz              TEXT    NOT NULL DEFAULT 'UTC',
    args            TEXT    NOT NULL DEFAULT '[]',
    kwargs          TEXT    NOT NULL DEFAULT '{}',
    overlap         TEXT    NOT NULL DEFAULT 'skip',
    misfire         TEXT    NOT NULL DEFAULT 'coalesce',
    misfire_grace   REAL    NOT NULL DEFAULT 60,
    run_immediately INTEGER NOT NULL DEFAULT 0,
    queue           TEXT    NOT NULL DEFAULT 'default',
    priority        INTEGER NOT NULL DEFAULT 0,
    max_attempts    INTEGER NOT NULL DEFAULT 1,
    timeout         REAL,
    backoff         TEXT,
    source          TEXT    NOT NULL DEFAULT 'api' CHECK (source IN ('code', 'api')),
    app             TEXT,
    definition      TEXT    NOT NULL,
    active          INTEGER NOT NULL DEFAULT 1,
    paused          INTEGER NOT NULL DEFAULT 0,
    next_run_at     REAL,
    last_run_at     REAL,
    last_status     TEXT,
    run_count       INTEGER NOT NULL DEFAULT 0,
    success_count   INTEGER NOT NULL DEFAULT 0,
    failure_count   INTEGER NOT NULL DEFAULT 0,
    skip_count      INTEGER NOT NULL DEFAULT 0,
    created_at      REAL    NOT NULL,
    updated_at      REAL    NOT NULL
) STRICT;
CREATE INDEX rota_schedules_due ON rota_schedules (next_run_at) WHERE active AND NOT paused;

CREATE TABLE rota_workers (
    id          TEXT    PRIMARY KEY,
    host        TEXT    NOT NULL,
    pid         INTEGER NOT NULL,
    concurrency INTEGER NOT NULL,
    queues      TEXT,
    state       TEXT    NOT NULL DEFAULT 'running',
    started_at  REAL    NOT NULL,
    last_seen   REAL    NOT NULL
) STRICT;

CREATE TABLE rota_locks (
    name        TEXT    PRIMARY KEY,
    owner       TEXT,
    token       INTEGER NOT NULL,
    acquired_at REAL,
    expires_at  REAL
) STRICT;

CREATE TRIGGER rota_run_finished AFTER UPDATE OF status ON rota_runs
WHEN NEW.schedule IS NOT NULL
     AND OLD.status IN ('pending', 'running')
     AND NEW.status NOT IN ('pending', 'running')
BEGIN
    UPDATE rota_schedules SET
        run_count     = run_count     + (NEW.started_at IS NOT NULL AND NEW.status <> 'skipped'),
        success_count = success_count + (NEW.status = 'succeeded'),
        failure_count = failure_count + (NEW.status = 'failed'),
        skip_count    = skip_count    + (NEW.status = 'skipped'),
        last_status   = CASE WHEN NEW.started_at IS NOT NULL AND NEW.started_at >= coalesce(last_run_at, -1e300)
                             THEN NEW.status ELSE last_status END,
        last_run_at   = CASE WHEN NEW.started_at IS NOT NULL
                             THEN max(coalesce(last_run_at, -1e300), NEW.started_at) ELSE last_run_at END
    WHERE name = NEW.schedule;
    UPDATE rota_runs SET held = 0
    WHERE NEW.exclusive AND NOT NEW.held
      AND id = (SELECT id FROM rota_runs
                WHERE schedule = NEW.schedule AND held AND status = 'pending'
                ORDER BY scheduled_for, id LIMIT 1)
      AND NOT EXISTS (SELECT 1 FROM rota_runs
                      WHERE schedule = NEW.schedule AND exclusive AND NOT held
                        AND status IN ('pending', 'running'));
END;

CREATE TRIGGER rota_run_skipped AFTER INSERT ON rota_runs
WHEN NEW.schedule IS NOT NULL AND NEW.status = 'skipped'
BEGIN
    UPDATE rota_schedules SET skip_count = skip_count + 1 WHERE name = NEW.schedule;
END;
