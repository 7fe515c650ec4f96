-- PostgreSQL queries: runs given back: hand_back, fence, refuse, disown, and the rescue of expired leases.
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

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
    {{lock_schedules(SELECT schedule FROM ending WHERE schedule IS NOT NULL)}}
),
deps AS (
    {{lock_dependents(ARRAY(SELECT id FROM ending))}}
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
    {{unlog_rate_starts}}
),
ending AS (
    SELECT id, schedule FROM rota_runs
    WHERE id = ANY(ARRAY(SELECT id FROM v)) AND status = 'running'
      AND (cancel_requested OR refused_at < {now} - make_interval(secs => %(grace)s))
),
locked AS (
    {{lock_schedules(SELECT schedule FROM ending WHERE schedule IS NOT NULL)}}
),
deps AS (
    {{lock_dependents(ARRAY(SELECT id FROM ending))}}
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
    {{unlog_rate_starts}}
),
ending AS (
    SELECT id, schedule FROM rota_runs
    WHERE id = ANY(ARRAY(SELECT id FROM v)) AND status = 'running' AND cancel_requested
),
locked AS (
    {{lock_schedules(SELECT schedule FROM ending WHERE schedule IS NOT NULL)}}
),
deps AS (
    {{lock_dependents(ARRAY(SELECT id FROM ending))}}
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
-- A lease run out, or one no worker can have granted (see lease_damaged): the running runs only
-- (rota_runs_active).
SELECT 1 FROM rota_runs
WHERE status = 'running'
  AND (lease_until < {now} OR lease_until IS NULL OR lease_until > {now} + interval '366 days')
LIMIT 1

-- name: lease_damaged
-- transition: lease_damaged
-- Running runs whose lease no worker can have granted: none (NULL), infinite, or more than
-- 366 days past now (a lease is at most a year, rota/config.py MAX_SECONDS). The rescue never
-- takes them (their lease never runs out): they are damaged (rota/quarantine.py), ended failed
-- with a DamagedRow error, never retried, which frees their schedule, limit and key. Locked
-- as the rescue locks (the runs, their schedules, their dependents).
WITH bad AS (
    SELECT id FROM rota_runs
    WHERE status = 'running' AND (lease_until IS NULL OR lease_until > {now} + interval '366 days')
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
locked AS (
    {{lock_schedules(SELECT r.schedule FROM rota_runs r JOIN bad ON bad.id = r.id)}}
),
deps AS (
    {{lock_dependents(ARRAY(SELECT id FROM bad))}}
)
UPDATE rota_runs r
SET status = 'failed', finished_at = {now}, lease_until = NULL,
    -- (compact, as rota writes it: `rota runs --damaged` looks for '{"type":"DamagedRow",')
    error = '{"type":"DamagedRow","message":' || to_json(
        'damaged row: a running run whose lease '
            || CASE WHEN r.lease_until IS NULL THEN 'is NULL (none)'
                    ELSE 'ends at ' || coalesce(to_char(r.lease_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                                                r.lease_until::text)
                         || ', more than 366 days past now' END
            || ' (no worker grants a lease longer than a year): no rescue would ever take it'
            || '; not retried (repair the row and `rota retry` it, or delete it)')::text || ',"traceback":null}'
FROM bad
WHERE r.id = bad.id AND r.status = 'running' AND (SELECT count(*) FROM locked) + (SELECT count(*) FROM deps) >= 0
RETURNING r.id, r.task, r.status, r.owner, r.error

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
    {{lock_schedules(SELECT r.schedule FROM rota_runs r JOIN lost ON lost.id = r.id)}}
),
deps AS (
    -- as in finish_succeeded: the lost runs' waiting dependents locked in id order next (a
    -- failed or cancelled parent cancels them, through the rota_run_settled trigger)
    {{lock_dependents(ARRAY(SELECT id FROM lost))}}
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
               AS stopped,
           r.error LIKE '%%"at_once": true%%' AS at_once  -- fenced after a second stop signal
    FROM rota_runs r JOIN lost ON lost.id = r.id
),
decided AS (
    SELECT d.*,
           CASE WHEN d.stopped THEN jsonb_build_object(
               'type', 'WorkerStopped',
               'message', 'worker ' || coalesce(d.owner, '?') || ' stopped while the handler still ran ('
                          || CASE WHEN d.at_once THEN 'it was stopped at once by a second signal'
                                  ELSE 'it outlived the shutdown timeout' END
                          || '): its process was ended before the lease expired at '
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
