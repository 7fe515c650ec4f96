-- Named queries of the PostgreSQL store. Every backend defines the same names (a test checks).
-- `{now}` stands for the store's clock: the configured clock if any, else now().
-- Batch writes take one JSON parameter `rows`; `r.id = ANY(ARRAY(...))` makes the planner
-- fetch those rows by key instead of hashing every running run.

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
SELECT pg_notify(%(channel)s || CASE
    WHEN current_schema() = 'public' THEN ''
    WHEN octet_length(current_schema()) <= 58 THEN ':' || current_schema()
    ELSE ':' || md5(current_schema()) END, %(payload)s)

-- name: notify_channel
SELECT 'rota' || CASE
    WHEN current_schema() = 'public' THEN ''
    WHEN octet_length(current_schema()) <= 58 THEN ':' || current_schema()
    ELSE ':' || md5(current_schema()) END

-- name: notify_due
-- A new run due later: `run:<epoch seconds>` on the database clock (the earlier of `at` and
-- now + `delay`), so a sleeping worker wakes then instead of at its next poll.
-- On the schema's channel, as notify.
SELECT pg_notify(%(channel)s || CASE
    WHEN current_schema() = 'public' THEN ''
    WHEN octet_length(current_schema()) <= 58 THEN ':' || current_schema()
    ELSE ':' || md5(current_schema()) END, 'run:' || extract(epoch FROM least(
    %(at)s::timestamptz, {now} + make_interval(secs => %(delay)s::float8)))::text)

-- name: claim
-- transition: claim
-- One fencing token per claimed run (nextval per row), so ctx.token fences one attempt.
-- The first `start` runs in claim order are started by the claim (the attempt counted,
-- started_at set); the rest are held: claimed, not started (started_at NULL, the attempt
-- not counted until their start). A run whose cancellation was requested is never claimed.
-- The update finds each candidate by the address (ctid) of the row version the subquery
-- locked: a TID scan, not a second walk down the primary key, and no join to plan (the
-- LIMIT changes from call to call, so PostgreSQL plans this statement every time). No one
-- else can update a row we locked; a candidate whose newest version our snapshot cannot see
-- (changed and committed just before we locked it) stays pending for the next claim.
WITH picked AS MATERIALIZED (
    SELECT ARRAY(
        SELECT ctid FROM rota_runs
        WHERE status = 'pending' AND NOT held AND due_at <= {now}
          AND (misfire_at IS NULL OR misfire_at >= {now})
          AND limit_name IS NULL AND rate_name IS NULL  -- limited and rated runs: flow_*
          AND NOT cancel_requested
          AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)  -- paused queues (0018)
        ORDER BY priority DESC, due_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED) AS tids
)
UPDATE rota_runs r
SET status = 'running', owner = %(owner)s, token = nextval('rota_token_seq'),
    -- (a run at the column's maximum is not counted: it is claimed, and its worker fails it
    -- as damaged; rota.quarantine. The arithmetic of one bad row never fails the batch.)
    attempt = CASE WHEN r.ctid = ANY((SELECT tids[:%(start)s] FROM picked)::tid[]) AND r.attempt < 2147483647
                   THEN r.attempt + 1 ELSE r.attempt END,
    -- the statement's time, not the transaction's: in finish_and_claim this runs after the
    -- finishes, which may wait for a schedule's row lock (a start recorded before the end
    -- of the exclusive run it waited for)
    started_at = CASE WHEN r.ctid = ANY((SELECT tids[:%(start)s] FROM picked)::tid[])
                      THEN coalesce(%(now)s::timestamptz, statement_timestamp()) END,
    misfire_at = NULL,
    lease_until = {now} + make_interval(secs => %(lease)s)
WHERE r.ctid = ANY((SELECT tids FROM picked)::tid[])
RETURNING r.id, r.task, r.args, r.kwargs, r.attempt, r.max_attempts, r.token, r.timeout,
          r.backoff, r.schedule, r.scheduled_for, r.started_at, r.lease_until,
          r.priority, extract(epoch FROM r.due_at)::float8

-- name: claim_in_queues
-- transition: claim
-- as claim, for some queues only
WITH picked AS MATERIALIZED (
    SELECT ARRAY(
        SELECT ctid FROM rota_runs
        WHERE status = 'pending' AND NOT held AND due_at <= {now}
          AND (misfire_at IS NULL OR misfire_at >= {now})
          AND limit_name IS NULL AND rate_name IS NULL  -- limited and rated runs: flow_*
          AND queue = ANY(%(queues)s::text[])
          AND NOT cancel_requested
          AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)  -- paused queues (0018)
        ORDER BY priority DESC, due_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED) AS tids
)
UPDATE rota_runs r
SET status = 'running', owner = %(owner)s, token = nextval('rota_token_seq'),
    -- (a run at the column's maximum is not counted: it is claimed, and its worker fails it
    -- as damaged; rota.quarantine. The arithmetic of one bad row never fails the batch.)
    attempt = CASE WHEN r.ctid = ANY((SELECT tids[:%(start)s] FROM picked)::tid[]) AND r.attempt < 2147483647
                   THEN r.attempt + 1 ELSE r.attempt END,
    -- the statement's time, not the transaction's: in finish_and_claim this runs after the
    -- finishes, which may wait for a schedule's row lock (a start recorded before the end
    -- of the exclusive run it waited for)
    started_at = CASE WHEN r.ctid = ANY((SELECT tids[:%(start)s] FROM picked)::tid[])
                      THEN coalesce(%(now)s::timestamptz, statement_timestamp()) END,
    misfire_at = NULL,
    lease_until = {now} + make_interval(secs => %(lease)s)
WHERE r.ctid = ANY((SELECT tids FROM picked)::tid[])
RETURNING r.id, r.task, r.args, r.kwargs, r.attempt, r.max_attempts, r.token, r.timeout,
          r.backoff, r.schedule, r.scheduled_for, r.started_at, r.lease_until,
          r.priority, extract(epoch FROM r.due_at)::float8

-- name: claim_ahead
-- transition: claim_ahead
-- The runs due within %(ahead)s seconds (a tick made ahead, a delay), claimed held by an idle
-- worker just before their time, to start each at its due time on the worker's clock: the
-- claim's round trip is taken out of a due run's start. Held (started_at NULL, the attempt
-- not counted until its start); plain runs only (limited and rated runs are claimed at their
-- time, by the flow claim); never one queued, waiting on parents or asked to cancel.
WITH picked AS MATERIALIZED (
    SELECT ARRAY(
        SELECT ctid FROM rota_runs
        WHERE status = 'pending' AND NOT held AND due_at <= {now} + make_interval(secs => %(ahead)s)
          AND (misfire_at IS NULL OR misfire_at >= {now})
          AND limit_name IS NULL AND rate_name IS NULL
          AND NOT cancel_requested
          AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)  -- paused queues (0018)
        ORDER BY priority DESC, due_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED) AS tids
)
UPDATE rota_runs r
SET status = 'running', owner = %(owner)s, token = nextval('rota_token_seq'), misfire_at = NULL,
    started_at = NULL, lease_until = {now} + make_interval(secs => %(lease)s)
WHERE r.ctid = ANY((SELECT tids FROM picked)::tid[])
RETURNING r.id, r.task, r.args, r.kwargs, r.attempt, r.max_attempts, r.token, r.timeout,
          r.backoff, r.schedule, r.scheduled_for, r.started_at, r.lease_until,
          r.priority, extract(epoch FROM r.due_at)::float8

-- name: claim_ahead_in_queues
-- transition: claim_ahead
-- as claim_ahead, for some queues only
WITH picked AS MATERIALIZED (
    SELECT ARRAY(
        SELECT ctid FROM rota_runs
        WHERE status = 'pending' AND NOT held AND due_at <= {now} + make_interval(secs => %(ahead)s)
          AND (misfire_at IS NULL OR misfire_at >= {now})
          AND limit_name IS NULL AND rate_name IS NULL
          AND queue = ANY(%(queues)s::text[])
          AND NOT cancel_requested
          AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)  -- paused queues (0018)
        ORDER BY priority DESC, due_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED) AS tids
)
UPDATE rota_runs r
SET status = 'running', owner = %(owner)s, token = nextval('rota_token_seq'), misfire_at = NULL,
    started_at = NULL, lease_until = {now} + make_interval(secs => %(lease)s)
WHERE r.ctid = ANY((SELECT tids FROM picked)::tid[])
RETURNING r.id, r.task, r.args, r.kwargs, r.attempt, r.max_attempts, r.token, r.timeout,
          r.backoff, r.schedule, r.scheduled_for, r.started_at, r.lease_until,
          r.priority, extract(epoch FROM r.due_at)::float8

-- name: start
-- transition: start
-- Held runs whose handlers started (`ago` seconds ago): the attempt counted, started_at set.
-- Fenced by the token; refused (not returned) when the run's cancellation was requested or
-- it started already: the worker checks a refused run at once (and stops its handler).
UPDATE rota_runs r
SET attempt = r.attempt + (r.attempt < 2147483647)::int, started_at = {now} - make_interval(secs => v.ago)
FROM (SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token, (e->>2)::float8 AS ago
      FROM json_array_elements(%(rows)s::json) AS e) AS v
WHERE r.id = ANY(ARRAY(SELECT (e->>0)::bigint FROM json_array_elements(%(rows)s::json) AS e))
  AND r.id = v.id AND r.token = v.token AND r.status = 'running' AND r.started_at IS NULL
  AND NOT r.cancel_requested
RETURNING r.id

-- name: heartbeat
-- transition: heartbeat
UPDATE rota_runs r SET lease_until = {now} + make_interval(secs => %(lease)s)
FROM (SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token
      FROM json_array_elements(%(rows)s::json) AS e) AS v
WHERE r.id = ANY(ARRAY(SELECT (e->>0)::bigint FROM json_array_elements(%(rows)s::json) AS e))
  AND r.id = v.id AND r.token = v.token AND r.status = 'running'
RETURNING r.id, r.cancel_requested

-- name: finish_succeeded
-- transition: finish
WITH v AS MATERIALIZED (
    -- the batch, parsed once; every row below is fetched by its key
    SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token, e->>2 AS result,
           (e->>3)::float8 AS started
    FROM json_array_elements(%(rows)s::json) AS e
),
sched AS MATERIALIZED (
    -- The batch's runs of a schedule: they are finished in place (`updated`), the others move.
    -- Found by key: every index the planner could pick here has `id` in its key, so no plan
    -- walks all running runs (and the dead entries a burst leaves among them).
    SELECT id, schedule FROM rota_runs
    WHERE id = ANY(ARRAY(SELECT id FROM v)) AND schedule IS NOT NULL AND status = 'running'
),
locked AS (
    -- The schedules of these runs, locked in name order before any run is updated: the
    -- rota_run_finished trigger updates them, and two finishers taking them in the order of
    -- their runs' ids would deadlock. (Evaluated first: a one-time filter below.)
    SELECT s.name FROM rota_schedules s
    WHERE s.name IN (SELECT schedule FROM sched)
    ORDER BY s.name
    FOR UPDATE OF s
),
told AS MATERIALIZED (
    -- A limited run of the batch frees a slot: wake the workers once, here, and tell the
    -- rota_limit_freed trigger so (its WHEN skips the rows of this transaction: no function
    -- call per row). Before any run is updated: a one-time filter below.
    SELECT set_config('rota.limit_told', 'on', true),  -- (two columns: both evaluated, in no order that matters)
           pg_notify('rota' || CASE
                   WHEN current_schema() = 'public' THEN ''
                   WHEN octet_length(current_schema()) <= 58 THEN ':' || current_schema()
                   ELSE ':' || md5(current_schema()) END, 'run')
    -- (The batch's limited runs through the index of running limited runs: a probe of an
    -- empty index while no limited run runs, so a drain without limits pays nothing.)
    WHERE EXISTS (SELECT 1 FROM rota_runs WHERE status = 'running' AND limit_name IS NOT NULL
                  AND id = ANY(ARRAY(SELECT id FROM v)))
),
deps AS (
    -- The waiting dependents of these runs, locked in id order next: the rota_run_settled
    -- trigger updates them row by row in the order of their parents, and two finishers
    -- whose parents' dependents cross would lock them in opposite orders. Found by key
    -- (`= ANY(ARRAY(...))`): an IN here lets the planner hash every pending run.
    SELECT c.id FROM rota_runs c
    WHERE c.id = ANY(ARRAY(SELECT d.child FROM rota_deps d WHERE d.parent = ANY(ARRAY(SELECT id FROM v))))
      AND c.status = 'pending'
    ORDER BY c.id
    FOR UPDATE OF c
),
moved AS (
    -- A run of no schedule leaves rota_runs for rota_history (schema 17): its row deleted
    -- here, inserted final below. The rota_run_moved trigger releases its dependents.
    DELETE FROM rota_runs r USING v
    WHERE r.id = ANY(ARRAY(SELECT id FROM v))
      AND r.id = v.id AND r.token = v.token AND r.status = 'running' AND r.schedule IS NULL
      AND (SELECT count(*) FROM locked) + (SELECT count(*) FROM deps) + (SELECT count(*) FROM told) >= 0
    RETURNING r.*, v.result AS v_result, v.started AS v_started
),
kept AS (
    -- every column of rota_runs, in its order (tests/test_history_table.py checks the list)
    INSERT INTO rota_history (id, task, queue, priority, status, args, kwargs, key, schedule, tick,
        exclusive, held, scheduled_for, due_at, attempt, max_attempts, timeout, backoff, owner, token,
        lease_until, cancel_requested, created_at, started_at, finished_at, result, error, attempts,
        retry_of, misfire_at, waiting_on, has_dependents, after_depth, backfill, limit_name,
        limit_key, rate_name, rate_key, rate_waited, refused_at, traceparent)
    SELECT id, task, queue, priority, 'succeeded', args, kwargs, key, schedule, tick,
        exclusive, held, scheduled_for, due_at,
        -- a held run started (v_started seconds ago) and ended before its start was written
        CASE WHEN v_started IS NOT NULL AND started_at IS NULL THEN attempt + 1 ELSE attempt END,
        max_attempts, timeout, backoff, owner, token,
        NULL, cancel_requested, created_at,
        coalesce(started_at, {now} - make_interval(secs => v_started)), {now}, v_result, NULL, attempts,
        retry_of, misfire_at, waiting_on, has_dependents, after_depth, backfill, limit_name,
        limit_key, rate_name, rate_key, rate_waited, refused_at, traceparent
    FROM moved
    RETURNING id
),
updated AS (
    -- a run of a schedule stays (one run per tick is an index of rota_runs): finished in place
    UPDATE rota_runs r
    SET status = 'succeeded', result = v.result, error = NULL, finished_at = {now}, lease_until = NULL,
        attempt = CASE WHEN v.started IS NOT NULL AND r.started_at IS NULL THEN r.attempt + 1 ELSE r.attempt END,
        started_at = coalesce(r.started_at, {now} - make_interval(secs => v.started))
    FROM v
    WHERE r.id = ANY(ARRAY(SELECT id FROM sched))  -- (a schedule never changes: the same runs)
      AND r.id = v.id AND r.token = v.token AND r.status = 'running' AND r.schedule IS NOT NULL
      AND (SELECT count(*) FROM locked) + (SELECT count(*) FROM deps) + (SELECT count(*) FROM told) >= 0
    RETURNING r.id
)
SELECT id FROM kept UNION ALL SELECT id FROM updated

