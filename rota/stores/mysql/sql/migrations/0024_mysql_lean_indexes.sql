-- rota schema, version 24 (MySQL/MariaDB): fewer index entries moved by a claim and a finish
-- (issue 42 item 4). MySQL has no partial indexes: every secondary index holding `status`
-- moved an entry of every run at its claim and at its finish, a plain run's too in the
-- indexes of limits, rates, schedules and misfires it is in nothing of, and a finish the
-- claim's and due indexes, which only pending runs are looked for in. Each such index now
-- keys a virtual column that is NULL outside what the index is for (PostgreSQL's partial
-- index predicate): an entry whose columns do not change is not touched. The queries that
-- read these indexes name the virtual columns (MariaDB matches an index on a virtual column
-- only to a query that names it). One ALTER: it happens whole or not at all.
-- misfire_pending never holds a date with a zero month or day (a hand edit without strict
-- mode): such a value became NULL in a column computed under rota's NO_ZERO_DATE and stayed
-- itself under the editor's sql_mode, so the index kept an entry its row no longer had (the
-- run found as a pending misfire after its end; CHECK TABLE then marks the index corrupted
-- and every read of it fails). It is 1000-01-01 instead, under every sql_mode: found, at once.
ALTER TABLE rota_runs
    ADD COLUMN pending_held    TINYINT     AS (CASE WHEN status = 'pending' THEN held END) VIRTUAL,
    ADD COLUMN limit_status    VARCHAR(16) AS (CASE WHEN limit_name IS NOT NULL THEN status END) VIRTUAL,
    ADD COLUMN rate_status     VARCHAR(16) AS (CASE WHEN rate_name IS NOT NULL THEN status END) VIRTUAL,
    ADD COLUMN sched_status    VARCHAR(16) AS (CASE WHEN schedule IS NOT NULL THEN status END) VIRTUAL,
    ADD COLUMN misfire_pending DATETIME(6) AS (CASE WHEN status = 'pending' AND misfire_at IS NOT NULL THEN
        IF(FLOOR((misfire_at + 0) / 100000000) MOD 100 > 0 AND FLOOR((misfire_at + 0) / 1000000) MOD 100 > 0,
           misfire_at, TIMESTAMP '1000-01-01 00:00:00') END) VIRTUAL,
    ADD COLUMN finished_status VARCHAR(16) AS (CASE WHEN finished_at IS NOT NULL THEN status END) VIRTUAL,
    ADD COLUMN finished_attempt INT AS (CASE WHEN finished_at IS NOT NULL THEN attempt END) VIRTUAL,
    DROP INDEX rota_runs_claim,
    DROP INDEX rota_runs_due,
    DROP INDEX rota_runs_limit_waiting,
    DROP INDEX rota_runs_rate_waiting,
    DROP INDEX rota_runs_held,
    DROP INDEX rota_runs_schedule_status,
    DROP INDEX rota_runs_misfire,
    DROP INDEX rota_runs_finished,
    ADD INDEX rota_runs_claim (pending_held, priority DESC, due_at, id),
    ADD INDEX rota_runs_due (pending_held, due_at),
    ADD INDEX rota_runs_limit_waiting (limit_name, limit_key(255), limit_status, held, priority DESC, due_at, id),
    ADD INDEX rota_runs_rate_waiting (rate_name, rate_key(255), rate_status, held, priority DESC, due_at, id),
    ADD INDEX rota_runs_held (schedule, held, sched_status, scheduled_for, id),
    ADD INDEX rota_runs_schedule_status (schedule, sched_status, id),
    ADD INDEX rota_runs_misfire (misfire_pending),
    ADD INDEX rota_runs_finished (finished_at, finished_status, finished_attempt);
