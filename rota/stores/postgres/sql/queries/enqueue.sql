-- PostgreSQL queries: new runs: inserts, keys and uniqueness windows, wake-ups (NOTIFY), trace context.
-- Named queries of the PostgreSQL store. Every backend defines the same names (a test checks).
-- `{now}` stands for the store's clock: the configured clock if any, else now().
-- Batch writes take one JSON parameter `rows`; `r.id = ANY(ARRAY(...))` makes the planner
-- fetch those rows by key instead of hashing every running run.
-- A status tested where rows are found by id is written `(status = 'running') IS TRUE`: the
-- same test for a NOT NULL column, but no index on status can serve it, so the planner takes
-- the ids through the primary key. Written plainly, it may walk rota_runs_active's entries of
-- that status instead, dead ones included: under a transaction held open elsewhere, those of
-- every run claimed since (bench/xmin_hold.py: the finish, not only the claim, slowed down).

-- name: insert_run
-- transition: enqueue, make_ahead, tick, trigger, retry
INSERT INTO rota_runs (id, task, queue, priority, status, args, kwargs, key, schedule, tick,
                       exclusive, held, scheduled_for, due_at, max_attempts, timeout, backoff,
                       error, finished_at, retry_of)
VALUES (coalesce(%(id)s::bigint, nextval('rota_run_id_seq')), %(task)s, %(queue)s, %(priority)s,
        %(status)s, %(args)s, %(kwargs)s, %(key)s,
        %(schedule)s, %(tick)s, %(exclusive)s, %(held)s,
        coalesce(%(scheduled_for)s, {now} + make_interval(secs => %(delay)s)),
        coalesce(%(due_at)s, %(scheduled_for)s, {now} + make_interval(secs => %(delay)s)),
        %(max_attempts)s, %(timeout)s, %(backoff)s, %(error)s,
        CASE WHEN %(status)s = 'skipped' THEN {now} END, %(retry_of)s)
ON CONFLICT DO NOTHING
RETURNING id

-- name: insert_run_gated
-- transition: enqueue
-- as insert_run, for a run with a limit or a rate (rota.Limit, rota.Rate)
INSERT INTO rota_runs (id, task, queue, priority, status, args, kwargs, key, schedule, tick,
                       exclusive, held, scheduled_for, due_at, max_attempts, timeout, backoff,
                       error, finished_at, retry_of, limit_name, limit_key, rate_name, rate_key)
VALUES (coalesce(%(id)s::bigint, nextval('rota_run_id_seq')), %(task)s, %(queue)s, %(priority)s,
        %(status)s, %(args)s, %(kwargs)s, %(key)s,
        %(schedule)s, %(tick)s, %(exclusive)s, %(held)s,
        coalesce(%(scheduled_for)s, {now} + make_interval(secs => %(delay)s)),
        coalesce(%(due_at)s, %(scheduled_for)s, {now} + make_interval(secs => %(delay)s)),
        %(max_attempts)s, %(timeout)s, %(backoff)s, %(error)s,
        CASE WHEN %(status)s = 'skipped' THEN {now} END, %(retry_of)s,
        %(limit_name)s, %(limit_key)s, %(rate_name)s, %(rate_key)s)
ON CONFLICT DO NOTHING
RETURNING id

-- name: insert_runs_bulk
-- transition: enqueue
-- COPY: plain runs in bulk (ids from next_run_ids, times computed by the caller)
COPY rota_runs (id, task, queue, priority, args, kwargs, scheduled_for, due_at, max_attempts, timeout, backoff)
FROM STDIN

-- name: insert_runs_bulk_gated
-- transition: enqueue
-- COPY: as insert_runs_bulk, for a batch where some runs have a limit or a rate
COPY rota_runs (id, task, queue, priority, args, kwargs, scheduled_for, due_at, max_attempts, timeout, backoff,
                limit_name, limit_key, rate_name, rate_key)
FROM STDIN

-- name: next_run_ids
SELECT nextval('rota_run_id_seq') FROM generate_series(1, %(n)s)