-- name: finish
-- transition: finish, retry
WITH v AS MATERIALIZED (
    SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token, e->>2 AS status, e->>3 AS result,
           e->>4 AS error, (e->>5)::float8 AS retry_in, e->>6 AS history, (e->>7)::float8 AS started
    FROM json_array_elements(%(rows)s::json) AS e
),
locked AS (
    -- as in finish_succeeded: schedules locked in name order first
    SELECT s.name FROM rota_schedules s
    WHERE s.name IN (SELECT schedule FROM rota_runs
                     WHERE id = ANY(ARRAY(SELECT id FROM v))
                       AND schedule IS NOT NULL AND status = 'running')
    ORDER BY s.name
    FOR UPDATE OF s
),
told AS MATERIALIZED (
    -- as in finish_succeeded: one wake-up for the batch's freed limit slots
    SELECT set_config('rota.limit_told', 'on', true),  -- (two columns: both evaluated, in no order that matters)
           pg_notify('rota' || CASE
                   WHEN current_schema() = 'public' THEN ''
                   WHEN octet_length(current_schema()) <= 58 THEN ':' || current_schema()
                   ELSE ':' || md5(current_schema()) END, 'run')
    WHERE EXISTS (SELECT 1 FROM rota_runs WHERE status = 'running' AND limit_name IS NOT NULL
                  AND id = ANY(ARRAY(SELECT id FROM v)))
),
deps AS (
    -- as in finish_succeeded: the waiting dependents locked in id order next
    SELECT c.id FROM rota_runs c
    WHERE c.id = ANY(ARRAY(SELECT d.child FROM rota_deps d WHERE d.parent = ANY(ARRAY(SELECT id FROM v))))
      AND c.status = 'pending'
    ORDER BY c.id
    FOR UPDATE OF c
)
UPDATE rota_runs r
SET status = CASE WHEN v.status = 'pending' AND r.cancel_requested THEN 'cancelled' ELSE v.status END,
    result = v.result, error = v.error, lease_until = NULL,
    finished_at = CASE WHEN v.status = 'pending' AND NOT r.cancel_requested THEN NULL ELSE {now} END,
    attempt = CASE WHEN v.started IS NOT NULL AND r.started_at IS NULL THEN r.attempt + 1 ELSE r.attempt END,
    started_at = coalesce(r.started_at, {now} - make_interval(secs => v.started)),
    due_at = CASE WHEN v.status = 'pending' THEN {now} + make_interval(secs => v.retry_in)
                  ELSE r.due_at END,
    attempts = CASE WHEN v.history IS NULL THEN r.attempts
                    ELSE r.attempts || jsonb_build_array(v.history::jsonb) END,
    refused_at = NULL  -- a handler ran: a later refusal (a retry on an old worker) counts anew
FROM v
WHERE r.id = ANY(ARRAY(SELECT id FROM v))
  AND r.id = v.id AND r.token = v.token AND r.status = 'running'
  AND (SELECT count(*) FROM locked) + (SELECT count(*) FROM deps) + (SELECT count(*) FROM told) >= 0
RETURNING r.id

-- name: finished_parents
-- As on SQLite (unused here: the rota_run_settled trigger sends NOTIFY when it releases one).
SELECT 1 FROM rota_runs WHERE id = ANY(%(ids)s::bigint[]) AND has_dependents LIMIT 1

-- name: lock_finished_schedules
-- The schedules of a whole batch's runs, locked in name order first, when one transaction
-- writes the batch in two statements (finish_succeeded, then finish, then the claim): each
-- statement locks its own runs' schedules in name order, but across the two the order could
-- invert ({A succeeded, B failed} against {B succeeded, A failed}) and two finishers deadlock.
-- Then, for the same reason, the waiting dependents of the batch's runs, in id order (see
-- finish_succeeded). One row: the counts.
WITH locked AS (
    SELECT s.name FROM rota_schedules s
    WHERE s.name IN (SELECT schedule FROM rota_runs
                     WHERE id = ANY(%(ids)s::bigint[]) AND schedule IS NOT NULL AND status = 'running')
    ORDER BY s.name
    FOR UPDATE OF s
),
deps AS (
    SELECT c.id FROM rota_runs c
    WHERE c.id = ANY(ARRAY(SELECT d.child FROM rota_deps d WHERE d.parent = ANY(%(ids)s::bigint[])))
      AND c.status = 'pending'
    ORDER BY c.id
    FOR UPDATE OF c
)
SELECT (SELECT count(*) FROM locked), (SELECT count(*) FROM deps)

-- name: handler_outcome
-- A transactional handler's commit whose reply was lost, read back: the run's status and
-- token (FOR SHARE waits for that transaction while the server still runs it).
SELECT status, token FROM rota_runs WHERE id = %(id)s FOR SHARE

-- name: finish_transactional
-- transition: finish
-- a transactional handler's success, in the handler's own transaction (rota.transactional):
-- the run's schedule locked first, as finish does; the time is the commit's, not the
-- transaction's start (now())
WITH locked AS (
    SELECT s.name FROM rota_schedules s
    WHERE s.name = (SELECT schedule FROM rota_runs WHERE id = %(id)s AND status = 'running')
    FOR UPDATE OF s
)
UPDATE rota_runs r
SET status = 'succeeded', result = %(result)s, error = NULL,
    finished_at = coalesce(%(now)s::timestamptz, clock_timestamp()), lease_until = NULL,
    -- a held run started by its worker whose start was not written yet: the commit records it
    attempt = CASE WHEN r.started_at IS NULL THEN r.attempt + 1 ELSE r.attempt END,
    started_at = coalesce(r.started_at, %(now)s::timestamptz, clock_timestamp())
WHERE r.id = %(id)s AND r.token = %(token)s AND r.status = 'running'
  AND (SELECT count(*) FROM locked) >= 0
RETURNING r.id

