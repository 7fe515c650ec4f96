-- SQLite queries: retries and backfills (App.retry, App.retry_many, App.backfill).
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- ===================================================================================-- faults-store (issue 10): retries that keep key and backoff; lost and pruned workers
-- ==========================================================================================
-- name: retry_source
SELECT key, backoff FROM rota_runs WHERE id = :id

-- ===== issue 20: backfill, jitter, retry_many (branch flow-sched, 0009) ==============
-- name: last_run_id
SELECT coalesce(max(id), 0) FROM rota_runs

-- name: retry_lock
-- Nothing to take: a write transaction (BEGIN IMMEDIATE) holds the database's write lock from
-- its start, so the transactions that make retries already run one at a time.
SELECT NULL

-- name: retry_candidates
-- App.retry_many: the next batch of matching final runs after the cursor, and whether each
-- belongs to an active exclusive schedule (retried through its overlap policy instead). A run
-- retried before (by anyone) is passed over: calling retry_many twice retries nothing twice,
-- also at once (write transactions run one at a time). A run set aside as damaged (error type
-- DamagedRow, or the older CorruptArguments) is passed over too: its copy would fail the same
-- way (an explicit App.retry of it, after a repair, is allowed). An error that is not valid
-- JSON is not read (json_extract would fail the statement).
SELECT r.id, s.name IS NOT NULL
FROM rota_runs r
LEFT JOIN rota_schedules s ON s.name = r.schedule AND s.active AND s.overlap <> 'concurrent'
WHERE r.status = :status AND r.id > :after AND r.id <= :upto
  AND (:task IS NULL OR r.task = :task)
  AND (:since IS NULL OR r.finished_at >= :since)
  AND coalesce(CASE WHEN json_valid(r.error) THEN json_extract(r.error, '$.type') END, '')
      NOT IN ('DamagedRow', 'CorruptArguments')
  AND NOT EXISTS (SELECT 1 FROM rota_runs x WHERE x.retry_of = r.id)
ORDER BY r.id
LIMIT :limit

-- name: retried_before
-- A run of an exclusive schedule that retry_many retries through its overlap policy, after the
-- batch that listed it committed: retried meanwhile by another call (run after retry_lock)?
SELECT 1 FROM rota_runs WHERE retry_of = :id LIMIT 1

-- name: retry_insert
-- transition: retry
INSERT INTO rota_runs (task, queue, priority, args, kwargs, key, schedule, scheduled_for, due_at,
                       max_attempts, timeout, backoff, retry_of, created_at)
SELECT task, queue, priority, args, kwargs, key, schedule, {now}, {now},
       max_attempts, timeout, backoff, id, {now}
FROM rota_runs
WHERE id IN (SELECT value FROM json_each(:ids))
ORDER BY id
ON CONFLICT DO NOTHING
RETURNING id, task, args, kwargs

-- name: backfill_bound
-- The schedule's next planned tick (the ticks from there on are the schedule's own).
SELECT next_run_at FROM rota_schedules WHERE name = :name AND active

-- name: backfill_release
-- transition: backfill
-- A skipped tick (misfire or overlap) gives its tick up to the backfilled run; the skipped
-- run stays in history with its scheduled_for.
UPDATE rota_runs SET tick = NULL
WHERE schedule = :name AND status = 'skipped' AND tick IN (SELECT value FROM json_each(:ticks))

-- name: backfill_insert
-- transition: backfill
-- As insert_run, marked backfill (a run App.backfill makes for a past tick).
INSERT INTO rota_runs (id, task, queue, priority, status, args, kwargs, key, schedule, tick,
                       exclusive, held, scheduled_for, due_at, max_attempts, timeout, backoff,
                       error, finished_at, retry_of, created_at, backfill,
                       limit_name, limit_key, rate_name, rate_key)
VALUES (:id, :task, :queue, :priority, :status, :args, :kwargs, :key, :schedule, :tick,
        :exclusive, :held, coalesce(:scheduled_for, {now} + :delay),
        coalesce(:due_at, :scheduled_for, {now} + :delay),
        :max_attempts, :timeout, :backoff, :error,
        CASE WHEN :status = 'skipped' THEN {now} END, :retry_of, {now}, :backfill,
        :limit_name, :limit_key, :rate_name, :rate_key)
ON CONFLICT DO NOTHING
RETURNING id
