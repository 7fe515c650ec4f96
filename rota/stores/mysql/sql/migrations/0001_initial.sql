-- rota schema, version 1 (MySQL 8.0+ / MariaDB 10.6+). Same tables as the PostgreSQL and
-- SQLite schemas; times are DATETIME(6) in UTC (the session's time_zone is '+00:00'),
-- booleans TINYINT 0/1, JSON as LONGTEXT (a damaged value is kept as found), names compared
-- byte for byte (utf8mb4_bin, as PostgreSQL and SQLite compare them).
--
-- No partial indexes: a partial unique index becomes a generated column that is NULL unless
-- the row is in the index's predicate, with a unique index on it (NULLs never collide):
--   rota_runs_key       (task, key)  while pending or running   -> active_key
--   rota_runs_exclusive (schedule)   while active and not held  -> exclusive_slot
-- Run counts per status are counted from rota_runs_status (no counter row: under row locks
-- every enqueue and finish would queue on it).
--   transition: none (schema)

CREATE TABLE rota_counters (
    name  VARCHAR(64) NOT NULL PRIMARY KEY,
    value BIGINT      NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
INSERT INTO rota_counters (name, value) VALUES ('token', 0);

CREATE TABLE rota_runs (
    id               BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    task             VARCHAR(255) NOT NULL,
    queue            VARCHAR(255) NOT NULL DEFAULT 'default',
    priority         INT          NOT NULL DEFAULT 0,
    status           VARCHAR(16)  NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'skipped', 'cancelled')),
    args             LONGTEXT     NOT NULL DEFAULT '[]',
    kwargs           LONGTEXT     NOT NULL DEFAULT '{}',
    `key`            VARCHAR(512),
    schedule         VARCHAR(255),
    tick             DATETIME(6),
    exclusive        TINYINT      NOT NULL DEFAULT 0,
    held             TINYINT      NOT NULL DEFAULT 0,
    scheduled_for    DATETIME(6)  NOT NULL,
    due_at           DATETIME(6)  NOT NULL,
    attempt          INT          NOT NULL DEFAULT 0,
    max_attempts     INT          NOT NULL DEFAULT 1,
    timeout          DOUBLE,
    backoff          LONGTEXT,
    owner            VARCHAR(255),
    token            BIGINT,
    lease_until      DATETIME(6),
    cancel_requested TINYINT      NOT NULL DEFAULT 0,
    created_at       DATETIME(6)  NOT NULL,
    started_at       DATETIME(6),
    finished_at      DATETIME(6),
    result           LONGTEXT,
    error            LONGTEXT,
    attempts         LONGTEXT     NOT NULL DEFAULT '[]',
    retry_of         BIGINT,
    active_key       VARCHAR(512) AS (CASE WHEN status IN ('pending', 'running') THEN `key` END) STORED,
    exclusive_slot   VARCHAR(255) AS (CASE WHEN exclusive <> 0 AND held = 0 AND status IN ('pending', 'running')
                                           THEN schedule END) STORED,
    UNIQUE KEY rota_runs_key (task, active_key),
    UNIQUE KEY rota_runs_tick (schedule, tick),
    UNIQUE KEY rota_runs_exclusive (exclusive_slot),
    KEY rota_runs_claim (status, held, priority DESC, due_at, id),
    KEY rota_runs_due (status, held, due_at),
    KEY rota_runs_lease (status, lease_until),
    KEY rota_runs_schedule (schedule, id),
    KEY rota_runs_held (schedule, held, status, scheduled_for, id),
    KEY rota_runs_status (status, id),
    KEY rota_runs_task (task, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE rota_schedules (
    name            VARCHAR(255) NOT NULL PRIMARY KEY,
    task            VARCHAR(255) NOT NULL,
    cron            VARCHAR(255),
    every           DOUBLE,
    tz              VARCHAR(64)  NOT NULL DEFAULT 'UTC',
    args            LONGTEXT     NOT NULL DEFAULT '[]',
    kwargs          LONGTEXT     NOT NULL DEFAULT '{}',
    overlap         VARCHAR(16)  NOT NULL DEFAULT 'skip',
    misfire         VARCHAR(16)  NOT NULL DEFAULT 'coalesce',
    misfire_grace   DOUBLE       NOT NULL DEFAULT 60,
    run_immediately TINYINT      NOT NULL DEFAULT 0,
    queue           VARCHAR(255) NOT NULL DEFAULT 'default',
    priority        INT          NOT NULL DEFAULT 0,
    max_attempts    INT          NOT NULL DEFAULT 1,
    timeout         DOUBLE,
    backoff         LONGTEXT,
    source          VARCHAR(8)   NOT NULL DEFAULT 'api' CHECK (source IN ('code', 'api')),
    app             VARCHAR(255),
    definition      LONGTEXT     NOT NULL,
    active          TINYINT      NOT NULL DEFAULT 1,
    paused          TINYINT      NOT NULL DEFAULT 0,
    next_run_at     DATETIME(6),
    last_run_at     DATETIME(6),
    last_status     VARCHAR(16),
    run_count       BIGINT       NOT NULL DEFAULT 0,
    success_count   BIGINT       NOT NULL DEFAULT 0,
    failure_count   BIGINT       NOT NULL DEFAULT 0,
    skip_count      BIGINT       NOT NULL DEFAULT 0,
    created_at      DATETIME(6)  NOT NULL,
    updated_at      DATETIME(6)  NOT NULL,
    KEY rota_schedules_due (active, paused, next_run_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE rota_workers (
    id          VARCHAR(255) NOT NULL PRIMARY KEY,
    host        VARCHAR(255) NOT NULL,
    pid         BIGINT       NOT NULL,
    concurrency INT          NOT NULL,
    queues      LONGTEXT,
    state       VARCHAR(16)  NOT NULL DEFAULT 'running',
    started_at  DATETIME(6)  NOT NULL,
    last_seen   DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE rota_locks (
    name        VARCHAR(255) NOT NULL PRIMARY KEY,
    owner       VARCHAR(255),
    token       BIGINT       NOT NULL,
    acquired_at DATETIME(6),
    expires_at  DATETIME(6)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- A scheduled run's end counts on its schedule (a count at its maximum stays there). The
-- exclusive slot's hand-over to the oldest held run is the store's (promote_held after the
-- statement that ended the run): a MySQL trigger cannot update the table that fired it.
CREATE TRIGGER rota_run_finished AFTER UPDATE ON rota_runs FOR EACH ROW
BEGIN
    -- (tested here, not in the UPDATE's WHERE: a run of no schedule runs no statement)
    IF NEW.schedule IS NOT NULL AND OLD.status IN ('pending', 'running')
       AND NEW.status NOT IN ('pending', 'running') THEN
        UPDATE rota_schedules SET
            run_count     = run_count     + (run_count < 9223372036854775807
                                             AND NEW.started_at IS NOT NULL AND NEW.status <> 'skipped'),
            success_count = success_count + (success_count < 9223372036854775807 AND NEW.status = 'succeeded'),
            failure_count = failure_count + (failure_count < 9223372036854775807 AND NEW.status = 'failed'),
            skip_count    = skip_count    + (skip_count < 9223372036854775807 AND NEW.status = 'skipped'),
            last_status   = CASE WHEN NEW.started_at IS NOT NULL AND (last_run_at IS NULL OR NEW.started_at >= last_run_at)
                                 THEN NEW.status ELSE last_status END,
            last_run_at   = CASE WHEN NEW.started_at IS NOT NULL AND (last_run_at IS NULL OR NEW.started_at > last_run_at)
                                 THEN NEW.started_at ELSE last_run_at END
        WHERE name = NEW.schedule;
    END IF;
END;

CREATE TRIGGER rota_run_skipped AFTER INSERT ON rota_runs FOR EACH ROW
BEGIN
    IF NEW.schedule IS NOT NULL AND NEW.status = 'skipped' THEN
        UPDATE rota_schedules SET skip_count = skip_count + (skip_count < 9223372036854775807)
        WHERE name = NEW.schedule;
    END IF;
END;