-- name: hand_back
-- transition: hand_back
-- Pending again at once for another worker (a held run claimed ahead: at its due time); a
-- held run (never started) as it was, a started
-- one with its attempt given back and recorded in history as handed back. A run whose
-- cancellation was requested is not run again: it ends cancelled.
WITH v AS MATERIALIZED (
    SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token
    FROM json_array_elements(%(rows)s::json) AS e
),
ending AS (
    -- the runs that end here (cancelled): only they fire the triggers below
    SELECT id, schedule FROM rota_runs
    WHERE id = ANY(ARRAY(SELECT id FROM v)) AND status = 'running' AND cancel_requested
),
locked AS (
    -- as in finish_succeeded: their schedules locked in name order first (rota_run_finished
    -- updates them), then their waiting dependents in id order (rota_run_settled cancels them)
    SELECT s.name FROM rota_schedules s
    WHERE s.name IN (SELECT schedule FROM ending WHERE schedule IS NOT NULL)
    ORDER BY s.name
    FOR UPDATE OF s
),
deps AS (
    SELECT c.id FROM rota_runs c
    WHERE c.id = ANY(ARRAY(SELECT d.child FROM rota_deps d WHERE d.parent = ANY(ARRAY(SELECT id FROM ending))))
      AND c.status = 'pending'
    ORDER BY c.id
    FOR UPDATE OF c
)
UPDATE rota_runs r
SET status = CASE WHEN r.cancel_requested THEN 'cancelled' ELSE 'pending' END,
    attempt = CASE WHEN r.started_at IS NULL OR r.cancel_requested THEN r.attempt ELSE r.attempt - 1 END,
    -- a held run claimed ahead of its due time keeps that time (never run early elsewhere)
    due_at = CASE WHEN r.started_at IS NULL THEN greatest(r.due_at, {now}) ELSE {now} END, lease_until = NULL,
    refused_at = CASE WHEN r.started_at IS NULL THEN r.refused_at END,  -- started: a refusal counts anew
    finished_at = CASE WHEN r.cancel_requested THEN {now} END,
    started_at = CASE WHEN r.cancel_requested THEN r.started_at END,
    error = CASE WHEN r.cancel_requested
                 THEN jsonb_build_object('type', 'Cancelled', 'message', 'cancelled on request ('
                                         || %(reason)s::text || ')', 'traceback', NULL)::text
                 ELSE r.error END,
    attempts = CASE WHEN r.started_at IS NULL OR r.cancel_requested THEN r.attempts
                    ELSE r.attempts || jsonb_build_array(jsonb_build_object(
        'attempt', r.attempt, 'worker', r.owner, 'started_at', to_char(r.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'finished_at', to_char({now} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), 'status', 'handed back', 'error',
        jsonb_build_object('type', 'HandedBack', 'message', %(reason)s::text))) END
FROM v
WHERE r.id = ANY(ARRAY(SELECT id FROM v))
  AND r.id = v.id AND r.token = v.token AND r.status = 'running'
  AND (SELECT count(*) FROM locked) + (SELECT count(*) FROM deps) >= 0
RETURNING r.id, r.status

-- name: fence
-- transition: fence
-- A stopping worker's last write, for a run whose handler still runs (a thread cannot be
-- killed): its lease shortened to %(lease)s seconds on this clock, and a note that the
-- rescue reads (`WorkerStopped` with the claim's token) to say so in the run's history. The
-- worker's process ends before that lease does: the rescue then takes the run as a lost
-- worker's (attempt counted, retried if attempts remain), never while its handler can run.
UPDATE rota_runs SET lease_until = {now} + make_interval(secs => %(lease)s), error = %(error)s
WHERE id = %(id)s AND token = %(token)s AND status = 'running'
RETURNING id

-- name: refuse
-- transition: refuse
-- A run of a task its worker does not register, given back for a worker that does (a rolling
-- deploy that adds a task: an old worker claimed the new task's run): pending again, its
-- attempt given back (a held run's was never counted) and its start cleared, the refusal as
-- its error, nothing in its history (no handler ran); due again after half the time since its
-- first refusal (refused_at), from %(delay_min)s to %(delay_max)s s, never before its own due
-- time. Refused for longer than %(grace)s s since the first time, it fails (TaskNotFound, no
-- worker registering the task took it). A run whose cancellation was requested ends
-- cancelled. The ending runs lock their schedules and dependents as hand_back does. A rated
-- run's start leaves its window's log (`unlogged`): no handler started, so a refusal uses no
-- room of its rate.
WITH v AS MATERIALIZED (
    SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token, e->>2 AS error
    FROM json_array_elements(%(rows)s::json) AS e
),
unlogged AS (
    -- one logged start per refused rated run: its key's and its start time's (runs claimed
    -- together share their start time, so as many rows as runs; the log has no run id). Run
    -- to its end whether or not the UPDATE reads it; both see the rows as they were before.
    DELETE FROM rota_rate_starts s
    WHERE s.ctid = ANY(ARRAY(
        SELECT x.ctid FROM (
            SELECT r.rate_name, r.rate_key, r.started_at, count(*) AS n FROM rota_runs r
            WHERE r.id = ANY(ARRAY(SELECT id FROM v)) AND (r.id, r.token) IN (SELECT id, token FROM v)
              AND r.status = 'running' AND r.rate_name IS NOT NULL AND r.started_at IS NOT NULL
            GROUP BY r.rate_name, r.rate_key, r.started_at) g
        CROSS JOIN LATERAL (
            SELECT l.ctid FROM rota_rate_starts l
            WHERE l.name = g.rate_name AND l.key = g.rate_key AND l.started_at = g.started_at
            LIMIT g.n) x))
),
ending AS (
    SELECT id, schedule FROM rota_runs
    WHERE id = ANY(ARRAY(SELECT id FROM v)) AND status = 'running'
      AND (cancel_requested OR refused_at < {now} - make_interval(secs => %(grace)s))
),
locked AS (
    SELECT s.name FROM rota_schedules s
    WHERE s.name IN (SELECT schedule FROM ending WHERE schedule IS NOT NULL)
    ORDER BY s.name
    FOR UPDATE OF s
),
deps AS (
    SELECT c.id FROM rota_runs c
    WHERE c.id = ANY(ARRAY(SELECT d.child FROM rota_deps d WHERE d.parent = ANY(ARRAY(SELECT id FROM ending))))
      AND c.status = 'pending'
    ORDER BY c.id
    FOR UPDATE OF c
)
UPDATE rota_runs r
SET status = CASE WHEN r.cancel_requested THEN 'cancelled'
                  WHEN r.refused_at < {now} - make_interval(secs => %(grace)s) THEN 'failed'
                  ELSE 'pending' END,
    attempt = CASE WHEN r.started_at IS NULL THEN r.attempt ELSE r.attempt - 1 END,
    started_at = NULL, lease_until = NULL,
    refused_at = coalesce(r.refused_at, {now}),
    due_at = greatest(r.due_at, {now} + make_interval(secs => least(%(delay_max)s::float8, greatest(
        %(delay_min)s::float8, extract(epoch FROM {now} - coalesce(r.refused_at, {now})) / 2)))),
    finished_at = CASE WHEN r.cancel_requested OR r.refused_at < {now} - make_interval(secs => %(grace)s)
                       THEN {now} END,
    error = CASE WHEN r.cancel_requested
                 THEN jsonb_build_object('type', 'Cancelled', 'message', 'cancelled on request', 'traceback', NULL)::text
                 ELSE v.error END
FROM v
WHERE r.id = ANY(ARRAY(SELECT id FROM v))
  AND r.id = v.id AND r.token = v.token AND r.status = 'running'
  AND (SELECT count(*) FROM locked) + (SELECT count(*) FROM deps) >= 0
RETURNING r.id, r.status

-- name: disown
-- transition: disown
-- A claim whose reply this worker never got (the connection cut after the commit): the runs
-- it owns (%(owner)s) with a token it does not hold (%(tokens)s: every token it holds, held,
-- running or with an outcome to write) are given back as they were before that claim, at the
-- worker's next reach of the database. No handler ran: a run the claim started gives its
-- attempt back and its start is cleared (a rated run's start leaves its window's log, as in
-- refuse); its due time and history are kept (it keeps its place). Only runs whose lease still
-- runs: one whose lease ran out is the rescue's. A run whose cancellation was requested ends
-- cancelled; the ending runs lock their schedules and dependents as hand_back does.
WITH v AS MATERIALIZED (
    SELECT id, token FROM rota_runs
    WHERE status = 'running' AND owner = %(owner)s AND lease_until > {now}
      AND NOT token = ANY(ARRAY(SELECT e::bigint FROM json_array_elements_text(%(tokens)s::json) AS e))
),
unlogged AS (
    -- one logged start per rated run the claim started (see refuse)
    DELETE FROM rota_rate_starts s
    WHERE s.ctid = ANY(ARRAY(
        SELECT x.ctid FROM (
            SELECT r.rate_name, r.rate_key, r.started_at, count(*) AS n FROM rota_runs r
            WHERE r.id = ANY(ARRAY(SELECT id FROM v)) AND (r.id, r.token) IN (SELECT id, token FROM v)
              AND r.status = 'running' AND r.rate_name IS NOT NULL AND r.started_at IS NOT NULL
            GROUP BY r.rate_name, r.rate_key, r.started_at) g
        CROSS JOIN LATERAL (
            SELECT l.ctid FROM rota_rate_starts l
            WHERE l.name = g.rate_name AND l.key = g.rate_key AND l.started_at = g.started_at
            LIMIT g.n) x))
),
ending AS (
    SELECT id, schedule FROM rota_runs
    WHERE id = ANY(ARRAY(SELECT id FROM v)) AND status = 'running' AND cancel_requested
),
locked AS (
    SELECT s.name FROM rota_schedules s
    WHERE s.name IN (SELECT schedule FROM ending WHERE schedule IS NOT NULL)
    ORDER BY s.name
    FOR UPDATE OF s
),
deps AS (
    SELECT c.id FROM rota_runs c
    WHERE c.id = ANY(ARRAY(SELECT d.child FROM rota_deps d WHERE d.parent = ANY(ARRAY(SELECT id FROM ending))))
      AND c.status = 'pending'
    ORDER BY c.id
    FOR UPDATE OF c
)
UPDATE rota_runs r
SET status = CASE WHEN r.cancel_requested THEN 'cancelled' ELSE 'pending' END,
    attempt = CASE WHEN r.started_at IS NULL OR r.attempt <= 0 THEN r.attempt ELSE r.attempt - 1 END,
    started_at = NULL, lease_until = NULL,
    finished_at = CASE WHEN r.cancel_requested THEN {now} END,
    error = CASE WHEN r.cancel_requested
                 THEN jsonb_build_object('type', 'Cancelled', 'message', 'cancelled on request', 'traceback', NULL)::text
                 ELSE r.error END
FROM v
WHERE r.id = ANY(ARRAY(SELECT id FROM v))
  AND r.id = v.id AND r.token = v.token AND r.status = 'running' AND r.owner = %(owner)s
  AND (SELECT count(*) FROM locked) + (SELECT count(*) FROM deps) >= 0
RETURNING r.id, r.status

-- name: any_expired
SELECT 1 FROM rota_runs
WHERE status = 'running' AND lease_until < {now}
LIMIT 1

-- name: rescue
-- transition: rescue
-- A held run (started_at NULL: no start recorded) is pending again with no attempt counted;
-- if it was due before its lease ran out, its history says the worker was lost while
-- holding it ("held", with the claim's token: its handler may have started in the moments
-- before its start would have been written, rota/lifecycle.py). A started one is retried if
-- attempts remain, else failed. Either ends cancelled if its cancellation was requested.
-- (One damaged member never fails the batch: an attempt at its column's maximum is counted
-- in bigint; a time out of to_char's range reads as NULL.)
WITH lost AS (
    SELECT id FROM rota_runs
    WHERE status = 'running' AND lease_until < {now}
    ORDER BY lease_until
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
locked AS (
    -- as in finish_succeeded: the lost runs' schedules locked in name order first
    SELECT s.name FROM rota_schedules s
    WHERE s.name IN (SELECT r.schedule FROM rota_runs r JOIN lost ON lost.id = r.id)
    ORDER BY s.name
    FOR UPDATE OF s
),
deps AS (
    -- as in finish_succeeded: the lost runs' waiting dependents locked in id order next (a
    -- failed or cancelled parent cancels them, through the rota_run_settled trigger)
    SELECT c.id FROM rota_runs c
    WHERE c.id = ANY(ARRAY(SELECT d.child FROM rota_deps d WHERE d.parent = ANY(ARRAY(SELECT id FROM lost))))
      AND c.status = 'pending'
    ORDER BY c.id
    FOR UPDATE OF c
),
seen AS (
    SELECT r.id, r.owner, r.token, r.lease_until, r.attempt, r.max_attempts, r.started_at, r.due_at,
           CASE WHEN r.cancel_requested THEN 'cancelled'
                WHEN r.started_at IS NULL OR r.attempt < r.max_attempts THEN 'pending'
                ELSE 'failed' END AS status,
           jsonb_build_object(
               'type', 'WorkerLost',
               'message', 'worker ' || coalesce(r.owner, '?') || ' was lost: its lease expired at '
                          || to_char(r.lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
                          || CASE WHEN r.started_at IS NULL
                                  THEN ' while it held the run, before its start was recorded (no attempt counted)'
                                  ELSE ' (attempt ' || r.attempt || ' of ' || r.max_attempts || ')' END,
               'traceback', NULL) AS lost_error,
           -- fenced by a stopping worker (see fence): it says so
           r.started_at IS NOT NULL AND r.error LIKE '{"type": "WorkerStopped", "token": ' || r.token || ',%%'
               AS stopped
    FROM rota_runs r JOIN lost ON lost.id = r.id
),
decided AS (
    SELECT d.*,
           CASE WHEN d.stopped THEN jsonb_build_object(
               'type', 'WorkerStopped',
               'message', 'worker ' || coalesce(d.owner, '?') || ' stopped while the handler still ran (it outlived '
                          || 'the shutdown timeout): its process was ended before the lease expired at '
                          || to_char(d.lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
                          || ' (attempt ' || d.attempt || ' of ' || d.max_attempts || ')',
               'traceback', NULL) ELSE d.lost_error END AS error
    FROM seen d
)
UPDATE rota_runs r
SET status = d.status, due_at = CASE WHEN d.started_at IS NULL THEN greatest(r.due_at, {now}) ELSE {now} END,
    lease_until = NULL,
    -- a started run (a handler may have run): a later refusal counts anew (as a retry's)
    refused_at = CASE WHEN d.started_at IS NULL THEN r.refused_at END,
    finished_at = CASE WHEN d.status = 'pending' THEN NULL ELSE {now} END,
    error = d.error::text,
    attempts = CASE WHEN d.started_at IS NULL AND d.due_at > d.lease_until
                    THEN r.attempts  -- held, due only after its lease ran out: no start possible
                    WHEN d.started_at IS NULL
                    THEN r.attempts || jsonb_build_array(jsonb_build_object(
                        'attempt', d.attempt::bigint + 1, 'worker', d.owner, 'token', d.token, 'started_at', NULL, 'held', true,
                        'finished_at', to_char({now} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), 'status', 'lost', 'error', d.error))
                    WHEN d.status = 'pending'
                    THEN r.attempts || jsonb_build_array(jsonb_build_object(
                        'attempt', d.attempt, 'worker', d.owner, 'started_at', to_char(d.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                        'finished_at', to_char({now} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), 'status', 'lost', 'error', d.error))
                    ELSE r.attempts END
FROM decided d
WHERE r.id = d.id AND (SELECT count(*) FROM locked) + (SELECT count(*) FROM deps) >= 0
RETURNING r.id, r.task, r.status, d.owner, d.error::text

-- name: poll_state
-- (now, when the next claimable run is due, when the ticker has work: the next schedule
-- tick, or at once if a run made ahead passed its misfire deadline unclaimed)
SELECT {now},
       (SELECT min(due_at) FROM rota_runs
        WHERE status = 'pending' AND NOT held AND (misfire_at IS NULL OR misfire_at >= {now})
          AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)),
       least((SELECT min(next_run_at) FROM rota_schedules WHERE active AND NOT paused),
             (SELECT min(misfire_at) FROM rota_runs
              WHERE status = 'pending' AND misfire_at IS NOT NULL AND misfire_at < {now}))

-- name: poll_state_in_queues
SELECT {now},
       (SELECT min(due_at) FROM rota_runs
        WHERE status = 'pending' AND NOT held AND (misfire_at IS NULL OR misfire_at >= {now})
          AND queue = ANY(%(queues)s::text[])
          AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)),
       least((SELECT min(next_run_at) FROM rota_schedules WHERE active AND NOT paused),
             (SELECT min(misfire_at) FROM rota_runs
              WHERE status = 'pending' AND misfire_at IS NOT NULL AND misfire_at < {now}))

-- name: now
SELECT {now}

-- name: upsert_code_schedule
INSERT INTO rota_schedules AS s (
    name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, run_immediately,
    queue, priority, max_attempts, timeout, backoff, jitter, source, app, definition, next_run_at,
    created_at, updated_at)
VALUES (%(name)s, %(task)s, %(cron)s, %(every)s, %(tz)s, %(args)s, %(kwargs)s, %(overlap)s,
        %(misfire)s, %(misfire_grace)s, %(run_immediately)s, %(queue)s, %(priority)s,
        %(max_attempts)s, %(timeout)s, %(backoff)s, %(jitter)s, %(source)s, %(app)s, %(definition)s,
        %(next_run_at)s, {now}, {now})
ON CONFLICT (name) DO UPDATE SET
    task = EXCLUDED.task, cron = EXCLUDED.cron, every = EXCLUDED.every, tz = EXCLUDED.tz,
    args = EXCLUDED.args, kwargs = EXCLUDED.kwargs, overlap = EXCLUDED.overlap,
    misfire = EXCLUDED.misfire, misfire_grace = EXCLUDED.misfire_grace,
    run_immediately = EXCLUDED.run_immediately, queue = EXCLUDED.queue,
    priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts,
    timeout = EXCLUDED.timeout, backoff = EXCLUDED.backoff, source = EXCLUDED.source,
    app = EXCLUDED.app, definition = EXCLUDED.definition, active = true, updated_at = {now},
    -- A deploy keeps next_run_at unless the timing changed (a missed tick stays due and
    -- meets the misfire policy); a timing change moves it to the new first tick, unless the
    -- old next_run_at was already missed: then that tick stays due (the misfire policy
    -- applies to it and to the new timing's ticks up to now).
    next_run_at = CASE WHEN s.run_count = 0 AND s.last_run_at IS NULL AND EXCLUDED.run_immediately
                       THEN least(s.next_run_at, EXCLUDED.next_run_at)
                       WHEN NOT s.active OR s.next_run_at IS NULL THEN %(first_tick)s
                       WHEN s.cron IS NOT DISTINCT FROM EXCLUDED.cron AND s.every IS NOT DISTINCT FROM EXCLUDED.every AND s.tz = EXCLUDED.tz
                       THEN s.next_run_at
                       WHEN s.next_run_at < {now} THEN s.next_run_at
                       ELSE %(first_tick)s END
WHERE s.definition IS DISTINCT FROM EXCLUDED.definition OR NOT s.active

-- name: forget_damaged_schedule
-- A code schedule stored damaged (a field that cannot be planned: rota.timing.stored): its
-- definition is forgotten, so the upsert that follows rewrites it whole from the code, at a
-- new first tick (a next_run_at clears its plan error).
UPDATE rota_schedules SET definition = '', next_run_at = NULL
WHERE name = %(name)s AND source = 'code'

-- name: deactivate_code_schedules
UPDATE rota_schedules SET active = false, updated_at = {now}
WHERE source = 'code' AND app = %(app)s AND active AND NOT (name = ANY(%(names)s::text[]))
RETURNING name

-- name: insert_schedule
INSERT INTO rota_schedules AS s (
    name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, run_immediately,
    queue, priority, max_attempts, timeout, backoff, jitter, source, app, definition, next_run_at,
    created_at, updated_at)
VALUES (%(name)s, %(task)s, %(cron)s, %(every)s, %(tz)s, %(args)s, %(kwargs)s, %(overlap)s,
        %(misfire)s, %(misfire_grace)s, %(run_immediately)s, %(queue)s, %(priority)s,
        %(max_attempts)s, %(timeout)s, %(backoff)s, %(jitter)s, %(source)s, %(app)s, %(definition)s,
        %(next_run_at)s, {now}, {now})
ON CONFLICT (name) DO UPDATE SET
    task = EXCLUDED.task, cron = EXCLUDED.cron, every = EXCLUDED.every, tz = EXCLUDED.tz,
    args = EXCLUDED.args, kwargs = EXCLUDED.kwargs, overlap = EXCLUDED.overlap,
    misfire = EXCLUDED.misfire, misfire_grace = EXCLUDED.misfire_grace,
    run_immediately = EXCLUDED.run_immediately, queue = EXCLUDED.queue,
    priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts,
    timeout = EXCLUDED.timeout, backoff = EXCLUDED.backoff, source = EXCLUDED.source,
    app = EXCLUDED.app, definition = EXCLUDED.definition, active = true, paused = false,
    next_run_at = EXCLUDED.next_run_at, updated_at = {now}
WHERE NOT s.active
RETURNING name

-- name: update_schedule
UPDATE rota_schedules SET
    task = %(task)s, cron = %(cron)s, every = %(every)s, tz = %(tz)s, args = %(args)s,
    kwargs = %(kwargs)s, overlap = %(overlap)s, misfire = %(misfire)s,
    misfire_grace = %(misfire_grace)s, run_immediately = %(run_immediately)s, queue = %(queue)s,
    priority = %(priority)s, max_attempts = %(max_attempts)s, timeout = %(timeout)s,
    backoff = %(backoff)s, jitter = %(jitter)s, definition = %(definition)s,
    next_run_at = coalesce(%(next_run_at)s, next_run_at), updated_at = {now}
WHERE name = %(name)s AND active
RETURNING name

-- name: deactivate_schedule
UPDATE rota_schedules SET active = false, updated_at = {now}
WHERE name = %(name)s AND active
RETURNING name

-- name: cancel_schedule_pending
-- transition: withdraw
-- Locks as a finisher does (finish_succeeded): the schedule's row first (the rota_run_finished
-- trigger of each cancelled run updates it, and a finisher holding it promotes a queued run),
-- then the runs in id order, then their waiting dependents in id order (the cascade cancels
-- them). Rows locked in no order here deadlocked against a concurrent finish.
WITH locked AS (
    SELECT name FROM rota_schedules WHERE name = %(name)s FOR UPDATE
),
runs AS (
    SELECT id FROM rota_runs
    WHERE schedule = %(name)s AND status = 'pending' AND (SELECT count(*) FROM locked) >= 0
      AND NOT EXISTS (SELECT 1 FROM rota_waits w WHERE w.run_id = rota_runs.id AND w.token = rota_runs.token)  -- parked: in progress (0022)
    ORDER BY id
    FOR UPDATE
),
deps AS (
    SELECT c.id FROM rota_runs c
    WHERE c.id = ANY(ARRAY(SELECT d.child FROM rota_deps d WHERE d.parent = ANY(ARRAY(SELECT id FROM runs))))
      AND c.status = 'pending'
    ORDER BY c.id
    FOR UPDATE OF c
)
UPDATE rota_runs
SET status = 'cancelled', finished_at = {now},
    error = %(error)s
WHERE id = ANY(ARRAY(SELECT id FROM runs)) AND status = 'pending'
  AND (SELECT count(*) FROM deps) >= 0
RETURNING id

-- name: withdraw_ahead
-- transition: withdraw
-- A schedule paused, updated or redeployed: its tick runs made ahead of their tick and not
-- due yet are cancelled (with `definition` given: only if the stored one differs). Their
-- `tick` is cleared: the tick is no longer theirs, and can be materialized again.
UPDATE rota_runs
SET status = 'cancelled', tick = NULL, finished_at = {now}, error = %(error)s
WHERE schedule = %(name)s AND status = 'pending' AND tick IS NOT NULL AND attempt = 0
  AND NOT held AND due_at > {now}
  AND (%(definition)s::text IS NULL OR EXISTS (
       SELECT 1 FROM rota_schedules
       WHERE name = %(name)s AND definition IS DISTINCT FROM %(definition)s::text))
  AND NOT EXISTS (SELECT 1 FROM rota_waits w WHERE w.run_id = rota_runs.id AND w.token = rota_runs.token)  -- parked (0022)
RETURNING scheduled_for

-- name: rewind_schedule
-- The withdrawn tick is planned again when it comes (unless the schedule's change moves it).
UPDATE rota_schedules SET next_run_at = %(tick)s
WHERE name = %(name)s AND next_run_at > %(tick)s
RETURNING name

-- name: schedule_busy
-- An exclusive schedule with a pending or running run (held ones included): its next tick
-- is not made ahead, so the overlap policy is judged at the tick.
SELECT 1 FROM rota_runs
WHERE schedule = %(schedule)s AND exclusive AND status IN ('pending', 'running')
LIMIT 1

-- name: set_paused
UPDATE rota_schedules
SET paused = %(paused)s, next_run_at = coalesce(%(next_run_at)s, next_run_at), updated_at = {now}
WHERE name = %(name)s AND active
RETURNING name

-- name: due_schedules
SELECT name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, queue,
       priority, max_attempts, timeout, backoff, next_run_at, jitter
FROM rota_schedules
WHERE active AND NOT paused AND next_run_at <= {now}
ORDER BY next_run_at
LIMIT %(limit)s

-- name: due_schedules_ahead
-- As due_schedules, with the ticks due within `lead` seconds (made ahead of their tick).
SELECT name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, queue,
       priority, max_attempts, timeout, backoff, next_run_at, jitter
FROM rota_schedules
WHERE active AND NOT paused AND next_run_at <= {now} + make_interval(secs => %(lead)s)
ORDER BY next_run_at
LIMIT %(limit)s

-- name: advance_schedule
UPDATE rota_schedules
SET next_run_at = %(new)s,  -- a count at its column's maximum stays there (damaged: never a failed tick)
    skip_count = CASE WHEN skip_count <= 9223372036854775807 - %(skipped_more)s::bigint
                      THEN skip_count + %(skipped_more)s::bigint ELSE skip_count END
WHERE name = %(name)s AND next_run_at = %(old)s AND active AND NOT paused
RETURNING name

-- name: tick_exists
SELECT 1 FROM rota_runs WHERE schedule = %(schedule)s AND tick = %(tick)s

-- name: active_run
SELECT id, status FROM rota_runs
WHERE schedule = %(schedule)s AND exclusive AND NOT held AND status IN ('pending', 'running')

-- name: cancel_active_pending
-- transition: overlap
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = %(error)s
WHERE id = %(id)s AND status = 'pending'
RETURNING id

-- name: request_cancel
-- transition: cancel
UPDATE rota_runs SET cancel_requested = true
WHERE id = %(id)s AND status = 'running'
RETURNING id, owner

-- name: cancel_requests
-- (SQLite's wake-ups read it; PostgreSQL delivers a cancellation by NOTIFY.)
SELECT id FROM rota_runs WHERE status = 'running' AND cancel_requested AND owner = %(owner)s

-- name: cancel_held
-- transition: overlap
-- Locks as cancel_schedule_pending does: the schedule's row, then the queued runs in id order
-- (a finisher holding the row promotes the oldest of them), then their waiting dependents.
WITH locked AS (
    SELECT name FROM rota_schedules WHERE name = %(schedule)s FOR UPDATE
),
runs AS (
    SELECT id FROM rota_runs
    WHERE schedule = %(schedule)s AND held AND status = 'pending' AND (SELECT count(*) FROM locked) >= 0
    ORDER BY id
    FOR UPDATE
),
deps AS (
    SELECT c.id FROM rota_runs c
    WHERE c.id = ANY(ARRAY(SELECT d.child FROM rota_deps d WHERE d.parent = ANY(ARRAY(SELECT id FROM runs))))
      AND c.status = 'pending'
    ORDER BY c.id
    FOR UPDATE OF c
)
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = %(error)s
WHERE id = ANY(ARRAY(SELECT id FROM runs)) AND held AND status = 'pending'
  AND (SELECT count(*) FROM deps) >= 0
RETURNING id

-- name: promote_held
-- transition: promote
UPDATE rota_runs SET held = false
WHERE id = (SELECT id FROM rota_runs
            WHERE schedule = %(schedule)s AND held AND status = 'pending'
            ORDER BY scheduled_for, id LIMIT 1)
  AND NOT EXISTS (SELECT 1 FROM rota_runs
                  WHERE schedule = %(schedule)s AND exclusive AND NOT held
                    AND status IN ('pending', 'running'))
RETURNING id

-- name: lock_schedule
-- The schedule's row lock: whoever ends a run of it (the rota_run_finished trigger) takes
-- it too, so holding it orders a hand-over of the slot with our inserts.
SELECT name FROM rota_schedules WHERE name = %(schedule)s FOR UPDATE

-- name: schedule_columns
SELECT name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, queue, priority,
       max_attempts, timeout, source, active, paused, next_run_at, last_run_at, last_status,
       run_count, success_count, failure_count, skip_count, run_immediately, backoff, app,
       definition, plan_error, jitter
FROM rota_schedules

-- name: run_columns
SELECT id, task, status, queue, priority, args, kwargs, key, schedule, scheduled_for, due_at,
       attempt, max_attempts, timeout, owner, token, lease_until, cancel_requested, created_at,
       started_at, finished_at, result, error, attempts::text, retry_of, held, waiting_on, backfill
FROM rota_runs_all

-- name: count_by_status
SELECT status, count(*) FROM rota_runs_all GROUP BY status

-- name: cancel_pending
-- transition: cancel
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = %(error)s
WHERE id = %(id)s AND status = 'pending'
RETURNING status

-- name: run_status
SELECT status FROM rota_runs_all WHERE id = %(id)s

-- name: register_worker
INSERT INTO rota_workers (id, host, pid, concurrency, queues, state, started_at, last_seen)
VALUES (%(id)s, %(host)s, %(pid)s, %(concurrency)s, %(queues)s, 'running', {now}, {now})
ON CONFLICT (id) DO UPDATE SET state = 'running', last_seen = {now}

-- name: worker_lease
UPDATE rota_workers SET lease = %(lease)s WHERE id = %(id)s

-- name: worker_seen
UPDATE rota_workers SET last_seen = {now}, state = %(state)s WHERE id = %(id)s

-- name: list_workers
-- A worker whose heartbeat is older than its own lease reads lost, not alive; a worker without
-- one (an older release) or with a lease no release writes (NaN, infinite, negative: a damaged
-- row; NaN > 0 holds in PostgreSQL, the upper bound excludes it) is judged by stale_after.
SELECT id, host, pid, concurrency, queues,
       CASE WHEN state NOT IN ('stopped', 'lost') AND last_seen < {now} - make_interval(secs => stale)
            THEN 'lost' ELSE state END,
       started_at, last_seen,
       last_seen >= {now} - make_interval(secs => stale) AND state NOT IN ('stopped', 'lost'),
       lease
FROM (SELECT *, CASE WHEN lease > 0 AND lease <= 31536000 THEN lease
                     ELSE %(stale_after)s::double precision END AS stale
      FROM rota_workers) AS w
WHERE last_seen >= {now} - make_interval(secs => stale * 10)
   OR state NOT IN ('stopped', 'lost')
ORDER BY started_at

-- name: lock_acquire
INSERT INTO rota_locks AS l (name, owner, token, acquired_at, expires_at)
VALUES (%(name)s, %(owner)s, 1, {now}, {now} + make_interval(secs => %(ttl)s))
ON CONFLICT (name) DO UPDATE
SET owner = EXCLUDED.owner, token = l.token + 1, acquired_at = EXCLUDED.acquired_at,
    expires_at = EXCLUDED.expires_at
WHERE l.owner IS NULL OR l.expires_at IS NULL OR l.expires_at <= {now}
RETURNING token

-- name: lock_renew
UPDATE rota_locks SET expires_at = {now} + make_interval(secs => %(ttl)s)
WHERE name = %(name)s AND owner = %(owner)s AND token = %(token)s AND expires_at > {now}
RETURNING token

-- name: lock_release
UPDATE rota_locks SET owner = NULL, expires_at = NULL
WHERE name = %(name)s AND owner = %(owner)s AND token = %(token)s
RETURNING token

-- name: list_locks
SELECT name, owner, token, acquired_at, expires_at,
       owner IS NOT NULL AND expires_at > {now}
FROM rota_locks ORDER BY name

-- Dashboard sign-outs (rota.web.sessions); times are the dashboard's Unix seconds (:at).
-- name: signout_add
INSERT INTO rota_dashboard_signouts (nonce, expires_at) VALUES (%(nonce)s, %(expires_at)s)
ON CONFLICT (nonce) DO NOTHING

-- name: signout_prune
DELETE FROM rota_dashboard_signouts WHERE expires_at <= %(at)s

-- name: signed_out
SELECT 1 FROM rota_dashboard_signouts WHERE nonce = %(nonce)s AND expires_at > %(at)s

-- name: prune
-- transition: prune
-- Oldest finish first, through rota_runs_finished (finished_at, status, ...): an index range
-- scan in finish order whatever the plan's guess of the status's share (a generic plan for
-- `status = $1` over the primary key sorted millions of rows), and a pass goes on from the
-- last finish time it deleted (:after, epoch seconds), past the dead entries of what it deleted.
-- Succeeded runs are in both tables (schema 17): the oldest `limit` of the two, together, so
-- that the cursor (the last finish time deleted) passes no run left in either.
WITH hot AS (
    SELECT id, finished_at FROM rota_runs
    WHERE finished_at < {now} - make_interval(secs => %(older_than)s)
      AND finished_at >= to_timestamp(%(after)s) AND status = %(status)s
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
kept AS (
    -- (only succeeded runs are kept there: a one-time filter for the other statuses)
    SELECT id, finished_at FROM rota_history
    WHERE %(status)s::text = 'succeeded'
      AND finished_at < {now} - make_interval(secs => %(older_than)s)
      AND finished_at >= to_timestamp(%(after)s)
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
doomed AS MATERIALIZED (
    SELECT id FROM (SELECT id, finished_at FROM hot UNION ALL SELECT id, finished_at FROM kept) AS both_
    ORDER BY finished_at
    LIMIT %(limit)s
),
gone AS (
    DELETE FROM rota_runs r WHERE r.id = ANY(ARRAY(SELECT id FROM doomed))
    RETURNING r.id, r.finished_at
),
gone_kept AS (
    DELETE FROM rota_history r WHERE r.id = ANY(ARRAY(SELECT id FROM doomed))
    RETURNING r.id, r.finished_at
),
unlinked AS (
    -- a pruned run can no longer wait for anything nor be returned: its edges as a child and
    -- its key's record go with it (0008's trigger did this; schema 17 does it here)
    DELETE FROM rota_deps d WHERE d.child = ANY(ARRAY(SELECT id FROM doomed))
),
forgotten AS (
    DELETE FROM rota_unique u WHERE u.run_id = ANY(ARRAY(SELECT id FROM doomed))
)
SELECT id, extract(epoch FROM finished_at)::float8 FROM gone
UNION ALL
SELECT id, extract(epoch FROM finished_at)::float8 FROM gone_kept

-- ===================================================================================-- faults-store (issue 10): retries that keep key and backoff; lost and pruned workers
-- ==========================================================================================

-- name: retry_source
SELECT key, backoff FROM rota_runs_all WHERE id = %(id)s

-- name: mark_lost_workers
UPDATE rota_workers SET state = 'lost'
WHERE state NOT IN ('stopped', 'lost')
  AND last_seen < {now} - make_interval(secs => greatest(%(lost_after)s::double precision,
                                        CASE WHEN lease > 0 AND lease <= 31536000 THEN lease * 3 ELSE 0 END))
RETURNING id

-- name: prune_workers
DELETE FROM rota_workers
WHERE state IN ('stopped', 'lost') AND last_seen < {now} - make_interval(secs => %(older_than)s)
RETURNING id

-- >>> dashboard reads (rota.web) ------------------------------------------------------
-- Times as epoch seconds and JSON as text: rota.web decodes them and shows a value it
-- cannot decode (a date past year 9999, corrupt JSON) as corrupt instead of failing.
-- The store appends the WHERE/ORDER/LIMIT of a RunFilter or of one id.

-- name: web_run_summaries
SELECT id, task, status, queue, priority, key, schedule, extract(epoch FROM scheduled_for)::float8,
       attempt, max_attempts, owner, token, extract(epoch FROM lease_until)::float8, cancel_requested,
       extract(epoch FROM created_at)::float8, extract(epoch FROM started_at)::float8,
       extract(epoch FROM finished_at)::float8, retry_of,
       substr(args, 1, %(preview)s), length(args), substr(kwargs, 1, %(preview)s), length(kwargs),
       substr(result, 1, %(preview)s), length(result), substr(error, 1, %(error_prefix)s), length(error),
       backfill, waiting_on
FROM rota_runs_all

-- name: web_run_detail
SELECT id, task, status, queue, priority, key, schedule, extract(epoch FROM scheduled_for)::float8,
       attempt, max_attempts, owner, token, extract(epoch FROM lease_until)::float8, cancel_requested,
       extract(epoch FROM created_at)::float8, extract(epoch FROM started_at)::float8,
       extract(epoch FROM finished_at)::float8, retry_of,
       args, kwargs, result, error, attempts::text, backfill, extract(epoch FROM due_at)::float8
FROM rota_runs_all

-- name: web_timeline
SELECT id, task, schedule, status, attempt, extract(epoch FROM scheduled_for)::float8,
       extract(epoch FROM started_at)::float8, extract(epoch FROM finished_at)::float8, owner
FROM rota_runs_all
-- name: web_throughput
-- One bucket of a throughput chart (rota.web.charts): the first %(cap)s runs that finished
-- in [lo, hi), in finished_at order from rota_runs_finished (0007), which covers the columns
-- read (an index-only scan where the visibility map allows). The cap bounds the work; a
-- full bucket is scaled up.
SELECT count(*), extract(epoch FROM max(finished_at))::float8, count(*),
       count(*) FILTER (WHERE status = 'succeeded'), count(*) FILTER (WHERE status = 'failed'),
       count(*) FILTER (WHERE status = 'skipped'), count(*) FILTER (WHERE status = 'cancelled'),
       coalesce(sum(greatest(attempt, 1) - 1), 0)
FROM (SELECT finished_at, status, attempt FROM rota_runs_all
      WHERE finished_at >= to_timestamp(%(lo)s) AND finished_at < to_timestamp(%(hi)s)
      ORDER BY finished_at LIMIT %(cap)s) AS w

-- name: web_throughput_where
-- web_throughput for one task and/or queue: the cap bounds the rows read (before the
-- filter), so a rare task costs no more than a common one; the third column counts matches.
SELECT count(*), extract(epoch FROM max(finished_at))::float8, count(*) FILTER (WHERE hit),
       count(*) FILTER (WHERE hit AND status = 'succeeded'), count(*) FILTER (WHERE hit AND status = 'failed'),
       count(*) FILTER (WHERE hit AND status = 'skipped'), count(*) FILTER (WHERE hit AND status = 'cancelled'),
       coalesce(sum(greatest(attempt, 1) - 1) FILTER (WHERE hit), 0)
FROM (SELECT finished_at, status, attempt,
             (%(task)s::text IS NULL OR task = %(task)s::text)
             AND (%(queue)s::text IS NULL OR queue = %(queue)s::text) AS hit
      FROM rota_runs_all
      WHERE finished_at >= to_timestamp(%(lo)s) AND finished_at < to_timestamp(%(hi)s)
      ORDER BY finished_at LIMIT %(cap)s) AS w

-- name: web_lateness
-- A sample of one bucket for the lateness chart, the first %(cap)s finishes in [lo, hi):
-- attempt, start - scheduled_for, the queue wait (start - when it was both due and
-- created), and whether it matches the task/queue filter (applied after the cap).
SELECT attempt, extract(epoch FROM started_at - scheduled_for)::float8,
       extract(epoch FROM started_at - greatest(created_at, due_at))::float8,
       started_at IS NOT NULL AND (%(task)s::text IS NULL OR task = %(task)s::text)
       AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
FROM rota_runs_all
WHERE finished_at >= to_timestamp(%(lo)s) AND finished_at < to_timestamp(%(hi)s)
ORDER BY finished_at LIMIT %(cap)s

-- name: web_backlog
-- Pending runs by queue, due now and later: the first %(cap)s in due_at order (rota_runs_due).
SELECT queue, count(*) FILTER (WHERE due_at <= {now}), count(*) FILTER (WHERE due_at > {now}), count(*)
FROM (SELECT queue, due_at FROM rota_runs
      WHERE status = 'pending' AND NOT held ORDER BY due_at LIMIT %(cap)s) AS b
GROUP BY queue ORDER BY queue

-- name: web_queue_running
SELECT queue, count(*) FROM rota_runs WHERE status = 'running' GROUP BY queue ORDER BY queue
-- <<< dashboard reads (rota.web) ------------------------------------------------------

-- ==== operate-store (issue 14): planning errors, cheap run counts ==========================

-- name: mark_plan_error
-- A schedule this worker cannot plan: keep the error, stop it being due (compare-and-set on
-- the next_run_at the worker saw, so a concurrent update wins).
UPDATE rota_schedules SET plan_error = %(error)s, next_run_at = NULL, updated_at = {now}
WHERE name = %(name)s AND next_run_at = %(old)s AND active
RETURNING name

-- name: run_counts
-- The planner's view of rota_runs: a first row (NULL, estimated rows now: reltuples scaled
-- by the table's current size, as the planner does), then (status, estimated rows) from the
-- status column's most-common-values statistics. No scan of the table.
WITH rel AS (
    SELECT c.oid, c.relnamespace,
           CASE WHEN c.relpages > 0
                THEN c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::float8)
                ELSE c.reltuples END AS total
    FROM pg_class c WHERE c.oid = 'rota_runs'::regclass
)
SELECT NULL::text, round(total)::bigint FROM rel
UNION ALL
SELECT v.status, round(v.freq * rel.total)::bigint
FROM rel
JOIN pg_namespace n ON n.oid = rel.relnamespace
JOIN pg_stats s ON s.schemaname = n.nspname AND s.tablename = 'rota_runs' AND s.attname = 'status'
CROSS JOIN LATERAL unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS v(status, freq)

-- name: move_history
-- transition: none (a final run moves to rota_history as it is)
-- The worker's history sweep (rota.worker.maintenance): succeeded runs of no schedule that a
-- finish left in rota_runs (an earlier schema's, a transactional handler's commit), oldest
-- first through rota_runs_stray, to rota_history, whose columns are rota_runs' in its order.
-- A stray whose id is in rota_history already (damaged: a bad restore or copy) stays where it
-- is, and comes back with `true` (the store names it): one such run never fails the batch.
WITH stray AS (
    SELECT r.id, EXISTS (SELECT 1 FROM rota_history h WHERE h.id = r.id) AS twin FROM rota_runs r
    WHERE r.status = 'succeeded' AND r.schedule IS NULL
    ORDER BY r.id
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
),
moved AS (
    DELETE FROM rota_runs r
    WHERE r.id = ANY(ARRAY(SELECT id FROM stray WHERE NOT twin)) AND r.status = 'succeeded' AND r.schedule IS NULL
    RETURNING r.*
),
kept AS (
    INSERT INTO rota_history SELECT * FROM moved
    RETURNING id
)
SELECT id, false FROM kept
UNION ALL
SELECT id, true FROM stray WHERE twin

-- name: history_estimate
-- The planner's estimate of the rows in rota_history (schema 17: succeeded runs only), as
-- run_counts reads rota_runs'. Before its first ANALYZE (autovacuum's comes after 50 rows,
-- within a minute) the table is new and small: counted.
SELECT CASE WHEN c.reltuples < 0 THEN (SELECT count(*) FROM rota_history)::float8
            WHEN c.relpages > 0
            THEN c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::float8)
            ELSE c.reltuples END
FROM pg_class c WHERE c.oid = 'rota_history'::regclass

-- name: count_status
-- Exact, through rota_runs_active for pending and running (the few active runs).
SELECT count(*) FROM rota_runs WHERE status = %(status)s

-- name: probe_privileges
-- The privileges a worker needs that the current role lacks: (role, schema, object, privilege).
SELECT current_user, current_schema(), x.obj, x.priv
FROM (VALUES ('rota_runs'), ('rota_schedules'), ('rota_workers'), ('rota_locks')) AS t(obj)
CROSS JOIN LATERAL (VALUES (t.obj, 'SELECT'), (t.obj, 'INSERT'), (t.obj, 'UPDATE'), (t.obj, 'DELETE')) AS x(obj, priv)
WHERE NOT has_table_privilege(x.obj, x.priv)
UNION ALL
-- the tables of 0008 (flow-deps), 0010 (limits and rates), 0011 (task declarations), 0018
-- (paused queues, declared tasks) and 0017 (history), once they exist
SELECT current_user, current_schema(), x.obj, x.priv
FROM (VALUES ('rota_deps'), ('rota_unique'), ('rota_limits'), ('rota_rates'), ('rota_rate_starts'),
             ('rota_task_flow'), ('rota_history'), ('rota_queue_pauses'), ('rota_tasks')) AS t(obj)
CROSS JOIN LATERAL (VALUES (t.obj, 'SELECT'), (t.obj, 'INSERT'), (t.obj, 'UPDATE'), (t.obj, 'DELETE')) AS x(obj, priv)
WHERE CASE WHEN to_regclass(x.obj) IS NULL THEN false ELSE NOT has_table_privilege(x.obj, x.priv) END
UNION ALL
-- the view of every run, both tables (0017): reads of final runs go through it
SELECT current_user, current_schema(), 'rota_runs_all', 'SELECT'
WHERE CASE WHEN to_regclass('rota_runs_all') IS NULL THEN false
           ELSE NOT has_table_privilege('rota_runs_all', 'SELECT') END
UNION ALL
SELECT current_user, current_schema(), 'rota_migrations', 'SELECT'
WHERE NOT has_table_privilege('rota_migrations', 'SELECT')
UNION ALL
SELECT current_user, current_schema(), q.seq, 'USAGE'
FROM (VALUES ('rota_run_id_seq'), ('rota_token_seq')) AS q(seq)
WHERE NOT has_sequence_privilege(q.seq, 'USAGE')

-- name: probe_can_migrate
-- (current_schema() is NULL when no schema of the search_path exists)
SELECT coalesce(has_schema_privilege(current_schema(), 'CREATE'), false), current_user, current_schema(),
       current_setting('search_path')

-- The write probe (a worker's start, `rota migrate`): each kind of write on each table, in one
-- transaction that is rolled back. Catches what privileges do not show: a read-only
-- transaction or replica, row security, a read-only file.

-- name: probe_insert_run
-- transition: none (a write probe on row -1, rolled back)
INSERT INTO rota_runs (id, task, scheduled_for, due_at) VALUES (-1, %(probe)s, {now}, {now})

-- name: probe_update_run
-- transition: none (a write probe on row -1, rolled back)
UPDATE rota_runs SET status = 'cancelled' WHERE id = -1

-- name: probe_delete_run
-- transition: none (a write probe on row -1, rolled back)
DELETE FROM rota_runs WHERE id = -1

-- name: probe_insert_schedule
INSERT INTO rota_schedules (name, task, every, definition) VALUES (%(probe)s, %(probe)s, 60, '')

-- name: probe_update_schedule
UPDATE rota_schedules SET paused = true WHERE name = %(probe)s

-- name: probe_delete_schedule
DELETE FROM rota_schedules WHERE name = %(probe)s

-- name: probe_insert_worker
INSERT INTO rota_workers (id, host, pid, concurrency) VALUES (%(probe)s, '', 0, 1)

-- name: probe_update_worker
UPDATE rota_workers SET state = 'stopped' WHERE id = %(probe)s

-- name: probe_delete_worker
DELETE FROM rota_workers WHERE id = %(probe)s

-- name: probe_insert_lock
INSERT INTO rota_locks (name, token) VALUES (%(probe)s, 1)

-- name: probe_update_lock
UPDATE rota_locks SET token = 2 WHERE name = %(probe)s

-- name: probe_delete_lock
DELETE FROM rota_locks WHERE name = %(probe)s

-- name: probe_sequences
-- Takes one run id (ids have gaps anyway); the token sequence is left alone.
SELECT nextval('rota_run_id_seq')
-- ===== issue 10, worker side (branch faults-worker) =====================================

-- name: worker_seen_stuck
UPDATE rota_workers SET last_seen = {now}, state = %(state)s, stuck = %(stuck)s WHERE id = %(id)s

-- name: workers_stuck
SELECT id, stuck FROM rota_workers

-- name: database_started
SELECT pg_postmaster_start_time()

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

-- name: lock_parents
-- transition: enqueue
-- (of the dependent: no parent's status changes; sets has_dependents on the parents)
-- after=: lock the parents in id order (a finish of one waits until this enqueue commits,
-- so its trigger sees the new edges) and flag them; their status says what the child waits for.
-- A parent in rota_history succeeded (schema 17): nothing to lock or flag. One that moved there
-- while this statement waited for its lock is in neither answer (the lock skips a deleted row;
-- the history is read on this statement's snapshot): the caller asks again for the missing ones.
WITH p AS (
    SELECT id FROM rota_runs
    WHERE id = ANY(ARRAY(SELECT value::bigint FROM json_array_elements_text(%(ids)s::json)))
    ORDER BY id
    FOR UPDATE
),
flagged AS (
    UPDATE rota_runs r SET has_dependents = true
    FROM p WHERE r.id = p.id
    RETURNING r.id, r.status, r.task, r.after_depth
)
SELECT id, status, task, after_depth FROM flagged
UNION ALL
SELECT id, status, task, after_depth FROM rota_history
WHERE id = ANY(ARRAY(SELECT value::bigint FROM json_array_elements_text(%(ids)s::json)))

-- name: add_deps
INSERT INTO rota_deps (parent, child)
SELECT value::bigint, %(child)s FROM json_array_elements_text(%(ids)s::json)
ON CONFLICT DO NOTHING

-- name: depend_run
-- transition: enqueue
-- The new dependent's count of parents still to succeed (it was inserted held, or cancelled).
UPDATE rota_runs SET waiting_on = %(waiting)s, after_depth = %(depth)s,
    finished_at = CASE WHEN status = 'cancelled' THEN {now} ELSE finished_at END
WHERE id = %(id)s

-- name: deps_orphaned
-- transition: orphaned
-- Runs waiting on parents none of which is pending or running any more (rota_runs_held): a
-- parent deleted by hand, or a damaged waiting_on. Each ended failed as damaged (rota/quarantine.py),
-- a worker's check now and then; a failed run's dependents are cancelled by rota_run_settled.
UPDATE rota_runs
SET status = 'failed', held = false, waiting_on = 0, finished_at = {now}, error = %(error)s
WHERE id IN (SELECT w.id FROM rota_runs w
             WHERE w.held AND w.status = 'pending' AND w.waiting_on > 0
               AND NOT EXISTS (SELECT 1 FROM rota_deps d JOIN rota_runs p ON p.id = d.parent
                               WHERE d.child = w.id AND p.status IN ('pending', 'running'))
             ORDER BY w.id LIMIT %(limit)s
               FOR UPDATE SKIP LOCKED)
  AND status = 'pending' AND held AND waiting_on > 0
RETURNING id, task

-- name: run_parents
SELECT parent FROM rota_deps WHERE child = %(id)s ORDER BY parent

-- name: run_dependents
SELECT child FROM rota_deps WHERE parent = %(id)s ORDER BY child

-- name: parent_results
SELECT r.id, r.result FROM rota_deps d JOIN rota_runs_all r ON r.id = d.parent
WHERE d.child = %(id)s ORDER BY r.id

-- name: web_run_waiting
-- (run_rows appends WHERE id = ...)
SELECT waiting_on FROM rota_runs_all

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

-- ==== ticks made ahead (issue 18, branch ticks): misfire deadlines ==========================

-- name: insert_ahead
-- transition: make_ahead
-- The run of a tick that has not come yet: pending, due at the tick, with its misfire
-- deadline (tick + misfire_grace; NULL under misfire="all"): see 0005_ticks_ahead.sql.
INSERT INTO rota_runs (task, queue, priority, args, kwargs, schedule, tick, exclusive,
                       scheduled_for, due_at, max_attempts, timeout, backoff, misfire_at,
                       limit_name, limit_key, rate_name, rate_key)
VALUES (%(task)s, %(queue)s, %(priority)s, %(args)s, %(kwargs)s, %(schedule)s, %(tick)s,
        %(exclusive)s, %(tick)s, coalesce(%(due_at)s, %(tick)s), %(max_attempts)s, %(timeout)s, %(backoff)s,
        %(misfire_at)s, %(limit_name)s, %(limit_key)s, %(rate_name)s, %(rate_key)s)
ON CONFLICT DO NOTHING
RETURNING id

-- name: stale_ahead
-- Runs made ahead of their tick that no worker claimed by their misfire deadline, with what
-- judging them needs: the schedule's policy and grace, and whether a later tick of the
-- schedule is due by now (planned already, or still to plan).
SELECT r.id, r.schedule, r.tick, s.misfire, s.misfire_grace,
       coalesce(s.next_run_at <= {now}, false) OR EXISTS (
           SELECT 1 FROM rota_runs l
           WHERE l.schedule = r.schedule AND l.tick > r.tick AND l.tick <= {now})
FROM rota_runs r JOIN rota_schedules s ON s.name = r.schedule
WHERE r.status = 'pending' AND r.misfire_at IS NOT NULL AND r.misfire_at < {now}
ORDER BY r.misfire_at
LIMIT %(limit)s

-- name: misfire_ahead
-- transition: misfire_skip
-- A run made ahead, unclaimed past its misfire deadline, skipped by the misfire policy.
UPDATE rota_runs SET status = 'skipped', finished_at = {now}, error = %(error)s, misfire_at = NULL
WHERE id = %(id)s AND status = 'pending' AND misfire_at < {now}
RETURNING id

-- name: keep_ahead
-- transition: misfire_run
-- A run made ahead, unclaimed past its misfire deadline, that the misfire policy runs all
-- the same (misfire="coalesce" with no later tick due): claimable again, without deadline.
UPDATE rota_runs SET misfire_at = NULL
WHERE id = %(id)s AND status = 'pending' AND misfire_at < {now}
RETURNING id

-- Flow control (rota.Limit, rota.Rate; design note in rota/stores/_limits.py). A limit key's
-- free slots: its limit's max less its running runs; a rate key's room: its rate's max less
-- its starts in the last `per` seconds. A key whose limit or rate no worker declared yet has
-- neither (NULL): its runs wait.

-- name: flow_heads
-- (`count(r.id)`: an index scan that visits the rows, which marks the index entries of
-- row versions gone as dead; an index-only scan never does, and would walk every run that
-- ever ran on the key until VACUUM: a count growing with the drain.)
-- The keys with a due waiting run, the key whose first run comes first in the claim's order
-- first, with their free slots or room as this statement's snapshot sees them (flow_room
-- counts again once they are locked). The keys are found by a loose index scan (one probe
-- per distinct key of the waiting runs, however many runs wait). Each key is taken with a
-- transaction-level advisory try-lock, one at a time up to %(n)s keys: a key another
-- claimer holds is skipped (as SKIP LOCKED skips a row), so concurrent claimers share the
-- keys and never wait or deadlock. A full rate key is taken too: its waiting runs are then
-- made due when its window opens. (`OFFSET 0` in the room's subquery: without it the planner
-- inlines it, and counts each key's room twice, once for the filter and once for the output.)
-- Each key locked is also noted, in lock order, in the transaction's setting
-- `rota.flow_keys` ("[kind, name, key]," each): a flow_take_limits sent in the same pipeline
-- without keys reads them there, so the flow claim needs no round trip of its own.
WITH RECURSIVE lkeys AS (
    (SELECT limit_name AS name, limit_key AS key FROM rota_runs
     WHERE status = 'pending' AND NOT held AND limit_name IS NOT NULL
     ORDER BY limit_name, limit_key LIMIT 1)
    UNION ALL
    SELECT n.name, n.key FROM lkeys CROSS JOIN LATERAL (
        SELECT limit_name AS name, limit_key AS key FROM rota_runs
        WHERE status = 'pending' AND NOT held AND limit_name IS NOT NULL
          AND (limit_name, limit_key) > (lkeys.name, lkeys.key)
        ORDER BY limit_name, limit_key LIMIT 1) n
),
rkeys AS (
    (SELECT rate_name AS name, rate_key AS key FROM rota_runs
     WHERE status = 'pending' AND NOT held AND rate_name IS NOT NULL
     ORDER BY rate_name, rate_key LIMIT 1)
    UNION ALL
    SELECT n.name, n.key FROM rkeys CROSS JOIN LATERAL (
        SELECT rate_name AS name, rate_key AS key FROM rota_runs
        WHERE status = 'pending' AND NOT held AND rate_name IS NOT NULL
          AND (rate_name, rate_key) > (rkeys.name, rkeys.key)
        ORDER BY rate_name, rate_key LIMIT 1) n
),
heads AS MATERIALIZED (
    SELECT 'l' AS kind, k.name, k.key, h.priority, h.due_at, h.id FROM lkeys k
    JOIN LATERAL (SELECT r.priority, r.due_at, r.id FROM rota_runs r
                  WHERE r.limit_name = k.name AND r.limit_key = k.key AND r.limit_name IS NOT NULL
                    AND r.status = 'pending' AND NOT r.held AND r.due_at <= {now}
                    AND (%(queues)s::text[] IS NULL OR r.queue = ANY(%(queues)s::text[])) AND coalesce(r.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
                  ORDER BY r.priority DESC, r.due_at, r.id LIMIT 1) h ON true
    UNION ALL
    SELECT 'r' AS kind, k.name, k.key, h.priority, h.due_at, h.id FROM rkeys k
    JOIN LATERAL (SELECT r.priority, r.due_at, r.id FROM rota_runs r
                  WHERE r.rate_name = k.name AND r.rate_key = k.key AND r.rate_name IS NOT NULL
                    AND r.status = 'pending' AND NOT r.held AND r.due_at <= {now}
                    AND (%(queues)s::text[] IS NULL OR r.queue = ANY(%(queues)s::text[])) AND coalesce(r.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
                  ORDER BY r.priority DESC, r.due_at, r.id LIMIT 1) h ON true
),
room AS (
    SELECT h.kind, h.name, h.key, h.priority, h.due_at, h.id FROM heads h
    ORDER BY h.priority DESC, h.due_at, h.id
    OFFSET 0  -- keeps the filter below above the sort: evaluated key by key, up to the LIMIT
)
SELECT kind, name, key, free FROM room h CROSS JOIN LATERAL (
    SELECT CASE WHEN h.kind = 'l'
                THEN (SELECT l.max FROM rota_limits l WHERE l.name = h.name AND l.max BETWEEN 1 AND 1000000)
                     - (SELECT count(r.id) FROM rota_runs r WHERE r.status = 'running'
                        AND r.limit_name = h.name AND r.limit_key = h.key)
                ELSE (SELECT CASE WHEN t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400  -- else damaged: no room
                                   THEN t.max - (SELECT count(*) FROM rota_rate_starts s
                                      WHERE s.name = h.name AND s.key = h.key
                                        AND s.started_at > {now} - make_interval(secs => t.per)
                                        AND s.started_at <= {now} + make_interval(secs => t.per)) ELSE 0 END
                      FROM rota_rates t WHERE t.name = h.name) END AS free OFFSET 0) f
WHERE CASE WHEN f.free > 0 OR (h.kind = 'r' AND f.free IS NOT NULL)  -- room first, then the lock
           THEN CASE WHEN pg_try_advisory_xact_lock(1919907937, hashtext(current_schema() || h.kind || h.name || chr(31) || h.key))
                     THEN set_config('rota.flow_keys', coalesce(current_setting('rota.flow_keys', true), '')
                                     || json_build_array(h.kind, h.name, h.key)::text || ',', true) IS NOT NULL
                     ELSE false END
           ELSE false END
LIMIT %(n)s

-- name: flow_walk_plan
-- Before flow_heads_walk, for the rest of the flow claim's transaction: no bitmap scans. On
-- a table not analyzed yet (a backlog just enqueued) the planner guesses a handful of
-- waiting runs and would fetch and sort them all (measured: 17 ms for 20,000) rather than
-- read the first ones from rota_runs_gated_order (2 ms).
SELECT set_config('enable_bitmapscan', 'off', true)

-- name: flow_heads_walk
-- As flow_heads, for a claim after one that took as many keys as it may (many keys wait):
-- the keys with a due waiting run, the key whose first run comes first in the claim's order
-- first, with their free slots or room as this statement's snapshot sees them (counted
-- again once they are locked: flow_take_limits, flow_room). Each key is taken with a
-- transaction-level advisory try-lock, one at a time up to %(n)s keys: a key another
-- claimer holds is skipped (as SKIP LOCKED skips a row), so concurrent claimers share the
-- keys and never wait or deadlock. A full rate key is taken too: its waiting runs are then
-- made due when its window opens. The room of a key is counted only when its turn comes.
-- The keys come first from the first %(m)s waiting runs in the claim's order (`near`:
-- rota_runs_gated_order, whatever the number of keys). Only when those runs were not all
-- the waiting ones and gave fewer than %(n)s keys, the keys beyond them are found by a
-- loose index scan (`far`: one probe per distinct key of the waiting runs, however many
-- runs wait), so runs of full keys at the head never keep the others waiting.
WITH RECURSIVE walked AS MATERIALIZED (  -- (due or not: the index gives the order, no sort)
    SELECT r.limit_name, r.limit_key, r.rate_name, r.rate_key, r.priority, r.due_at, r.id FROM rota_runs r
    WHERE r.status = 'pending' AND NOT r.held AND (r.limit_name IS NOT NULL OR r.rate_name IS NOT NULL)
      AND (%(queues)s::text[] IS NULL OR r.queue = ANY(%(queues)s::text[])) AND coalesce(r.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
    ORDER BY r.priority DESC, r.due_at, r.id
    LIMIT %(m)s
),
near AS MATERIALIZED (
    SELECT DISTINCT ON (kind, name, key) kind, name, key, priority, due_at, id FROM (
        SELECT 'l' AS kind, limit_name AS name, limit_key AS key, priority, due_at, id FROM walked
        WHERE limit_name IS NOT NULL AND due_at <= {now}
        UNION ALL
        SELECT 'r', rate_name, rate_key, priority, due_at, id FROM walked
        WHERE rate_name IS NOT NULL AND due_at <= {now}) w
    ORDER BY kind, name, key, priority DESC, due_at, id
),
lkeys AS (
    (SELECT limit_name AS name, limit_key AS key FROM rota_runs
     WHERE status = 'pending' AND NOT held AND limit_name IS NOT NULL
     ORDER BY limit_name, limit_key LIMIT 1)
    UNION ALL
    SELECT n.name, n.key FROM lkeys CROSS JOIN LATERAL (
        SELECT limit_name AS name, limit_key AS key FROM rota_runs
        WHERE status = 'pending' AND NOT held AND limit_name IS NOT NULL
          AND (limit_name, limit_key) > (lkeys.name, lkeys.key)
        ORDER BY limit_name, limit_key LIMIT 1) n
),
rkeys AS (
    (SELECT rate_name AS name, rate_key AS key FROM rota_runs
     WHERE status = 'pending' AND NOT held AND rate_name IS NOT NULL
     ORDER BY rate_name, rate_key LIMIT 1)
    UNION ALL
    SELECT n.name, n.key FROM rkeys CROSS JOIN LATERAL (
        SELECT rate_name AS name, rate_key AS key FROM rota_runs
        WHERE status = 'pending' AND NOT held AND rate_name IS NOT NULL
          AND (rate_name, rate_key) > (rkeys.name, rkeys.key)
        ORDER BY rate_name, rate_key LIMIT 1) n
),
far AS MATERIALIZED (
    SELECT 'l' AS kind, k.name, k.key, h.priority, h.due_at, h.id FROM lkeys k
    JOIN LATERAL (SELECT r.priority, r.due_at, r.id FROM rota_runs r
                  WHERE r.limit_name = k.name AND r.limit_key = k.key AND r.limit_name IS NOT NULL
                    AND r.status = 'pending' AND NOT r.held AND r.due_at <= {now}
                    AND (%(queues)s::text[] IS NULL OR r.queue = ANY(%(queues)s::text[])) AND coalesce(r.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
                  ORDER BY r.priority DESC, r.due_at, r.id LIMIT 1) h ON true
    UNION ALL
    SELECT 'r' AS kind, k.name, k.key, h.priority, h.due_at, h.id FROM rkeys k
    JOIN LATERAL (SELECT r.priority, r.due_at, r.id FROM rota_runs r
                  WHERE r.rate_name = k.name AND r.rate_key = k.key AND r.rate_name IS NOT NULL
                    AND r.status = 'pending' AND NOT r.held AND r.due_at <= {now}
                    AND (%(queues)s::text[] IS NULL OR r.queue = ANY(%(queues)s::text[])) AND coalesce(r.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
                  ORDER BY r.priority DESC, r.due_at, r.id LIMIT 1) h ON true
),
taken AS MATERIALIZED (
    SELECT h.kind, h.name, h.key, f.free FROM (
        SELECT * FROM near ORDER BY priority DESC, due_at, id
        OFFSET 0) h  -- keeps the filter above the sort: evaluated key by key, up to the LIMIT
    CROSS JOIN LATERAL (
    SELECT CASE WHEN h.kind = 'l'
                THEN (SELECT l.max FROM rota_limits l WHERE l.name = h.name AND l.max BETWEEN 1 AND 1000000)
                     - (SELECT count(r.id) FROM rota_runs r WHERE r.status = 'running'
                        AND r.limit_name = h.name AND r.limit_key = h.key)
                ELSE (SELECT CASE WHEN t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400  -- else damaged: no room
                                   THEN t.max - (SELECT count(*) FROM rota_rate_starts s
                                      WHERE s.name = h.name AND s.key = h.key
                                        AND s.started_at > {now} - make_interval(secs => t.per)
                                        AND s.started_at <= {now} + make_interval(secs => t.per)) ELSE 0 END
                      FROM rota_rates t WHERE t.name = h.name) END AS free OFFSET 0) f
    WHERE CASE WHEN f.free > 0 OR (h.kind = 'r' AND f.free IS NOT NULL)  -- room first, then the lock
          THEN pg_try_advisory_xact_lock(1919907937, hashtext(current_schema() || h.kind || h.name || chr(31) || h.key))
          ELSE false END
    LIMIT %(n)s
)
SELECT kind, name, key, free FROM taken
UNION ALL
(SELECT h.kind, h.name, h.key, f.free FROM (
     SELECT * FROM far x
     WHERE NOT EXISTS (SELECT 1 FROM near y WHERE y.kind = x.kind AND y.name = x.name AND y.key = x.key)
     ORDER BY priority DESC, due_at, id
     OFFSET 0) h
 CROSS JOIN LATERAL (
    SELECT CASE WHEN h.kind = 'l'
                THEN (SELECT l.max FROM rota_limits l WHERE l.name = h.name AND l.max BETWEEN 1 AND 1000000)
                     - (SELECT count(r.id) FROM rota_runs r WHERE r.status = 'running'
                        AND r.limit_name = h.name AND r.limit_key = h.key)
                ELSE (SELECT CASE WHEN t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400  -- else damaged: no room
                                   THEN t.max - (SELECT count(*) FROM rota_rate_starts s
                                      WHERE s.name = h.name AND s.key = h.key
                                        AND s.started_at > {now} - make_interval(secs => t.per)
                                        AND s.started_at <= {now} + make_interval(secs => t.per)) ELSE 0 END
                      FROM rota_rates t WHERE t.name = h.name) END AS free OFFSET 0) f
 WHERE (SELECT count(*) FROM walked) >= %(m)s AND (SELECT count(*) FROM taken) < %(n)s
   AND CASE WHEN f.free > 0 OR (h.kind = 'r' AND f.free IS NOT NULL)  -- room first, then the lock
          THEN pg_try_advisory_xact_lock(1919907937, hashtext(current_schema() || h.kind || h.name || chr(31) || h.key))
          ELSE false END
 LIMIT greatest(%(n)s - (SELECT count(*) FROM taken), 0))

-- name: flow_due
-- Is a limited or rated run due (the probe the plain claim's transaction ends with)? For a
-- worker of every queue. No "queues IS NULL OR ..." test: with one, PostgreSQL's generic plan
-- of the prepared statement costs more than a custom one, so it planned it again at every
-- call (0.15 ms per flow claim, measured, against 0.03 to run it); flow_due_in_queues has it.
-- The first waiting run in due order, in a subquery (an EXISTS drops its ORDER BY and LIMIT):
-- as a plain EXISTS, once the statistics said most rows wait, the planner scanned the table
-- and read every finished run in front of the waiting ones (1-2 ms per flow claim in a
-- drain, growing with the history kept).
SELECT EXISTS (SELECT 1 FROM (
    SELECT 1 FROM rota_runs
    WHERE status = 'pending' AND NOT held AND due_at <= {now}
      AND (limit_name IS NOT NULL OR rate_name IS NOT NULL)
      AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
    ORDER BY due_at
    LIMIT 1) AS first)

-- name: flow_due_in_queues
-- flow_due for a worker of some queues.
SELECT EXISTS (SELECT 1 FROM (
    SELECT 1 FROM rota_runs
    WHERE status = 'pending' AND NOT held AND due_at <= {now}
      AND (limit_name IS NOT NULL OR rate_name IS NOT NULL)
      AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
      AND queue = ANY(%(queues)s::text[])
    ORDER BY due_at
    LIMIT 1) AS first)

-- name: plain_due
-- Is a run without a limit or a rate due (the plain claim's candidates)? Sent with a flow
-- claim whose plain claim was asked for no run (the limits took every slot asked for), so
-- the worker knows whether to hold runs ahead (rota/stores/_limits.py, limits_full). The
-- claim's own index and order: it stops at the first candidate, as the claim would.
SELECT EXISTS (SELECT 1 FROM (
    SELECT 1 FROM rota_runs
    WHERE status = 'pending' AND NOT held AND due_at <= {now}
      AND (misfire_at IS NULL OR misfire_at >= {now})
      AND limit_name IS NULL AND rate_name IS NULL AND NOT cancel_requested
      AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[])) AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
    ORDER BY priority DESC, due_at, id
    LIMIT 1) AS first)

-- name: flow_poll_later
-- poll_state after a claim that left due limited runs waiting for a slot: the next run due
-- is the first due later (a range of rota_runs_due from now: the waiting runs before it
-- are not walked; a freed slot wakes the workers itself)
SELECT {now},
       (SELECT min(due_at) FROM rota_runs
        WHERE status = 'pending' AND NOT held AND due_at > {now} AND (misfire_at IS NULL OR misfire_at >= {now})
          AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[])) AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)),
       least((SELECT min(next_run_at) FROM rota_schedules WHERE active AND NOT paused),
             (SELECT min(misfire_at) FROM rota_runs
              WHERE status = 'pending' AND misfire_at IS NOT NULL AND misfire_at < {now}))

-- name: flow_room
-- The free slots or room of the keys this transaction locked (a statement after the lock,
-- so it sees every claim committed before the lock was granted).
SELECT e->>0, e->>1, e->>2,
       CASE WHEN e->>0 = 'l'
            THEN (SELECT l.max FROM rota_limits l WHERE l.name = e->>1 AND l.max BETWEEN 1 AND 1000000)
                 - (SELECT count(r.id) FROM rota_runs r WHERE r.status = 'running'
                    AND r.limit_name = e->>1 AND r.limit_key = e->>2)
            ELSE (SELECT CASE WHEN t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400  -- else damaged: no room
                               THEN t.max - (SELECT count(*) FROM rota_rate_starts s
                                  WHERE s.name = e->>1 AND s.key = e->>2
                                    AND s.started_at > {now} - make_interval(secs => t.per)
                                        AND s.started_at <= {now} + make_interval(secs => t.per)) ELSE 0 END
                  FROM rota_rates t WHERE t.name = e->>1) END
FROM json_array_elements(%(keys)s::json) AS e

-- name: flow_waiting_limit
-- A limit key's first due waiting runs, in the claim's order. A tick made ahead whose misfire
-- deadline passed while it waited is left for the tick pass to judge, as in claim (a filter
-- on the rows the scan reads anyway, for their rate: the same index, nothing more read).
SELECT id, limit_name, limit_key, rate_name, rate_key FROM rota_runs
WHERE limit_name = %(name)s AND limit_key = %(key)s AND limit_name IS NOT NULL
  AND status = 'pending' AND NOT held AND due_at <= {now}
  AND (misfire_at IS NULL OR misfire_at >= {now})
  AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[])) AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
ORDER BY priority DESC, due_at, id
LIMIT %(n)s

-- name: flow_waiting_rate
-- A rate key's first due waiting runs, in the claim's order (past their misfire deadline:
-- left for the tick pass, as in flow_waiting_limit)
SELECT id, limit_name, limit_key, rate_name, rate_key FROM rota_runs
WHERE rate_name = %(name)s AND rate_key = %(key)s AND rate_name IS NOT NULL
  AND status = 'pending' AND NOT held AND due_at <= {now}
  AND (misfire_at IS NULL OR misfire_at >= {now})
  AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[])) AND coalesce(rota_runs.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
ORDER BY priority DESC, due_at, id
LIMIT %(n)s

-- name: flow_take
-- transition: claim
-- as claim, for the runs the flow claim chose (their keys locked by this transaction). The
-- start is stamped with this statement's time, not the transaction's: after the commit that
-- freed the slot (flow_room saw it), so started_at never precedes the finished_at it follows.
UPDATE rota_runs r
SET status = 'running', owner = %(owner)s, token = nextval('rota_token_seq'),
    attempt = r.attempt + (r.attempt < 2147483647)::int,  -- (at the maximum: damaged; see claim)
    rate_waited = false, misfire_at = NULL,  -- as in claim: a tick taken (its retry is no misfire)
    started_at = coalesce(%(now)s::timestamptz, statement_timestamp()),
    lease_until = coalesce(%(now)s::timestamptz, statement_timestamp()) + make_interval(secs => %(lease)s)
WHERE r.id = ANY(ARRAY(SELECT e::bigint FROM json_array_elements_text(%(ids)s::json) AS e))
  AND r.status = 'pending'
RETURNING r.id, r.task, r.args, r.kwargs, r.attempt, r.max_attempts, r.token, r.timeout,
          r.backoff, r.schedule, r.scheduled_for, r.started_at, r.lease_until,
          r.priority, extract(epoch FROM r.due_at)::float8

-- name: flow_take_limits
-- transition: claim
-- The flow claim's second statement when every key taken is a limit key (no rate): after
-- the locks (flow_heads), in one statement, each key's free slots (counted again: this
-- statement's snapshot sees every claim committed before the lock was granted), its first
-- waiting runs up to them, and their claim, keys in flow_heads' order, at most %(limit)s in
-- all. A waiting run that also has a rate is left for a flow claim that locks its rate key
-- (it uses its slot quota here, as in the general path). The first %(start)s start, the rest
-- are held (as claim's: held runs count against their limit too). Stamped as flow_take.
-- Without %(keys)s (NULL), the limit keys flow_heads locked earlier in this transaction.
WITH keys AS MATERIALIZED (
    SELECT k.ord, k.e->>1 AS name, k.e->>2 AS key,
           (SELECT l.max FROM rota_limits l WHERE l.name = k.e->>1 AND l.max BETWEEN 1 AND 1000000)
           - (SELECT count(r.id) FROM rota_runs r WHERE r.status = 'running'
              AND r.limit_name = k.e->>1 AND r.limit_key = k.e->>2) AS free
    FROM json_array_elements(coalesce(%(keys)s::json,  -- none given: those flow_heads locked (its note)
             ('[' || rtrim(coalesce(current_setting('rota.flow_keys', true), ''), ',') || ']')::json))
         WITH ORDINALITY AS k(e, ord)
    WHERE k.e->>0 = 'l'  -- (a rate key flow_heads locked is the general path's: left to the next claim)
),
picked AS MATERIALIZED (
    SELECT w.ctid, row_number() OVER (ORDER BY k.ord, w.rn) AS pos FROM keys k CROSS JOIN LATERAL (
        SELECT r.ctid, r.rate_name, row_number() OVER () AS rn FROM (
            SELECT r.ctid, r.rate_name FROM rota_runs r
            WHERE r.limit_name = k.name AND r.limit_key = k.key AND r.limit_name IS NOT NULL
              AND r.status = 'pending' AND NOT r.held AND r.due_at <= {now}
              AND (r.misfire_at IS NULL OR r.misfire_at >= {now})  -- as flow_waiting_limit
              AND (%(queues)s::text[] IS NULL OR r.queue = ANY(%(queues)s::text[])) AND coalesce(r.queue <> ALL (ARRAY(SELECT queue FROM rota_queue_pauses)), true)
            ORDER BY r.priority DESC, r.due_at, r.id
            LIMIT greatest(coalesce(k.free, 0), 0)) r) w
    WHERE w.rate_name IS NULL
    ORDER BY k.ord, w.rn
    LIMIT %(limit)s
),
-- The row versions to update, by address (a TID scan, as in claim). Joined to `picked`
-- by id instead, the planner trusted the statistics of the table before a burst (a handful
-- of pending runs) and hashed or walked every pending run on each claim (measured: 5.4 ms
-- per call at 20,000 waiting, against 1.4 ms). A run changed and committed since this
-- statement's snapshot (a cancel request) has a new address: it is left pending, not taken
-- (so no status test here: one would offer the planner the active runs' index again).
ids AS MATERIALIZED (
    SELECT array_agg(ctid) AS every, array_agg(ctid) FILTER (WHERE pos <= %(start)s) AS starts FROM picked
)
UPDATE rota_runs r
SET status = 'running', owner = %(owner)s, token = nextval('rota_token_seq'),
    attempt = CASE WHEN r.ctid = ANY((SELECT starts FROM ids)::tid[]) AND r.attempt < 2147483647
                   THEN r.attempt + 1 ELSE r.attempt END,  -- (see claim)
    started_at = CASE WHEN r.ctid = ANY((SELECT starts FROM ids)::tid[])
                      THEN coalesce(%(now)s::timestamptz, statement_timestamp()) END,
    misfire_at = NULL,  -- as in claim
    lease_until = coalesce(%(now)s::timestamptz, statement_timestamp()) + make_interval(secs => %(lease)s)
WHERE r.ctid = ANY((SELECT every FROM ids)::tid[])
RETURNING r.id, r.task, r.args, r.kwargs, r.attempt, r.max_attempts, r.token, r.timeout,
          r.backoff, r.schedule, r.scheduled_for, r.started_at, r.lease_until,
          r.priority, extract(epoch FROM r.due_at)::float8

-- name: flow_started
-- the starts of rated runs just claimed, in their windows' log
INSERT INTO rota_rate_starts (name, key, started_at)
SELECT rate_name, rate_key, started_at FROM rota_runs
WHERE id = ANY(ARRAY(SELECT e::bigint FROM json_array_elements_text(%(ids)s::json) AS e))
  AND rate_name IS NOT NULL

-- name: flow_bump
-- transition: rate_wait
-- A full rate key (locked by this transaction): its due waiting runs become due when the
-- window opens, i.e. when the start that makes it full leaves it, so workers sleep till then.
-- A rate whose stored max or per is out of range (damaged: rota/quarantine.py) bumps nothing;
-- a start logged later than a window ahead of now (damaged) is not counted.
WITH t AS (SELECT max, make_interval(secs => per) AS per FROM rota_rates
           WHERE name = %(name)s AND max BETWEEN 1 AND 1000000 AND per BETWEEN 0.001 AND 31622400),
w AS (SELECT s.started_at FROM rota_rate_starts s
      WHERE s.name = %(name)s AND s.key = %(key)s AND s.started_at > {now} - (SELECT per FROM t)
        AND s.started_at <= {now} + (SELECT per FROM t)),
o AS (SELECT started_at + (SELECT per FROM t) AS at FROM w ORDER BY started_at
      OFFSET greatest((SELECT count(*) FROM w) - (SELECT max FROM t), 0) LIMIT 1)
UPDATE rota_runs r SET due_at = o.at, rate_waited = true FROM o
WHERE r.rate_name = %(name)s AND r.rate_key = %(key)s AND r.rate_name IS NOT NULL
  AND r.status = 'pending' AND NOT r.held AND r.due_at <= {now} AND r.due_at < o.at
  AND (SELECT count(*) FROM w) >= (SELECT max FROM t)

-- name: flow_prune
-- a locked rate key's starts that left the window, and those logged later than a window ahead
-- of now (damaged: no claim logs a start in the future); none while the rate's per is out of
-- range (damaged: its window is unknown)
DELETE FROM rota_rate_starts s USING (
    SELECT make_interval(secs => per) AS per FROM rota_rates
    WHERE name = %(name)s AND per BETWEEN 0.001 AND 31622400) t
WHERE s.name = %(name)s AND s.key = %(key)s
  AND (s.started_at <= {now} - t.per OR s.started_at > {now} + t.per)

-- name: flow_keyless
-- transition: keyless
-- Waiting runs with the name of a stored limit or rate and no key (damaged: no claim can take
-- one), each ended failed as damaged (rota/quarantine.py), a worker's check now and then.
-- Found per pool through rota_runs_limit_waiting and rota_runs_rate_waiting (name, NULL key).
UPDATE rota_runs
SET status = 'failed', finished_at = {now}, error = %(error)s
WHERE id IN (SELECT id FROM (
        SELECT r.id FROM rota_limits l JOIN rota_runs r ON r.limit_name = l.name
        WHERE r.limit_key IS NULL AND r.status = 'pending' AND NOT r.held AND r.limit_name IS NOT NULL
        UNION ALL
        SELECT r.id FROM rota_rates t JOIN rota_runs r ON r.rate_name = t.name
        WHERE r.rate_key IS NULL AND r.status = 'pending' AND NOT r.held AND r.rate_name IS NOT NULL) AS k
      LIMIT %(limit)s)
  AND status = 'pending' AND NOT held
RETURNING id, task

-- name: flow_any
SELECT (SELECT count(*) FROM rota_limits) + (SELECT count(*) FROM rota_rates)

-- name: flow_upsert_limit
INSERT INTO rota_limits (name, max, updated_at) VALUES (%(name)s, %(max)s, {now})
ON CONFLICT (name) DO UPDATE SET max = excluded.max, updated_at = excluded.updated_at

-- name: flow_rate_reopen
-- transition: rate_reopen
-- Before a deploy stores a rate with a new max or per: the runs waiting for its old window
-- (rate_waited, set by flow_bump, which moves only due runs) are due again, and the next
-- claim judges them by the new rate.
UPDATE rota_runs r SET due_at = {now}, rate_waited = false
FROM rota_rates t
WHERE t.name = %(name)s AND (t.max <> %(max)s OR t.per <> %(per)s)
  AND r.rate_name = t.name AND r.rate_waited AND r.status = 'pending' AND NOT r.held

-- name: flow_upsert_rate
INSERT INTO rota_rates (name, max, per, updated_at) VALUES (%(name)s, %(max)s, %(per)s, {now})
ON CONFLICT (name) DO UPDATE SET max = excluded.max, per = excluded.per, updated_at = excluded.updated_at

-- name: flow_limits
-- each limit with its running and waiting (pending) runs, over all its keys
SELECT l.name, l.max,
       (SELECT count(*) FROM rota_runs r WHERE r.limit_name = l.name AND r.status = 'running'),
       (SELECT count(*) FROM rota_runs r WHERE r.limit_name = l.name AND r.status = 'pending'),
       (SELECT count(DISTINCT limit_key) FROM rota_runs r WHERE r.limit_name = l.name AND r.status IN ('pending', 'running'))
FROM rota_limits l ORDER BY l.name

-- name: flow_rates
-- each rate with its starts in the current window and its waiting (pending) runs
-- (a damaged max or per, out of range, is listed as stored, with no starts counted)
SELECT t.name, t.max, t.per,
       (SELECT count(*) FROM rota_rate_starts s WHERE s.name = t.name
          AND t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400
          AND s.started_at > {now} - make_interval(secs => CASE WHEN t.per BETWEEN 0.001 AND 31622400 THEN t.per END)
          AND s.started_at <= {now} + make_interval(secs => CASE WHEN t.per BETWEEN 0.001 AND 31622400 THEN t.per END)),
       (SELECT count(*) FROM rota_runs r WHERE r.rate_name = t.name AND r.status = 'pending'),
       (SELECT count(DISTINCT rate_key) FROM rota_runs r WHERE r.rate_name = t.name AND r.status = 'pending')
FROM rota_rates t ORDER BY t.name

-- name: flow_damaged
-- Every stored limit, rate and task spec, for a worker's check for damaged ones (small tables:
-- one row per pool or task; rota/stores/_flow_damage.py judges them)
SELECT 'l', name, max, NULL::float8, NULL FROM rota_limits
UNION ALL
SELECT 'r', name, max, per, NULL FROM rota_rates
UNION ALL
SELECT 's', task, NULL, NULL::float8, spec FROM rota_task_flow

-- ==== stored task declarations (migration 0011, rota/limit_specs.py) ======================

-- name: flow_put_spec
INSERT INTO rota_task_flow (task, spec, updated_at) VALUES (%(task)s, %(spec)s, {now})
ON CONFLICT (task) DO UPDATE SET spec = excluded.spec, updated_at = excluded.updated_at
WHERE rota_task_flow.spec IS DISTINCT FROM excluded.spec

-- name: flow_drop_specs
-- the tasks this deploy declares without a limit or a rate
DELETE FROM rota_task_flow WHERE task = ANY(%(tasks)s::text[])

-- name: flow_spec
SELECT spec FROM rota_task_flow WHERE task = %(task)s

-- name: flow_unresolved
-- Runs made where their task's keys could not be computed (a callable by=), for a worker
-- that declares the task to key (found through rota_runs_limit_waiting). The last column is
-- the tick of a schedule's tick (not of a backfill: NULL), which flow_skip_unkeyed records
-- skipped if the declaring code cannot key it either.
SELECT id, task, args, kwargs, schedule, CASE WHEN schedule IS NOT NULL AND NOT backfill THEN tick END
FROM rota_runs
WHERE limit_name = %(unresolved)s AND status = 'pending' AND NOT held
  AND task = ANY(%(tasks)s::text[])
ORDER BY limit_name, limit_key, priority DESC, due_at, id
LIMIT %(n)s

-- name: flow_resolve
-- transition: keyed
-- An unresolved run's keys, from its declaring worker (its status does not change).
UPDATE rota_runs
SET limit_name = %(limit_name)s, limit_key = %(limit_key)s, rate_name = %(rate_name)s, rate_key = %(rate_key)s
WHERE id = %(id)s AND status = 'pending' AND limit_name = %(unresolved)s

-- name: flow_skip_unkeyed
-- transition: skip_unkeyed
-- An unresolved schedule's tick whose keys its declaring worker cannot compute either (a by=
-- raising on the stored arguments): recorded skipped with the error, as the tick pass inserts
-- one (rota_run_finished counts it in the schedule's skip_count, as rota_run_skipped counts
-- the inserted one; an exclusive schedule's slot is handed on).
UPDATE rota_runs
SET status = 'skipped', error = %(error)s, finished_at = {now},
    limit_name = NULL, limit_key = NULL, rate_name = NULL, rate_key = NULL
WHERE id = %(id)s AND status = 'pending' AND limit_name = %(unresolved)s
RETURNING id

-- name: flow_set_gates
-- transition: retry
-- A retry's limit and rate (retry_insert copies neither: they come from the declaration).
UPDATE rota_runs
SET limit_name = %(limit_name)s, limit_key = %(limit_key)s, rate_name = %(rate_name)s, rate_key = %(rate_key)s
WHERE id = %(id)s AND status = 'pending'

-- name: flow_specs_table
-- whether migration 0011 ran (a store asks once; older schemas have no stored specs)
SELECT to_regclass('rota_task_flow') IS NOT NULL

-- name: flow_unresolved_count
-- runs waiting for a worker that declares their task to compute their keys (rota limits)
SELECT count(*) FROM rota_runs
WHERE limit_name = %(unresolved)s AND status = 'pending' AND NOT held

-- name: set_traceparent
-- transition: enqueue
-- (part of the enqueue, in its transaction: the trace context the run was enqueued in, rota.tracing)
UPDATE rota_runs SET traceparent = %(traceparent)s WHERE id = %(id)s

-- name: run_traceparent
-- The trace context stored at enqueue (a running run is in rota_runs: schema 17 moves only
-- finished ones).
SELECT traceparent FROM rota_runs WHERE id = %(id)s

-- ==== paused queues and declared tasks (migration 0021, issue 44) ==========================

-- name: queue_pause
-- A queue paused fleet-wide: every claim skips its runs, through `coalesce(queue <> ALL
-- (ARRAY(SELECT queue FROM rota_queue_pauses)), true)` in claim, poll_state, plain_due and
-- flow_*: the table is read once per statement (an InitPlan), and the test is a filter on the
-- rows the claim index gives in order. Plain, `queue <> ALL (...)` (or a NOT EXISTS) took its
-- selectivity from the queue column's statistics: with one queue in use it read as "no row
-- passes", and the claim became a sequential scan and a sort (tests/test_operate.py); the
-- coalesce hides the comparison from the statistics (a default half).
INSERT INTO rota_queue_pauses (queue, paused_at, paused_by) VALUES (%(queue)s, {now}, %(by)s)
ON CONFLICT (queue) DO NOTHING

-- name: queue_resume
DELETE FROM rota_queue_pauses WHERE queue = %(queue)s

-- name: queue_pauses
SELECT queue, paused_at, paused_by FROM rota_queue_pauses ORDER BY queue

-- name: queue_counts
-- the active runs of each queue (through rota_runs_active: the few active runs)
SELECT queue, sum(CASE WHEN status = 'pending' THEN 1 ELSE 0 END),
       sum(CASE WHEN status = 'running' THEN 1 ELSE 0 END)
FROM rota_runs WHERE status IN ('pending', 'running') GROUP BY queue

-- name: tasks_declare
INSERT INTO rota_tasks (task, declared_at) VALUES (%(task)s, {now})
ON CONFLICT (task) DO UPDATE SET declared_at = excluded.declared_at

-- name: tasks_declared
SELECT task FROM rota_tasks ORDER BY task

-- name: schedule_set_notify_on
-- a stored schedule's notify_on words (JSON), or NULL
UPDATE rota_schedules SET notify_on = %(notify_on)s WHERE name = %(name)s

-- name: schedules_notify_on
SELECT name, notify_on FROM rota_schedules WHERE active AND notify_on IS NOT NULL

-- ==========================================================================================
-- durable steps (issue 43): checkpoints, parked runs, signals, progress (rota/stores/_durable.py)
-- ==========================================================================================

-- name: steps_of
-- A run's checkpoints, in the order they were first made.
SELECT name, seq, attempt, started_at, finished_at, outcome, result, error
FROM rota_steps WHERE run_id = %(id)s ORDER BY seq, name

-- name: save_step
-- One step's checkpoint, only while (id, token) holds the run (status running): a worker whose
-- lease was taken over saves nothing and gets no row back. A succeeded step is never
-- overwritten; a failed one is replaced by its next try.
INSERT INTO rota_steps (run_id, name, seq, attempt, started_at, finished_at, outcome, result, error)
SELECT r.id, %(name)s, %(seq)s, r.attempt, {now} - make_interval(secs => %(took)s::float8), {now},
       %(outcome)s, %(result)s, %(error)s
FROM rota_runs r WHERE r.id = %(id)s AND r.token = %(token)s AND r.status = 'running'
ON CONFLICT (run_id, name) DO UPDATE
SET seq = EXCLUDED.seq, attempt = EXCLUDED.attempt, started_at = EXCLUDED.started_at,
    finished_at = EXCLUDED.finished_at, outcome = EXCLUDED.outcome, result = EXCLUDED.result,
    error = EXCLUDED.error
WHERE rota_steps.outcome <> 'succeeded'
RETURNING run_id

-- name: step_clock
-- The database's time (a sleep's wake time and a wait's deadline are taken from it), and
-- whether (id, token) still holds the run.
SELECT {now}, EXISTS (SELECT 1 FROM rota_runs WHERE id = %(id)s AND token = %(token)s AND status = 'running')

-- name: park
-- transition: park
-- ctx.sleep / ctx.wait_for: the run leaves its worker and slot, pending and due when its wait
-- ends (%(wake_in)s seconds from now); its attempt given back (a park is not an attempt's
-- end), its start cleared; a run whose cancellation was requested ends cancelled. Its wait is
-- recorded next (park_wait: Run.waiting, the CLI, the dashboard). The NOTIFY wakes workers
-- waiting for a freed limit slot (delivered at the commit).
WITH told AS (
    SELECT pg_notify('rota' || CASE
                   WHEN current_schema() = 'public' THEN ''
                   WHEN octet_length(current_schema()) <= 58 THEN ':' || current_schema()
                   ELSE ':' || md5(current_schema()) END, 'run')
)
UPDATE rota_runs r
SET status = CASE WHEN r.cancel_requested THEN 'cancelled' ELSE 'pending' END,
    attempt = CASE WHEN r.started_at IS NULL OR r.attempt = 0 THEN r.attempt ELSE r.attempt - 1 END,
    started_at = NULL, lease_until = NULL,
    due_at = {now} + make_interval(secs => greatest(%(wake_in)s::float8, 0)),
    finished_at = CASE WHEN r.cancel_requested THEN {now} END,
    error = CASE WHEN r.cancel_requested
                 THEN jsonb_build_object('type', 'Cancelled', 'message', 'cancelled on request', 'traceback', NULL)::text
                 ELSE r.error END
WHERE r.id = %(id)s AND r.token = %(token)s AND r.status = 'running'
  AND (SELECT count(*) FROM told) >= 0
RETURNING r.status, r.due_at

-- name: park_wait
INSERT INTO rota_waits (run_id, token, kind, name, until, since) VALUES (%(id)s, %(token)s, %(kind)s, %(name)s, %(until)s, {now})
ON CONFLICT (run_id) DO UPDATE SET token = EXCLUDED.token, kind = EXCLUDED.kind, name = EXCLUDED.name, until = EXCLUDED.until,
                                   since = EXCLUDED.since

-- name: park_signalled
-- transition: park
-- In the park's transaction, after it (a new snapshot): a run that parked to wait for a signal
-- already sent (before the wait began, or while the park was being written) is due now.
UPDATE rota_runs r SET due_at = {now}
FROM rota_waits w
WHERE r.id = %(id)s AND w.run_id = r.id AND w.token = r.token AND w.kind = 'signal'
  AND r.status = 'pending' AND r.due_at > {now}
  AND EXISTS (SELECT 1 FROM rota_signals s WHERE s.run_id = r.id AND s.name = w.name)
RETURNING r.id

-- name: unpark
-- The handler passed the wait it parked on: its wait is over (fenced by its token).
DELETE FROM rota_waits w
WHERE w.run_id = %(id)s
  AND EXISTS (SELECT 1 FROM rota_runs r WHERE r.id = %(id)s AND r.token = %(token)s AND r.status = 'running')

-- name: signal_lock
-- App.signal, first: the run's row locked (a park in progress commits first, and the wake
-- below then sees its wait; a park that comes after waits for this transaction and then sees
-- the signal: park_signalled).
SELECT status FROM rota_runs WHERE id = %(id)s FOR UPDATE

-- name: signal_store
-- App.signal: kept if the run is pending or running (sent before its wait begins, or during
-- it); the first signal of a name is kept. No row back: already sent, or the run is final or
-- unknown (signal_status tells which).
INSERT INTO rota_signals (run_id, name, payload, sent_at)
SELECT r.id, %(name)s, %(payload)s, {now} FROM rota_runs r
WHERE r.id = %(id)s AND r.status IN ('pending', 'running')
ON CONFLICT (run_id, name) DO NOTHING
RETURNING run_id

-- name: signal_wake
-- transition: signal
-- A run parked waiting for this signal is due now (the next claim takes it).
UPDATE rota_runs r SET due_at = {now}
WHERE r.id = %(id)s AND r.status = 'pending' AND r.due_at > {now}
  AND EXISTS (SELECT 1 FROM rota_waits w WHERE w.run_id = r.id AND w.token = r.token AND w.kind = 'signal'
              AND w.name = %(name)s)
RETURNING r.id

-- name: signal_status
SELECT r.status, EXISTS (SELECT 1 FROM rota_signals s WHERE s.run_id = %(id)s AND s.name = %(name)s)
FROM rota_runs_all r WHERE r.id = %(id)s

-- name: signal_of
SELECT payload, sent_at FROM rota_signals WHERE run_id = %(id)s AND name = %(name)s

-- name: signals_of
SELECT name, payload, sent_at FROM rota_signals WHERE run_id = %(id)s ORDER BY sent_at, name

-- name: wait_of
SELECT w.kind, w.name, w.until, w.since FROM rota_waits w JOIN rota_runs r ON r.id = w.run_id AND r.token = w.token
WHERE w.run_id = %(id)s AND r.status = 'pending'

-- name: progress_save
-- ctx.progress, with the heartbeat: written only while the token holds the run.
INSERT INTO rota_progress (run_id, fraction, message, updated_at)
SELECT r.id, %(fraction)s, %(message)s, {now} FROM rota_runs r
WHERE r.id = %(id)s AND r.token = %(token)s AND r.status = 'running'
ON CONFLICT (run_id) DO UPDATE SET fraction = EXCLUDED.fraction, message = EXCLUDED.message,
                                   updated_at = EXCLUDED.updated_at
RETURNING run_id

-- name: progress_of
SELECT fraction, message, updated_at FROM rota_progress WHERE run_id = %(id)s

-- name: durable_forget
-- The steps, waits, signals and progress of runs retention deleted (:ids a JSON array).
DELETE FROM rota_steps WHERE run_id IN (SELECT value::bigint FROM json_array_elements_text(%(ids)s::json))

-- name: durable_forget_waits
DELETE FROM rota_waits WHERE run_id IN (SELECT value::bigint FROM json_array_elements_text(%(ids)s::json))

-- name: durable_forget_signals
DELETE FROM rota_signals WHERE run_id IN (SELECT value::bigint FROM json_array_elements_text(%(ids)s::json))

-- name: durable_forget_progress
DELETE FROM rota_progress WHERE run_id IN (SELECT value::bigint FROM json_array_elements_text(%(ids)s::json))
