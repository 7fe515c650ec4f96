-- PostgreSQL queries: retries and backfills (App.retry, App.retry_many, App.backfill).
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- ===================================================================================-- faults-store (issue 10): retries that keep key and backoff; lost and pruned workers
-- ==========================================================================================
-- name: retry_source
SELECT key, backoff FROM rota_runs_all WHERE id = %(id)s

-- ===== issue 20: backfill, jitter, retry_many (branch flow-sched, 0009) ==============
-- name: last_run_id
SELECT greatest((SELECT coalesce(max(id), 0) FROM rota_runs), (SELECT coalesce(max(id), 0) FROM rota_history))

-- name: retry_lock
-- Orders every transaction that makes a retry (a batch of App.retry_many, App.retry) in this
-- schema, until it commits: retry_candidates, run after it (READ COMMITTED: a statement's
-- snapshot is taken when it starts), sees the retries every earlier one made. Without it two
-- concurrent retry_many calls both found each run "not retried yet" and both retried it. A
-- row lock on the candidates could not do it: a run may be in rota_history, and a retry
-- made by App.retry locks nothing the candidates statement reads.
SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.rota_retry'))

-- name: retry_candidates
-- App.retry_many: the next batch of matching final runs after the cursor, and whether each
-- belongs to an active exclusive schedule (retried through its overlap policy instead). A run
-- retried before (by anyone) is passed over: calling retry_many twice retries nothing twice,
-- also at once (run after retry_lock). A run set aside as damaged (error type DamagedRow, or
-- the older CorruptArguments) is passed over too: its copy would fail the same way (an explicit
-- App.retry of it, after a repair, is allowed). The type is read from the error's text (it
-- comes first, as rota writes it), not parsed: a damaged error must not fail the statement.
-- Succeeded runs are in both tables (schema 17); the history only when they are asked for (a
-- one-time filter: a generic plan cannot leave it out by its CHECK).
SELECT r.id, s.name IS NOT NULL
FROM (SELECT id, task, schedule, finished_at, error FROM rota_runs
      WHERE status = %(status)s AND id > %(after)s AND id <= %(upto)s
      UNION ALL
      SELECT id, task, schedule, finished_at, error FROM rota_history
      WHERE %(status)s::text = 'succeeded' AND id > %(after)s AND id <= %(upto)s) AS r
LEFT JOIN rota_schedules s ON s.name = r.schedule AND s.active AND s.overlap <> 'concurrent'
WHERE (%(task)s::text IS NULL OR r.task = %(task)s::text)
  AND (%(since)s::timestamptz IS NULL OR r.finished_at >= %(since)s::timestamptz)
  AND coalesce(substring(r.error FROM '^\{\s*"type"\s*:\s*"([A-Za-z]+)"'), '') NOT IN ('DamagedRow', 'CorruptArguments')
  AND NOT EXISTS (SELECT 1 FROM rota_runs_all x WHERE x.retry_of = r.id)
ORDER BY r.id
LIMIT %(limit)s

-- name: retried_before
-- A run of an exclusive schedule that retry_many retries through its overlap policy, after the
-- batch that listed it committed: retried meanwhile by another call (run after retry_lock)?
SELECT 1 FROM rota_runs_all WHERE retry_of = %(id)s LIMIT 1

-- name: retry_insert
-- transition: retry
INSERT INTO rota_runs (task, queue, priority, args, kwargs, key, schedule, scheduled_for, due_at,
                       max_attempts, timeout, backoff, retry_of)
SELECT task, queue, priority, args, kwargs, key, schedule, {now}, {now},
       max_attempts, timeout, backoff, id
FROM rota_runs_all
WHERE id = ANY(%(ids)s::bigint[])
ORDER BY id
ON CONFLICT DO NOTHING
RETURNING id, task, args, kwargs

-- name: backfill_bound
-- The schedule's next planned tick (the ticks from there on are the schedule's own). The
-- row lock orders this backfill with the ticker's advance and with the hand-over of the
-- exclusive slot (see lock_schedule).
SELECT next_run_at FROM rota_schedules WHERE name = %(name)s AND active FOR UPDATE

-- name: backfill_release
-- transition: backfill
-- A skipped tick (misfire or overlap) gives its tick up to the backfilled run; the skipped
-- run stays in history with its scheduled_for.
UPDATE rota_runs SET tick = NULL
WHERE schedule = %(name)s AND status = 'skipped' AND tick = ANY(%(ticks)s::timestamptz[])

-- name: backfill_insert
-- transition: backfill
-- As insert_run, marked backfill (a run App.backfill makes for a past tick).
INSERT INTO rota_runs (id, task, queue, priority, status, args, kwargs, key, schedule, tick,
                       exclusive, held, scheduled_for, due_at, max_attempts, timeout, backoff,
                       error, finished_at, retry_of, backfill,
                       limit_name, limit_key, rate_name, rate_key)
VALUES (coalesce(%(id)s::bigint, nextval('rota_run_id_seq')), %(task)s, %(queue)s, %(priority)s,
        %(status)s, %(args)s, %(kwargs)s, %(key)s,
        %(schedule)s, %(tick)s, %(exclusive)s, %(held)s,
        coalesce(%(scheduled_for)s, {now} + make_interval(secs => %(delay)s)),
        coalesce(%(due_at)s, %(scheduled_for)s, {now} + make_interval(secs => %(delay)s)),
        %(max_attempts)s, %(timeout)s, %(backoff)s, %(error)s,
        CASE WHEN %(status)s = 'skipped' THEN {now} END, %(retry_of)s, %(backfill)s,
        %(limit_name)s, %(limit_key)s, %(rate_name)s, %(rate_key)s)
ON CONFLICT DO NOTHING
RETURNING id