-- name: store_identity
-- Which database and rota tables a connection sees (enqueue in the caller's transaction
-- compares it with the store's own): the table's oid differs between databases and schemas.
SELECT current_database(), to_regclass('rota_runs')::oid::bigint,
       coalesce((SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                 WHERE c.oid = to_regclass('rota_runs')), current_setting('search_path'))

-- name: find_keyed
SELECT id FROM rota_runs
WHERE task = %(task)s AND key = %(key)s AND status IN ('pending', 'running')

-- name: notify
-- The channel is scoped to the schema of rota's tables (current_schema(), what this
-- connection resolves them with), so apps in other schemas of the database neither wake
-- nor cancel each other's runs: `rota` for public (the channel of earlier releases),
-- `rota:<schema>` otherwise, `rota:<md5 of schema>` past the 63-byte identifier limit.
-- Keep the suffix expression equal in notify_channel, which listen() LISTENs on.
SELECT pg_notify(%(channel)s || {{schema_suffix}}, %(payload)s)

-- name: notify_channel
SELECT 'rota' || {{schema_suffix}}

-- name: notify_due
-- A new run due later: `run:<epoch seconds>` on the database clock (the earlier of `at` and
-- now + `delay`), so a sleeping worker wakes then instead of at its next poll.
-- On the schema's channel, as notify.
SELECT pg_notify(%(channel)s || {{schema_suffix}}, 'run:' || extract(epoch FROM least(
    %(at)s::timestamptz, {now} + make_interval(secs => %(delay)s::float8)))::text)

-- ===== end of issue 10, worker side =====================================================

-- ===== issue 20: uniqueness windows and runs after others (branch flow-deps, 0008) =======
-- name: unique_take
-- (rota_unique only: changes no run)
-- A keyed enqueue with unique_for: one atomic upsert of the key's row. It returns the run
-- to hand back (created within `window` seconds and not cancelled), or NULL: then this
-- enqueue creates the run and records it with unique_put in the same transaction. A
-- concurrent enqueue of the key waits here on the row lock until this one commits. A record
-- made more than a day after now (damaged: no enqueue writes one; a day is far beyond any
-- transaction's skew) has no window: the key is free again.
INSERT INTO rota_unique AS u (task, key, run_id, created_at)
VALUES (%(task)s, %(key)s, NULL, {now})
ON CONFLICT (task, key) DO UPDATE SET
    run_id = CASE WHEN u.created_at > EXCLUDED.created_at - make_interval(secs => %(window)s::float8)
                       AND u.created_at <= EXCLUDED.created_at + interval '1 day'
                       AND EXISTS (SELECT 1 FROM rota_runs_all r WHERE r.id = u.run_id AND r.status <> 'cancelled')
                  THEN u.run_id END,
    created_at = CASE WHEN u.created_at > EXCLUDED.created_at - make_interval(secs => %(window)s::float8)
                           AND u.created_at <= EXCLUDED.created_at + interval '1 day'
                           AND EXISTS (SELECT 1 FROM rota_runs_all r WHERE r.id = u.run_id AND r.status <> 'cancelled')
                      THEN u.created_at ELSE EXCLUDED.created_at END
RETURNING run_id

-- name: unique_put
-- (rota_unique only: changes no run)
-- The key's newest run: one just created (created now), or the pending/running twin an
-- enqueue got instead (created when it was).
INSERT INTO rota_unique AS u (task, key, run_id, created_at)
VALUES (%(task)s, %(key)s, %(id)s, CASE WHEN %(twin)s::boolean
                                        THEN (SELECT created_at FROM rota_runs_all WHERE id = %(id)s) ELSE {now} END)
ON CONFLICT (task, key) DO UPDATE SET run_id = EXCLUDED.run_id, created_at = EXCLUDED.created_at

-- name: set_traceparent
-- transition: enqueue
-- (part of the enqueue, in its transaction: the trace context the run was enqueued in, rota.tracing)
UPDATE rota_runs SET traceparent = %(traceparent)s WHERE id = %(id)s

-- name: run_traceparent
-- The trace context stored at enqueue (a running run is in rota_runs: schema 17 moves only
-- finished ones).
SELECT traceparent FROM rota_runs WHERE id = %(id)s
