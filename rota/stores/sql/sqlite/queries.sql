-- Named queries of the SQLite store. Every backend defines the same names (a test checks).
-- `{now}` is the store's clock (Unix epoch seconds), always passed by the store.
-- Lists travel as one JSON array parameter, read with json_each (never SQL built from values).

-- name: insert_run
-- transition: enqueue, make_ahead, tick, trigger, retry
INSERT INTO rota_runs (id, task, queue, priority, status, args, kwargs, key, schedule, tick,
                       exclusive, held, scheduled_for, due_at, max_attempts, timeout, backoff,
                       error, finished_at, retry_of, created_at)
VALUES (:id, :task, :queue, :priority, :status, :args, :kwargs, :key, :schedule, :tick,
        :exclusive, :held, coalesce(:scheduled_for, {now} + :delay),
        coalesce(:due_at, :scheduled_for, {now} + :delay),
        :max_attempts, :timeout, :backoff, :error,
        CASE WHEN :status = 'skipped' THEN {now} END, :retry_of, {now})
ON CONFLICT DO NOTHING
RETURNING id

-- name: insert_run_gated
-- transition: enqueue
-- as insert_run, for a run with a limit or a rate (rota.Limit, rota.Rate)
INSERT INTO rota_runs (id, task, queue, priority, status, args, kwargs, key, schedule, tick,
                       exclusive, held, scheduled_for, due_at, max_attempts, timeout, backoff,
                       error, finished_at, retry_of, created_at, limit_name, limit_key, rate_name, rate_key)
VALUES (:id, :task, :queue, :priority, :status, :args, :kwargs, :key, :schedule, :tick,
        :exclusive, :held, coalesce(:scheduled_for, {now} + :delay),
        coalesce(:due_at, :scheduled_for, {now} + :delay),
        :max_attempts, :timeout, :backoff, :error,
        CASE WHEN :status = 'skipped' THEN {now} END, :retry_of, {now},
        :limit_name, :limit_key, :rate_name, :rate_key)
ON CONFLICT DO NOTHING
RETURNING id

-- name: insert_runs_bulk
-- transition: enqueue
INSERT INTO rota_runs (id, task, queue, priority, args, kwargs, scheduled_for, due_at,
                       max_attempts, timeout, backoff, created_at)
VALUES (:id, :task, :queue, :priority, :args, :kwargs, coalesce(:scheduled_for, {now} + :delay),
        coalesce(:scheduled_for, {now} + :delay), :max_attempts, :timeout, :backoff, {now})

-- name: insert_runs_bulk_gated
-- transition: enqueue
-- as insert_runs_bulk, for a batch where some runs have a limit or a rate
INSERT INTO rota_runs (id, task, queue, priority, args, kwargs, scheduled_for, due_at,
                       max_attempts, timeout, backoff, created_at, limit_name, limit_key, rate_name, rate_key)
VALUES (:id, :task, :queue, :priority, :args, :kwargs, coalesce(:scheduled_for, {now} + :delay),
        coalesce(:scheduled_for, {now} + :delay), :max_attempts, :timeout, :backoff, {now},
        :limit_name, :limit_key, :rate_name, :rate_key)

-- name: next_run_ids
SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'rota_runs'), 0)

-- name: store_identity
-- Which database a caller's connection is on (enqueue in the caller's transaction checks it).
SELECT (SELECT file FROM pragma_database_list WHERE name = 'main'),
       (SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'rota_runs'),
       NULL

-- name: find_keyed
SELECT id FROM rota_runs
WHERE task = :task AND key = :key AND status IN ('pending', 'running')

-- name: notify
SELECT :channel, :payload

-- name: notify_channel
-- (no LISTEN/NOTIFY on SQLite: wake-ups are in-process and the data_version watch)
SELECT 'rota'

-- name: notify_due
SELECT :channel, :at, :delay

-- name: next_token
SELECT value + 1 FROM rota_counters WHERE name = 'token'

-- name: take_token
UPDATE rota_counters SET value = :token WHERE name = 'token'

-- name: claim
-- transition: claim
-- The first :start runs in claim order are started by the claim (the attempt counted,
-- started_at set); the rest are held: claimed, not started (started_at NULL, the attempt not
-- counted until their start). A run whose cancellation was requested is never claimed.
UPDATE rota_runs
SET status = 'running', owner = :owner, token = :token + c.pos - 1,
    -- (a run at the maximum rota counts is not counted: it is claimed, and its worker fails it
    -- as damaged; rota.quarantine. Past 2^63-1 the sum would be a REAL: the whole claim failed.)
    attempt = CASE WHEN c.pos <= :start AND attempt < 2147483647 THEN attempt + 1 ELSE attempt END,
    started_at = CASE WHEN c.pos <= :start THEN {now} END, lease_until = {now} + :lease,
    misfire_at = NULL
-- one fencing token per claimed run (:token + its place in the claim's order), so ctx.token
-- fences one attempt
FROM (SELECT id, row_number() OVER (ORDER BY priority DESC, due_at, id) AS pos FROM (
    SELECT id, priority, due_at FROM rota_runs INDEXED BY rota_runs_claim
    WHERE status = 'pending' AND NOT held AND due_at <= {now}
      AND (misfire_at IS NULL OR misfire_at >= {now})
      AND NOT cancel_requested
      AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)  -- paused queues (0018)
      AND limit_name IS NULL AND rate_name IS NULL  -- limited and rated runs: flow_*
    ORDER BY priority DESC, due_at, id
    LIMIT :limit)) AS c
WHERE rota_runs.id = c.id
RETURNING rota_runs.id, task, args, kwargs, attempt, max_attempts, token, timeout, backoff, schedule,
          scheduled_for, started_at, lease_until, priority, due_at

-- name: claim_in_queues
-- transition: claim
-- as claim, for some queues only
UPDATE rota_runs
SET status = 'running', owner = :owner, token = :token + c.pos - 1,
    -- (a run at the maximum rota counts is not counted: it is claimed, and its worker fails it
    -- as damaged; rota.quarantine. Past 2^63-1 the sum would be a REAL: the whole claim failed.)
    attempt = CASE WHEN c.pos <= :start AND attempt < 2147483647 THEN attempt + 1 ELSE attempt END,
    started_at = CASE WHEN c.pos <= :start THEN {now} END, lease_until = {now} + :lease,
    misfire_at = NULL
-- one fencing token per claimed run (:token + its place in the claim's order), so ctx.token
-- fences one attempt
FROM (SELECT id, row_number() OVER (ORDER BY priority DESC, due_at, id) AS pos FROM (
    SELECT id, priority, due_at FROM rota_runs INDEXED BY rota_runs_claim
    WHERE status = 'pending' AND NOT held AND due_at <= {now}
      AND (misfire_at IS NULL OR misfire_at >= {now})
      AND limit_name IS NULL AND rate_name IS NULL  -- limited and rated runs: flow_*
      AND queue IN (SELECT value FROM json_each(:queues))
      AND NOT cancel_requested
      AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)  -- paused queues (0018)
    ORDER BY priority DESC, due_at, id
    LIMIT :limit)) AS c
WHERE rota_runs.id = c.id
RETURNING rota_runs.id, task, args, kwargs, attempt, max_attempts, token, timeout, backoff, schedule,
          scheduled_for, started_at, lease_until, priority, due_at

-- name: claim_ahead
-- transition: claim_ahead
-- The runs due within :ahead seconds, claimed held by an idle worker just before their time
-- (see the PostgreSQL statement): plain runs only, never queued or asked to cancel.
UPDATE rota_runs
SET status = 'running', owner = :owner, token = :token + c.pos - 1, lease_until = {now} + :lease,
    misfire_at = NULL, started_at = NULL
FROM (SELECT id, row_number() OVER (ORDER BY priority DESC, due_at, id) AS pos FROM (
    SELECT id, priority, due_at FROM rota_runs INDEXED BY rota_runs_claim
    WHERE status = 'pending' AND NOT held AND due_at <= {now} + :ahead
      AND (misfire_at IS NULL OR misfire_at >= {now})
      AND NOT cancel_requested
      AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)  -- paused queues (0018)
      AND limit_name IS NULL AND rate_name IS NULL
    ORDER BY priority DESC, due_at, id
    LIMIT :limit)) AS c
WHERE rota_runs.id = c.id
RETURNING rota_runs.id, task, args, kwargs, attempt, max_attempts, token, timeout, backoff, schedule,
          scheduled_for, started_at, lease_until, priority, due_at

-- name: claim_ahead_in_queues
-- transition: claim_ahead
-- as claim_ahead, for some queues only
UPDATE rota_runs
SET status = 'running', owner = :owner, token = :token + c.pos - 1, lease_until = {now} + :lease,
    misfire_at = NULL, started_at = NULL
FROM (SELECT id, row_number() OVER (ORDER BY priority DESC, due_at, id) AS pos FROM (
    SELECT id, priority, due_at FROM rota_runs INDEXED BY rota_runs_claim
    WHERE status = 'pending' AND NOT held AND due_at <= {now} + :ahead
      AND (misfire_at IS NULL OR misfire_at >= {now})
      AND limit_name IS NULL AND rate_name IS NULL
      AND queue IN (SELECT value FROM json_each(:queues))
      AND NOT cancel_requested
      AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)  -- paused queues (0018)
    ORDER BY priority DESC, due_at, id
    LIMIT :limit)) AS c
WHERE rota_runs.id = c.id
RETURNING rota_runs.id, task, args, kwargs, attempt, max_attempts, token, timeout, backoff, schedule,
          scheduled_for, started_at, lease_until, priority, due_at

-- name: start
-- transition: start
-- A held run whose handler started :ago seconds ago: the attempt counted, started_at set.
-- Fenced by the token; refused when its cancellation was requested or it started already.
UPDATE rota_runs SET attempt = attempt + (attempt < 2147483647), started_at = {now} - :ago
WHERE id = :id AND token = :token AND status = 'running' AND started_at IS NULL
  AND NOT cancel_requested
RETURNING id

-- name: heartbeat
-- transition: heartbeat
UPDATE rota_runs SET lease_until = {now} + :lease
WHERE id = :id AND token = :token AND status = 'running'
RETURNING cancel_requested

-- name: finish_succeeded
-- transition: finish
-- The batch's plain successes in one statement (:rows, a JSON array of [id, token, result,
-- started]), not one execution per run: the statement's own work and its triggers' frames are
-- set up once per batch (a third less CPU per run in the no-op drain than executemany).
-- :started (per run): a held run started that many seconds ago whose start was not written.
-- `+rota_runs.status`: the run is found by its key from each row of the batch, never by a walk
-- of rota_runs_status's running entries.
UPDATE rota_runs
SET status = 'succeeded', result = b.result, error = NULL, finished_at = {now}, lease_until = NULL,
    attempt = CASE WHEN b.started IS NOT NULL AND started_at IS NULL THEN attempt + 1 ELSE attempt END,
    started_at = coalesce(started_at, {now} - b.started)
FROM (SELECT value ->> 0 AS id, value ->> 1 AS token, value ->> 2 AS result, value ->> 3 AS started
      FROM json_each(:rows)) AS b
WHERE rota_runs.id = b.id AND rota_runs.token = b.token AND +rota_runs.status = 'running'

-- name: finish
-- transition: finish, retry
-- A retry (:status pending) of a run whose cancellation was requested ends cancelled.
UPDATE rota_runs
SET status = CASE WHEN :status = 'pending' AND cancel_requested THEN 'cancelled' ELSE :status END,
    result = :result, error = :error, lease_until = NULL,
    finished_at = CASE WHEN :status = 'pending' AND NOT cancel_requested THEN NULL ELSE {now} END,
    attempt = CASE WHEN :started IS NOT NULL AND started_at IS NULL THEN attempt + 1 ELSE attempt END,
    started_at = coalesce(started_at, {now} - :started),
    due_at = CASE WHEN :status = 'pending' THEN {now} + :retry_in ELSE due_at END,
    -- (a history that is not JSON, written by hand, is left as found: json_insert would fail
    -- the statement, and with it the batch; rota.quarantine)
    attempts = CASE WHEN :history IS NULL OR NOT json_valid(attempts) THEN attempts
                    ELSE json_insert(attempts, '$[#]', json(:history)) END,
    refused_at = NULL  -- a handler ran: a later refusal (a retry on an old worker) counts anew
WHERE id = :id AND token = :token AND status = 'running'

-- name: lock_finished_schedules
-- (SQLite: a write transaction holds the whole file; no lock order to keep)
SELECT :ids

-- name: finish_holding
-- The outcomes' runs still running, with their tokens: read first in the finish's transaction
-- (BEGIN IMMEDIATE: no other writer changes them before the finish statements run), so the
-- finish writes exactly the outcomes whose token still holds and knows which they were.
SELECT id, token FROM rota_runs WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'running'

-- name: finished_parents
-- Whether a finish just written ended a run that others wait for (after=): the trigger has
-- released or cancelled its dependents in that transaction, so this process's workers are woken
-- to claim at once (other processes see the write through data_version).
SELECT 1 FROM rota_runs WHERE id IN (SELECT value FROM json_each(:ids)) AND has_dependents LIMIT 1

-- name: handler_outcome
-- A transactional handler's commit whose reply was lost, read back: the run's status and
-- token.
SELECT status, token FROM rota_runs WHERE id = :id

-- name: finish_transactional
-- transition: finish
-- a transactional handler's success, in the handler's own transaction (rota.transactional)
UPDATE rota_runs
SET status = 'succeeded', result = :result, error = NULL, finished_at = {now}, lease_until = NULL,
    -- a held run started by its worker whose start was not written yet: the commit records it
    attempt = CASE WHEN started_at IS NULL THEN attempt + 1 ELSE attempt END,
    started_at = coalesce(started_at, {now})
WHERE id = :id AND token = :token AND status = 'running'
RETURNING id

-- name: hand_back
-- transition: hand_back
-- Pending again at once for another worker (a held run claimed ahead: at its due time); a
-- held run (never started) as it was, a started
-- one with its attempt given back and recorded in history as handed back. A run whose
-- cancellation was requested is not run again: it ends cancelled.
UPDATE rota_runs
SET status = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'pending' END,
    attempt = CASE WHEN started_at IS NULL OR cancel_requested THEN attempt ELSE attempt - 1 END,
    -- a held run claimed ahead of its due time keeps that time (never run early elsewhere)
    due_at = CASE WHEN started_at IS NULL THEN max(due_at, {now}) ELSE {now} END, lease_until = NULL,
    refused_at = CASE WHEN started_at IS NULL THEN refused_at END,  -- started: a refusal counts anew
    finished_at = CASE WHEN cancel_requested THEN {now} END,
    started_at = CASE WHEN cancel_requested THEN started_at END,
    error = CASE WHEN cancel_requested
                 THEN json_object('type', 'Cancelled', 'message', 'cancelled on request (' || :reason || ')',
                                  'traceback', NULL)
                 ELSE error END,
    attempts = CASE WHEN started_at IS NULL OR cancel_requested OR NOT json_valid(attempts) THEN attempts
                    ELSE json_insert(attempts, '$[#]', json_object(  -- (not JSON: left as found, see finish)
        'attempt', attempt, 'worker', owner,
        'started_at', strftime('%Y-%m-%dT%H:%M:%fZ', started_at, 'unixepoch'),
        'finished_at', strftime('%Y-%m-%dT%H:%M:%fZ', {now}, 'unixepoch'),
        'status', 'handed back',
        'error', json_object('type', 'HandedBack', 'message', :reason))) END
WHERE id = :id AND token = :token AND status = 'running'
RETURNING id, status

-- name: fence
-- transition: fence
-- A stopping worker's last write for a run whose handler still runs (see the PostgreSQL
-- file): its lease shortened to :lease seconds, and the note the rescue reads.
UPDATE rota_runs SET lease_until = {now} + :lease, error = :error
WHERE id = :id AND token = :token AND status = 'running'
RETURNING id

-- name: refuse_unlog
-- Before refuse, in its transaction: a refused rated run never started its handler, so its
-- start leaves its window's log (one row: its key's and its start time's; runs claimed
-- together share it, one row each; the log has no run id). A refusal uses no room of its rate.
DELETE FROM rota_rate_starts WHERE rowid = (
    SELECT l.rowid FROM rota_runs r JOIN rota_rate_starts l INDEXED BY rota_rate_starts_window
        ON l.name = r.rate_name AND l.key = r.rate_key AND l.started_at = r.started_at
    WHERE r.id = :id AND r.token = :token AND r.status = 'running' AND r.rate_name IS NOT NULL
    LIMIT 1)

-- name: refuse
-- transition: refuse
-- A run of a task its worker does not register, given back for a worker that does (see the
-- PostgreSQL file): pending, no attempt counted, its start cleared, the refusal as its error,
-- due again after half the time since its first refusal (:delay_min to :delay_max s, never
-- before its own due time); refused for longer than :grace s: failed; cancellation
-- requested: cancelled.
UPDATE rota_runs
SET status = CASE WHEN cancel_requested THEN 'cancelled'
                  WHEN refused_at < {now} - :grace THEN 'failed'
                  ELSE 'pending' END,
    attempt = CASE WHEN started_at IS NULL THEN attempt ELSE attempt - 1 END,
    started_at = NULL, lease_until = NULL,
    refused_at = coalesce(refused_at, {now}),
    due_at = max(due_at, {now} + min(:delay_max, max(:delay_min, ({now} - coalesce(refused_at, {now})) / 2))),
    finished_at = CASE WHEN cancel_requested OR refused_at < {now} - :grace THEN {now} END,
    error = CASE WHEN cancel_requested
                 THEN json_object('type', 'Cancelled', 'message', 'cancelled on request', 'traceback', NULL)
                 ELSE :error END
WHERE id = :id AND token = :token AND status = 'running'
RETURNING id, status

-- name: disown_unlog
-- Before disown, in its transaction: one logged start per rated run that a claim whose reply
-- was lost started (see refuse_unlog: no handler ran, so it uses no room of its rate).
WITH v AS (
    SELECT rate_name, rate_key, started_at, count(*) AS n FROM rota_runs
    WHERE status = 'running' AND owner = :owner AND lease_until > {now}
      AND token NOT IN (SELECT value FROM json_each(:tokens))
      AND rate_name IS NOT NULL AND started_at IS NOT NULL
    GROUP BY rate_name, rate_key, started_at
),
l AS (
    SELECT s.rowid AS rid, v.n,
           row_number() OVER (PARTITION BY s.name, s.key, s.started_at ORDER BY s.rowid) AS k
    FROM v JOIN rota_rate_starts s INDEXED BY rota_rate_starts_window
        ON s.name = v.rate_name AND s.key = v.rate_key AND s.started_at = v.started_at
)
DELETE FROM rota_rate_starts WHERE rowid IN (SELECT rid FROM l WHERE k <= n)

-- name: disown
-- transition: disown
-- A claim whose reply this worker never got (see the PostgreSQL file): the runs it owns with
-- a token it does not hold, whose lease still runs, given back as they were before that
-- claim (a started one's attempt given back, its start cleared; due time and history kept);
-- cancellation requested: cancelled.
UPDATE rota_runs
SET status = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'pending' END,
    attempt = CASE WHEN started_at IS NULL OR attempt <= 0 THEN attempt ELSE attempt - 1 END,
    started_at = NULL, lease_until = NULL,
    finished_at = CASE WHEN cancel_requested THEN {now} END,
    error = CASE WHEN cancel_requested
                 THEN json_object('type', 'Cancelled', 'message', 'cancelled on request', 'traceback', NULL)
                 ELSE error END
WHERE status = 'running' AND owner = :owner AND lease_until > {now}
  AND token NOT IN (SELECT value FROM json_each(:tokens))
RETURNING id, status

-- name: any_expired
SELECT 1 FROM rota_runs INDEXED BY rota_runs_lease
WHERE status = 'running' AND lease_until < {now}
LIMIT 1

-- name: rescue
-- transition: rescue
-- A held run (started_at NULL: no start recorded) is pending again with no attempt counted;
-- if it was due before its lease ran out, its history says the worker was lost while
-- holding it ("held", with the claim's token: its handler may have started in the moments
-- before its start would have been written, rota/lifecycle.py). A started one is retried if
-- attempts remain, else failed. Either ends cancelled if its cancellation was requested.
UPDATE rota_runs
SET status = CASE WHEN cancel_requested THEN 'cancelled'
                  WHEN started_at IS NULL OR attempt < max_attempts THEN 'pending' ELSE 'failed' END,
    due_at = CASE WHEN started_at IS NULL THEN max(due_at, {now}) ELSE {now} END, lease_until = NULL,
    refused_at = CASE WHEN started_at IS NULL THEN refused_at END,  -- started: a refusal counts anew
    finished_at = CASE WHEN NOT cancel_requested AND (started_at IS NULL OR attempt < max_attempts) THEN NULL
                       ELSE {now} END,
    error = lost.err,
    attempts = CASE WHEN NOT json_valid(attempts)
        THEN attempts  -- damaged (not JSON): kept as it is, so the rest of the batch goes on
        WHEN started_at IS NULL AND due_at > lease_until
        THEN attempts  -- held, due only after its lease ran out: no start possible
        WHEN started_at IS NULL
        THEN json_insert(attempts, '$[#]', json_object(
            'attempt', attempt + 1, 'worker', owner, 'token', token, 'started_at', NULL, 'held', json('true'),
            'finished_at', strftime('%Y-%m-%dT%H:%M:%fZ', {now}, 'unixepoch'),
            'status', 'lost', 'error', json(lost.err)))
        WHEN NOT cancel_requested AND attempt < max_attempts
        THEN json_insert(attempts, '$[#]', json_object(
            'attempt', attempt, 'worker', owner,
            'started_at', strftime('%Y-%m-%dT%H:%M:%fZ', started_at, 'unixepoch'),
            'finished_at', strftime('%Y-%m-%dT%H:%M:%fZ', {now}, 'unixepoch'),
            'status', 'lost', 'error', json(lost.err)))
        ELSE attempts END
FROM (SELECT id AS lost_id, CASE
          -- fenced by a stopping worker (see fence): it says so
          WHEN started_at IS NOT NULL AND error LIKE '{"type": "WorkerStopped", "token": ' || token || ',%'
          THEN json_object(
          'type', 'WorkerStopped',
          'message', 'worker ' || coalesce(owner, '?') || ' stopped while the handler still ran (it outlived '
                     || 'the shutdown timeout): its process was ended before the lease expired at '
                     || strftime('%Y-%m-%dT%H:%M:%fZ', lease_until, 'unixepoch')
                     || ' (attempt ' || attempt || ' of ' || max_attempts || ')',
          'traceback', NULL)
          ELSE json_object(
          'type', 'WorkerLost',
          'message', 'worker ' || coalesce(owner, '?') || ' was lost: its lease expired at '
                     || strftime('%Y-%m-%dT%H:%M:%fZ', lease_until, 'unixepoch')
                     || CASE WHEN started_at IS NULL
                             THEN ' while it held the run, before its start was recorded (no attempt counted)'
                             ELSE ' (attempt ' || attempt || ' of ' || max_attempts || ')' END,
          'traceback', NULL) END AS err
      FROM rota_runs INDEXED BY rota_runs_lease
      WHERE status = 'running' AND lease_until < {now}
      ORDER BY lease_until LIMIT :limit) AS lost
WHERE rota_runs.id = lost.lost_id
RETURNING id, task, status, owner, error

-- name: poll_state
SELECT {now},
       (SELECT min(due_at) FROM rota_runs INDEXED BY rota_runs_due
        WHERE status = 'pending' AND NOT held AND (misfire_at IS NULL OR misfire_at >= {now})
          AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)),
       (SELECT min(t) FROM (
            SELECT min(next_run_at) AS t FROM rota_schedules WHERE active AND NOT paused
            UNION ALL
            SELECT min(misfire_at) FROM rota_runs INDEXED BY rota_runs_misfire
            WHERE status = 'pending' AND misfire_at IS NOT NULL AND misfire_at < {now}))

-- name: poll_state_in_queues
SELECT {now},
       (SELECT min(due_at) FROM rota_runs INDEXED BY rota_runs_due
        WHERE status = 'pending' AND NOT held AND (misfire_at IS NULL OR misfire_at >= {now})
          AND queue IN (SELECT value FROM json_each(:queues))
          AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)),
       (SELECT min(t) FROM (
            SELECT min(next_run_at) AS t FROM rota_schedules WHERE active AND NOT paused
            UNION ALL
            SELECT min(misfire_at) FROM rota_runs INDEXED BY rota_runs_misfire
            WHERE status = 'pending' AND misfire_at IS NOT NULL AND misfire_at < {now}))

-- name: now
SELECT {now}

-- name: upsert_code_schedule
INSERT INTO rota_schedules AS s (
    name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, run_immediately,
    queue, priority, max_attempts, timeout, backoff, jitter, source, app, definition, next_run_at,
    created_at, updated_at)
VALUES (:name, :task, :cron, :every, :tz, :args, :kwargs, :overlap, :misfire, :misfire_grace,
        :run_immediately, :queue, :priority, :max_attempts, :timeout, :backoff, :jitter, :source, :app,
        :definition, :next_run_at, {now}, {now})
ON CONFLICT (name) DO UPDATE SET
    task = excluded.task, cron = excluded.cron, every = excluded.every, tz = excluded.tz,
    args = excluded.args, kwargs = excluded.kwargs, overlap = excluded.overlap,
    misfire = excluded.misfire, misfire_grace = excluded.misfire_grace,
    run_immediately = excluded.run_immediately, queue = excluded.queue,
    priority = excluded.priority, max_attempts = excluded.max_attempts,
    timeout = excluded.timeout, backoff = excluded.backoff, jitter = excluded.jitter, source = excluded.source,
    app = excluded.app, definition = excluded.definition, active = 1, updated_at = {now},
    -- A deploy keeps next_run_at unless the timing changed (a missed tick stays due and
    -- meets the misfire policy); a timing change moves it to the new first tick, unless the
    -- old next_run_at was already missed: then that tick stays due (the misfire policy
    -- applies to it and to the new timing's ticks up to now).
    next_run_at = CASE WHEN s.run_count = 0 AND s.last_run_at IS NULL AND excluded.run_immediately
                       THEN coalesce(min(s.next_run_at, excluded.next_run_at), excluded.next_run_at)
                       WHEN NOT s.active OR s.next_run_at IS NULL THEN :first_tick
                       WHEN s.cron IS excluded.cron AND s.every IS excluded.every AND s.tz = excluded.tz
                       THEN s.next_run_at
                       WHEN s.next_run_at < {now} THEN s.next_run_at
                       ELSE :first_tick END
WHERE s.definition IS NOT excluded.definition OR NOT s.active

-- name: forget_damaged_schedule
-- A code schedule stored damaged (a field that cannot be planned: rota.timing.stored): its
-- definition is forgotten, so the upsert that follows rewrites it whole from the code, at a
-- new first tick (a next_run_at clears its plan error).
UPDATE rota_schedules SET definition = '', next_run_at = NULL
WHERE name = :name AND source = 'code'

-- name: deactivate_code_schedules
UPDATE rota_schedules SET active = 0, updated_at = {now}
WHERE source = 'code' AND app = :app AND active
  AND name NOT IN (SELECT value FROM json_each(:names))
RETURNING name

-- name: insert_schedule
INSERT INTO rota_schedules AS s (
    name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, run_immediately,
    queue, priority, max_attempts, timeout, backoff, jitter, source, app, definition, next_run_at,
    created_at, updated_at)
VALUES (:name, :task, :cron, :every, :tz, :args, :kwargs, :overlap, :misfire, :misfire_grace,
        :run_immediately, :queue, :priority, :max_attempts, :timeout, :backoff, :jitter, :source, :app,
        :definition, :next_run_at, {now}, {now})
ON CONFLICT (name) DO UPDATE SET
    task = excluded.task, cron = excluded.cron, every = excluded.every, tz = excluded.tz,
    args = excluded.args, kwargs = excluded.kwargs, overlap = excluded.overlap,
    misfire = excluded.misfire, misfire_grace = excluded.misfire_grace,
    run_immediately = excluded.run_immediately, queue = excluded.queue,
    priority = excluded.priority, max_attempts = excluded.max_attempts,
    timeout = excluded.timeout, backoff = excluded.backoff, jitter = excluded.jitter, source = excluded.source,
    app = excluded.app, definition = excluded.definition, active = 1, paused = 0,
    next_run_at = excluded.next_run_at, updated_at = {now}
WHERE NOT s.active
RETURNING name

-- name: update_schedule
UPDATE rota_schedules SET
    task = :task, cron = :cron, every = :every, tz = :tz, args = :args, kwargs = :kwargs,
    overlap = :overlap, misfire = :misfire, misfire_grace = :misfire_grace,
    run_immediately = :run_immediately, queue = :queue, priority = :priority,
    max_attempts = :max_attempts, timeout = :timeout, backoff = :backoff, jitter = :jitter,
    definition = :definition, next_run_at = coalesce(:next_run_at, next_run_at),
    updated_at = {now}
WHERE name = :name AND active
RETURNING name

-- name: deactivate_schedule
UPDATE rota_schedules SET active = 0, updated_at = {now}
WHERE name = :name AND active
RETURNING name

-- name: cancel_schedule_pending
-- transition: withdraw
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = :error
WHERE schedule = :name AND status = 'pending'
  AND NOT EXISTS (SELECT 1 FROM rota_waits w WHERE w.run_id = rota_runs.id AND w.token = rota_runs.token)  -- parked: in progress (0022)
RETURNING id

-- name: withdraw_ahead
-- transition: withdraw
-- A schedule paused, updated or redeployed: its tick runs made ahead of their tick and not
-- due yet are cancelled (with `definition` given: only if the stored one differs). Their
-- `tick` is cleared: the tick is no longer theirs, and can be materialized again.
UPDATE rota_runs
SET status = 'cancelled', tick = NULL, finished_at = {now}, error = :error
WHERE schedule = :name AND status = 'pending' AND tick IS NOT NULL AND attempt = 0
  AND NOT held AND due_at > {now}
  AND (:definition IS NULL OR EXISTS (
       SELECT 1 FROM rota_schedules
       WHERE name = :name AND definition IS NOT :definition))
  AND NOT EXISTS (SELECT 1 FROM rota_waits w WHERE w.run_id = rota_runs.id AND w.token = rota_runs.token)  -- parked (0022)
RETURNING scheduled_for

-- name: rewind_schedule
-- The withdrawn tick is planned again when it comes (unless the schedule's change moves it).
UPDATE rota_schedules SET next_run_at = :tick
WHERE name = :name AND next_run_at > :tick
RETURNING name

-- name: schedule_busy
-- An exclusive schedule with a pending or running run (held ones included): its next tick
-- is not made ahead, so the overlap policy is judged at the tick.
SELECT 1 FROM rota_runs
WHERE schedule = :schedule AND exclusive AND status IN ('pending', 'running')
LIMIT 1

-- name: set_paused
UPDATE rota_schedules
SET paused = :paused, next_run_at = coalesce(:next_run_at, next_run_at), updated_at = {now}
WHERE name = :name AND active
RETURNING name

-- name: due_schedules
-- next_run_at on a whole microsecond, as a datetime holds it (a time written by hand may
-- not be): advance_schedule and mark_plan_error compare the one read so rounded.
SELECT name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, queue,
       priority, max_attempts, timeout, backoff, round(next_run_at * 1000000) / 1000000, jitter
FROM rota_schedules
WHERE active AND NOT paused AND next_run_at <= {now}
ORDER BY next_run_at
LIMIT :limit

-- name: due_schedules_ahead
-- As due_schedules, with the ticks due within `lead` seconds (made ahead of their tick).
SELECT name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, queue,
       priority, max_attempts, timeout, backoff, round(next_run_at * 1000000) / 1000000, jitter
FROM rota_schedules
WHERE active AND NOT paused AND next_run_at <= {now} + :lead
ORDER BY next_run_at
LIMIT :limit

-- name: advance_schedule
UPDATE rota_schedules
SET next_run_at = :new,  -- a count at its column's maximum stays there (damaged: never a failed tick)
    skip_count = CASE WHEN skip_count <= 9223372036854775807 - :skipped_more THEN skip_count + :skipped_more
                      ELSE skip_count END
WHERE name = :name AND round(next_run_at * 1000000) = round(:old * 1000000) AND active AND NOT paused
RETURNING name

-- name: tick_exists
SELECT 1 FROM rota_runs WHERE schedule = :schedule AND tick = :tick

-- name: active_run
SELECT id, status FROM rota_runs
WHERE schedule = :schedule AND exclusive AND NOT held AND status IN ('pending', 'running')

-- name: cancel_active_pending
-- transition: overlap
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = :error
WHERE id = :id AND status = 'pending'
RETURNING id

-- name: request_cancel
-- transition: cancel
UPDATE rota_runs SET cancel_requested = 1
WHERE id = :id AND status = 'running'
RETURNING id, owner

-- name: cancel_requests
-- The runs of one worker whose cancellation was requested (another process's request reaches
-- its worker through the data_version watch: rota/worker/wakeups.py). Reads the running runs
-- only (rota_runs_status).
SELECT id FROM rota_runs WHERE status = 'running' AND cancel_requested AND owner = :owner

-- name: cancel_held
-- transition: overlap
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = :error
WHERE schedule = :schedule AND held AND status = 'pending'
RETURNING id

-- name: promote_held
-- transition: promote
UPDATE rota_runs SET held = 0
WHERE id = (SELECT id FROM rota_runs
            WHERE schedule = :schedule AND held AND status = 'pending'
            ORDER BY scheduled_for, id LIMIT 1)
  AND NOT EXISTS (SELECT 1 FROM rota_runs
                  WHERE schedule = :schedule AND exclusive AND NOT held
                    AND status IN ('pending', 'running'))
RETURNING id

-- name: lock_schedule
-- (Write transactions are serialized on SQLite: nothing to lock; kept for the same flow.)
SELECT name FROM rota_schedules WHERE name = :schedule

-- name: schedule_columns
SELECT name, task, cron, every, tz, args, kwargs, overlap, misfire, misfire_grace, queue, priority,
       max_attempts, timeout, source, active, paused, next_run_at, last_run_at, last_status,
       run_count, success_count, failure_count, skip_count, run_immediately, backoff, app,
       definition, plan_error, jitter
FROM rota_schedules

-- name: run_columns
SELECT id, task, status, queue, priority, args, kwargs, key, schedule, scheduled_for, due_at,
       attempt, max_attempts, timeout, owner, token, lease_until, cancel_requested, created_at,
       started_at, finished_at, result, error, attempts, retry_of, held, waiting_on, backfill
FROM rota_runs

-- name: count_by_status
-- Kept by triggers (migration 0004): no scan of rota_runs.
SELECT status, n FROM rota_run_counts WHERE n <> 0

-- name: cancel_pending
-- transition: cancel
UPDATE rota_runs SET status = 'cancelled', finished_at = {now}, error = :error
WHERE id = :id AND status = 'pending'
RETURNING status

-- name: run_status
SELECT status FROM rota_runs WHERE id = :id

-- name: register_worker
INSERT INTO rota_workers (id, host, pid, concurrency, queues, state, started_at, last_seen)
VALUES (:id, :host, :pid, :concurrency, :queues, 'running', {now}, {now})
ON CONFLICT (id) DO UPDATE SET state = 'running', last_seen = {now}

-- name: worker_lease
UPDATE rota_workers SET lease = :lease WHERE id = :id

-- name: worker_seen
UPDATE rota_workers SET last_seen = {now}, state = :state WHERE id = :id

-- name: list_workers
-- A worker whose heartbeat is older than its own lease reads lost, not alive; a worker without
-- one (an older release) or with a lease no release writes (a damaged row) is judged by
-- stale_after (the viewer's lease).
SELECT id, host, pid, concurrency, queues,
       CASE WHEN state NOT IN ('stopped', 'lost') AND last_seen < {now} - stale
            THEN 'lost' ELSE state END,
       started_at, last_seen,
       last_seen >= {now} - stale AND state NOT IN ('stopped', 'lost'),
       lease
FROM (SELECT *, CASE WHEN lease > 0 AND lease <= 31536000 THEN lease ELSE :stale_after END AS stale
      FROM rota_workers) AS w
WHERE last_seen >= {now} - stale * 10 OR state NOT IN ('stopped', 'lost')
ORDER BY started_at

-- name: lock_acquire
INSERT INTO rota_locks AS l (name, owner, token, acquired_at, expires_at)
VALUES (:name, :owner, 1, {now}, {now} + :ttl)
ON CONFLICT (name) DO UPDATE
SET owner = excluded.owner, token = l.token + 1, acquired_at = excluded.acquired_at,
    expires_at = excluded.expires_at
WHERE l.owner IS NULL OR l.expires_at IS NULL OR l.expires_at <= {now}
RETURNING token

-- name: lock_renew
UPDATE rota_locks SET expires_at = {now} + :ttl
WHERE name = :name AND owner = :owner AND token = :token AND expires_at > {now}
RETURNING token

-- name: lock_release
UPDATE rota_locks SET owner = NULL, expires_at = NULL
WHERE name = :name AND owner = :owner AND token = :token
RETURNING token

-- name: list_locks
SELECT name, owner, token, acquired_at, expires_at,
       owner IS NOT NULL AND expires_at > {now}
FROM rota_locks ORDER BY name

-- Dashboard sign-outs (rota.web.sessions); times are the dashboard's Unix seconds (:at).
-- name: signout_add
INSERT INTO rota_dashboard_signouts (nonce, expires_at) VALUES (:nonce, :expires_at)
ON CONFLICT (nonce) DO NOTHING

-- name: signout_prune
DELETE FROM rota_dashboard_signouts WHERE expires_at <= :at

-- name: signed_out
SELECT 1 FROM rota_dashboard_signouts WHERE nonce = :nonce AND expires_at > :at

-- name: prune
-- transition: prune
-- Oldest finish first through rota_runs_finished, from the last finish time the pass deleted
-- (:after): see PostgreSQL.
DELETE FROM rota_runs
WHERE id IN (SELECT id FROM rota_runs INDEXED BY rota_runs_finished
             WHERE finished_at < {now} - :older_than AND finished_at >= :after AND status = :status
             ORDER BY finished_at LIMIT :limit)
RETURNING id, finished_at

-- ===================================================================================-- faults-store (issue 10): retries that keep key and backoff; lost and pruned workers
-- ==========================================================================================

-- name: retry_source
SELECT key, backoff FROM rota_runs WHERE id = :id

-- name: mark_lost_workers
UPDATE rota_workers SET state = 'lost'
WHERE state NOT IN ('stopped', 'lost')
  AND last_seen < {now} - max(:lost_after, CASE WHEN lease > 0 AND lease <= 31536000 THEN lease * 3 ELSE 0 END)
RETURNING id

-- name: prune_workers
DELETE FROM rota_workers
WHERE state IN ('stopped', 'lost') AND last_seen < {now} - :older_than
RETURNING id

-- >>> dashboard reads (rota.web) ------------------------------------------------------
-- Times as epoch seconds and JSON as text: rota.web decodes them and shows a value it
-- cannot decode (a date past year 9999, corrupt JSON) as corrupt instead of failing.
-- The store appends the WHERE/ORDER/LIMIT of a RunFilter or of one id.

-- name: web_run_summaries
SELECT id, task, status, queue, priority, key, schedule, scheduled_for, attempt, max_attempts,
       owner, token, lease_until, cancel_requested, created_at, started_at, finished_at, retry_of,
       substr(args, 1, :preview), length(args), substr(kwargs, 1, :preview), length(kwargs),
       substr(result, 1, :preview), length(result), substr(error, 1, :error_prefix), length(error),
       backfill, waiting_on
FROM rota_runs

-- name: web_run_detail
SELECT id, task, status, queue, priority, key, schedule, scheduled_for, attempt, max_attempts,
       owner, token, lease_until, cancel_requested, created_at, started_at, finished_at, retry_of,
       args, kwargs, result, error, attempts, backfill, due_at
FROM rota_runs

-- name: web_timeline
SELECT id, task, schedule, status, attempt, scheduled_for, started_at, finished_at, owner
FROM rota_runs
-- name: web_throughput
-- One bucket of a throughput chart (rota.web.charts): the first :cap runs that finished in
-- [lo, hi), in finished_at order from rota_runs_finished (0007), which covers the columns
-- read: no table access. The cap bounds the work; a full bucket is scaled up.
SELECT count(*), max(finished_at), count(*),
       coalesce(sum(status = 'succeeded'), 0), coalesce(sum(status = 'failed'), 0),
       coalesce(sum(status = 'skipped'), 0), coalesce(sum(status = 'cancelled'), 0),
       coalesce(sum(max(attempt - 1, 0)), 0)
FROM (SELECT finished_at, status, attempt FROM rota_runs INDEXED BY rota_runs_finished
      WHERE finished_at >= :lo AND finished_at < :hi
      ORDER BY finished_at LIMIT :cap)

-- name: web_throughput_where
-- web_throughput for one task and/or queue: the cap bounds the rows read (before the
-- filter), so a rare task costs no more than a common one; the third column counts matches.
SELECT count(*), max(finished_at), coalesce(sum(hit), 0),
       coalesce(sum(hit AND status = 'succeeded'), 0), coalesce(sum(hit AND status = 'failed'), 0),
       coalesce(sum(hit AND status = 'skipped'), 0), coalesce(sum(hit AND status = 'cancelled'), 0),
       coalesce(sum(CASE WHEN hit THEN max(attempt - 1, 0) ELSE 0 END), 0)
FROM (SELECT finished_at, status, attempt,
             (:task IS NULL OR task = :task) AND (:queue IS NULL OR queue = :queue) AS hit
      FROM rota_runs INDEXED BY rota_runs_finished
      WHERE finished_at >= :lo AND finished_at < :hi
      ORDER BY finished_at LIMIT :cap)

-- name: web_lateness
-- A sample of one bucket for the lateness chart, the first :cap finishes in [lo, hi):
-- attempt, start - scheduled_for, the queue wait (start - when it was both due and
-- created), and whether it matches the task/queue filter (applied after the cap).
SELECT attempt, started_at - scheduled_for, started_at - max(created_at, due_at),
       started_at IS NOT NULL AND (:task IS NULL OR task = :task) AND (:queue IS NULL OR queue = :queue)
FROM rota_runs INDEXED BY rota_runs_finished
WHERE finished_at >= :lo AND finished_at < :hi
ORDER BY finished_at LIMIT :cap

-- name: web_backlog
-- Pending runs by queue, due now and later: the first :cap in due_at order (rota_runs_due).
SELECT queue, coalesce(sum(due_at <= {now}), 0), coalesce(sum(due_at > {now}), 0), count(*)
FROM (SELECT queue, due_at FROM rota_runs INDEXED BY rota_runs_due
      WHERE status = 'pending' AND NOT held ORDER BY due_at LIMIT :cap)
GROUP BY queue ORDER BY queue

-- name: web_queue_running
SELECT queue, count(*) FROM rota_runs WHERE status = 'running' GROUP BY queue ORDER BY queue
-- <<< dashboard reads (rota.web) ------------------------------------------------------

-- ==== operate-store (issue 14): planning errors, cheap run counts ==========================

-- name: mark_plan_error
-- A schedule this worker cannot plan: keep the error, stop it being due (compare-and-set on
-- the next_run_at the worker saw, so a concurrent update wins).
UPDATE rota_schedules SET plan_error = :error, next_run_at = NULL, updated_at = {now}
WHERE name = :name AND round(next_run_at * 1000000) = round(:old * 1000000) AND active
RETURNING name

-- name: run_counts
-- Exact, kept by triggers (0004). PostgreSQL answers the same name with estimates.
SELECT status, n FROM rota_run_counts

-- name: count_status
SELECT n FROM rota_run_counts WHERE status = :status

-- name: probe_privileges
-- SQLite has no roles: file permissions decide (checked before the write probe).
SELECT NULL, NULL, NULL, NULL WHERE 0

-- name: probe_can_migrate
SELECT 1, NULL, NULL

-- The write probe (a worker's start, `rota migrate`): each kind of write on each table, in one
-- transaction that is rolled back. Catches what privileges do not show: a read-only
-- transaction or replica, row security, a read-only file.

-- name: probe_insert_run
-- transition: none (a write probe on row -1, rolled back)
INSERT INTO rota_runs (id, task, scheduled_for, due_at, created_at) VALUES (-1, :probe, {now}, {now}, {now})

-- name: probe_update_run
-- transition: none (a write probe on row -1, rolled back)
UPDATE rota_runs SET status = 'cancelled' WHERE id = -1

-- name: probe_delete_run
-- transition: none (a write probe on row -1, rolled back)
DELETE FROM rota_runs WHERE id = -1

-- name: probe_insert_schedule
INSERT INTO rota_schedules (name, task, every, definition, created_at, updated_at)
VALUES (:probe, :probe, 60, '', {now}, {now})

-- name: probe_update_schedule
UPDATE rota_schedules SET paused = 1 WHERE name = :probe

-- name: probe_delete_schedule
DELETE FROM rota_schedules WHERE name = :probe

-- name: probe_insert_worker
INSERT INTO rota_workers (id, host, pid, concurrency, started_at, last_seen) VALUES (:probe, '', 0, 1, {now}, {now})

-- name: probe_update_worker
UPDATE rota_workers SET state = 'stopped' WHERE id = :probe

-- name: probe_delete_worker
DELETE FROM rota_workers WHERE id = :probe

-- name: probe_insert_lock
INSERT INTO rota_locks (name, token) VALUES (:probe, 1)

-- name: probe_update_lock
UPDATE rota_locks SET token = 2 WHERE name = :probe

-- name: probe_delete_lock
DELETE FROM rota_locks WHERE name = :probe

-- name: probe_sequences
UPDATE rota_counters SET value = value WHERE name = 'token'
-- ===== issue 10, worker side (branch faults-worker) =====================================

-- name: worker_seen_stuck
UPDATE rota_workers SET last_seen = {now}, state = :state, stuck = :stuck WHERE id = :id

-- name: workers_stuck
SELECT id, stuck FROM rota_workers

-- name: database_started
SELECT NULL

-- ===== end of issue 10, worker side =====================================================

-- ===== issue 20: uniqueness windows and runs after others (branch flow-deps, 0008) =======
-- name: unique_take
-- (rota_unique only: changes no run)
-- As in PostgreSQL (see there: a record made more than a day after now is damaged, the key
-- free again); SQLite's write lock makes it atomic.
INSERT INTO rota_unique AS u (task, key, run_id, created_at)
VALUES (:task, :key, NULL, {now})
ON CONFLICT (task, key) DO UPDATE SET
    run_id = CASE WHEN u.created_at > excluded.created_at - :window AND u.created_at <= excluded.created_at + 86400
                       AND EXISTS (SELECT 1 FROM rota_runs r WHERE r.id = u.run_id AND r.status <> 'cancelled')
                  THEN u.run_id END,
    created_at = CASE WHEN u.created_at > excluded.created_at - :window AND u.created_at <= excluded.created_at + 86400
                           AND EXISTS (SELECT 1 FROM rota_runs r WHERE r.id = u.run_id AND r.status <> 'cancelled')
                      THEN u.created_at ELSE excluded.created_at END
RETURNING run_id

-- name: unique_put
-- (rota_unique only: changes no run)
INSERT INTO rota_unique AS u (task, key, run_id, created_at)
VALUES (:task, :key, :id, CASE WHEN :twin THEN (SELECT created_at FROM rota_runs WHERE id = :id) ELSE {now} END)
ON CONFLICT (task, key) DO UPDATE SET run_id = excluded.run_id, created_at = excluded.created_at

-- name: lock_parents
-- transition: enqueue
-- (of the dependent: no parent's status changes; sets has_dependents on the parents)
UPDATE rota_runs SET has_dependents = 1
WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING id, status, task, after_depth

-- name: add_deps
INSERT INTO rota_deps (parent, child)
SELECT value, :child FROM json_each(:ids)
WHERE true
ON CONFLICT DO NOTHING

-- name: depend_run
-- transition: enqueue
UPDATE rota_runs SET waiting_on = :waiting, after_depth = :depth,
    finished_at = CASE WHEN status = 'cancelled' THEN {now} ELSE finished_at END
WHERE id = :id

-- name: deps_orphaned
-- transition: orphaned
-- Runs waiting on parents none of which is pending or running any more (rota_runs_held): a
-- parent deleted by hand, or a damaged waiting_on. Each ended failed as damaged (rota/quarantine.py),
-- a worker's check now and then; a failed run's dependents are cancelled by rota_run_settled.
UPDATE rota_runs
SET status = 'failed', held = false, waiting_on = 0, finished_at = {now}, error = :error
WHERE id IN (SELECT w.id FROM rota_runs w
             WHERE w.held AND w.status = 'pending' AND w.waiting_on > 0
               AND NOT EXISTS (SELECT 1 FROM rota_deps d JOIN rota_runs p ON p.id = d.parent
                               WHERE d.child = w.id AND p.status IN ('pending', 'running'))
             ORDER BY w.id LIMIT :limit)
  AND status = 'pending' AND held AND waiting_on > 0
RETURNING id, task

-- name: run_parents
SELECT parent FROM rota_deps WHERE child = :id ORDER BY parent

-- name: run_dependents
SELECT child FROM rota_deps WHERE parent = :id ORDER BY child

-- name: parent_results
SELECT r.id, r.result FROM rota_deps d JOIN rota_runs r ON r.id = d.parent
WHERE d.child = :id ORDER BY r.id

-- name: web_run_waiting
-- (run_rows appends WHERE id = ...)
SELECT waiting_on FROM rota_runs

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

-- ==== ticks made ahead (issue 18, branch ticks): misfire deadlines ==========================

-- name: insert_ahead
-- transition: make_ahead
-- The run of a tick that has not come yet: pending, due at the tick, with its misfire
-- deadline (tick + misfire_grace; NULL under misfire="all"): see 0005_ticks_ahead.sql.
INSERT INTO rota_runs (task, queue, priority, args, kwargs, schedule, tick, exclusive,
                       scheduled_for, due_at, max_attempts, timeout, backoff, misfire_at, created_at,
                       limit_name, limit_key, rate_name, rate_key)
VALUES (:task, :queue, :priority, :args, :kwargs, :schedule, :tick, :exclusive, :tick, coalesce(:due_at, :tick),
        :max_attempts, :timeout, :backoff, :misfire_at, {now},
        :limit_name, :limit_key, :rate_name, :rate_key)
ON CONFLICT DO NOTHING
RETURNING id

-- name: stale_ahead
-- Runs made ahead of their tick that no worker claimed by their misfire deadline, with what
-- judging them needs: the schedule's policy and grace, and whether a later tick of the
-- schedule is due by now (planned already, or still to plan).
SELECT r.id, r.schedule, r.tick, s.misfire, s.misfire_grace,
       coalesce(s.next_run_at <= {now}, 0) OR EXISTS (
           SELECT 1 FROM rota_runs l
           WHERE l.schedule = r.schedule AND l.tick > r.tick AND l.tick <= {now})
FROM rota_runs r INDEXED BY rota_runs_misfire JOIN rota_schedules s ON s.name = r.schedule
WHERE r.status = 'pending' AND r.misfire_at IS NOT NULL AND r.misfire_at < {now}
ORDER BY r.misfire_at
LIMIT :limit

-- name: misfire_ahead
-- transition: misfire_skip
-- A run made ahead, unclaimed past its misfire deadline, skipped by the misfire policy.
UPDATE rota_runs SET status = 'skipped', finished_at = {now}, error = :error, misfire_at = NULL
WHERE id = :id AND status = 'pending' AND misfire_at < {now}
RETURNING id

-- name: keep_ahead
-- transition: misfire_run
-- A run made ahead, unclaimed past its misfire deadline, that the misfire policy runs all
-- the same (misfire="coalesce" with no later tick due): claimable again, without deadline.
UPDATE rota_runs SET misfire_at = NULL
WHERE id = :id AND status = 'pending' AND misfire_at < {now}
RETURNING id

-- Flow control (rota.Limit, rota.Rate; design note in rota/stores/_limits.py). As on
-- PostgreSQL; the write transaction serialises claimers, so keys need no lock.

-- name: flow_heads
-- The keys with a due waiting run (a loose index scan: one or two probes per distinct key;
-- SQLite ranges an index by the first column of a row value only, hence two), the key
-- whose first run comes first in the claim's order first. A run with a pool's name and no key
-- (damaged) is left out: NULL sorts first, and the walk from it skipped every other key of
-- its pool (the workers' check sets it aside: flow_keyless).
WITH RECURSIVE lkeys(name, key) AS (
    SELECT * FROM (SELECT limit_name, limit_key FROM rota_runs INDEXED BY rota_runs_limit_waiting
                   WHERE status = 'pending' AND NOT held AND limit_name IS NOT NULL
                   AND limit_key IS NOT NULL  -- (a run with no key, damaged: set aside)
                   ORDER BY limit_name, limit_key LIMIT 1)
    UNION ALL
    SELECT r.limit_name, r.limit_key FROM lkeys JOIN rota_runs r ON r.id = coalesce(
        (SELECT x.id FROM rota_runs x INDEXED BY rota_runs_limit_waiting
         WHERE x.status = 'pending' AND NOT x.held AND x.limit_name IS NOT NULL
           AND x.limit_name = lkeys.name AND x.limit_key > lkeys.key
         ORDER BY x.limit_key LIMIT 1),
        (SELECT x.id FROM rota_runs x INDEXED BY rota_runs_limit_waiting
         WHERE x.status = 'pending' AND NOT x.held AND x.limit_name IS NOT NULL
           AND x.limit_name > lkeys.name
         AND x.limit_key IS NOT NULL
         ORDER BY x.limit_name, x.limit_key LIMIT 1))
),
rkeys(name, key) AS (
    SELECT * FROM (SELECT rate_name, rate_key FROM rota_runs INDEXED BY rota_runs_rate_waiting
                   WHERE status = 'pending' AND NOT held AND rate_name IS NOT NULL
                   AND rate_key IS NOT NULL
                   ORDER BY rate_name, rate_key LIMIT 1)
    UNION ALL
    SELECT r.rate_name, r.rate_key FROM rkeys JOIN rota_runs r ON r.id = coalesce(
        (SELECT x.id FROM rota_runs x INDEXED BY rota_runs_rate_waiting
         WHERE x.status = 'pending' AND NOT x.held AND x.rate_name IS NOT NULL
           AND x.rate_name = rkeys.name AND x.rate_key > rkeys.key
         ORDER BY x.rate_key LIMIT 1),
        (SELECT x.id FROM rota_runs x INDEXED BY rota_runs_rate_waiting
         WHERE x.status = 'pending' AND NOT x.held AND x.rate_name IS NOT NULL
           AND x.rate_name > rkeys.name
         AND x.rate_key IS NOT NULL
         ORDER BY x.rate_name, x.rate_key LIMIT 1))
),
heads AS (
    SELECT 'l' AS kind, k.name, k.key,
           (SELECT r.id FROM rota_runs r INDEXED BY rota_runs_limit_waiting
            WHERE r.limit_name = k.name AND r.limit_key = k.key AND r.limit_name IS NOT NULL
              AND r.status = 'pending' AND NOT r.held AND r.due_at <= {now}
              AND (:queues IS NULL OR r.queue IN (SELECT value FROM json_each(:queues))) AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = r.queue)
            ORDER BY r.priority DESC, r.due_at, r.id LIMIT 1) AS head
    FROM lkeys k
    UNION ALL
    SELECT 'r', k.name, k.key,
           (SELECT r.id FROM rota_runs r INDEXED BY rota_runs_rate_waiting
            WHERE r.rate_name = k.name AND r.rate_key = k.key AND r.rate_name IS NOT NULL
              AND r.status = 'pending' AND NOT r.held AND r.due_at <= {now}
              AND (:queues IS NULL OR r.queue IN (SELECT value FROM json_each(:queues))) AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = r.queue)
            ORDER BY r.priority DESC, r.due_at, r.id LIMIT 1)
    FROM rkeys k
),
rooms AS (
    SELECT h.kind, h.name, h.key,
           CASE WHEN h.kind = 'l'
                THEN (SELECT l.max FROM rota_limits l WHERE l.name = h.name AND l.max BETWEEN 1 AND 1000000)
                     - (SELECT count(*) FROM rota_runs x INDEXED BY rota_runs_limit_running
                        WHERE x.status = 'running' AND x.limit_name IS NOT NULL
                          AND x.limit_name = h.name AND x.limit_key = h.key)
                ELSE (SELECT CASE WHEN t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400  -- else damaged: no room
                                   THEN t.max - (SELECT count(*) FROM rota_rate_starts s
                                      WHERE s.name = h.name AND s.key = h.key
                                        AND s.started_at > {now} - t.per
                                        AND s.started_at <= {now} + t.per) ELSE 0 END
                      FROM rota_rates t WHERE t.name = h.name) END AS free
    FROM (SELECT h.kind, h.name, h.key, r.priority, r.due_at, r.id
          FROM heads h JOIN rota_runs r ON r.id = h.head
          ORDER BY r.priority DESC, r.due_at, r.id
          LIMIT -1) h  -- (not flattened: the room of each key is counted in this order, up to :n)
)
SELECT kind, name, key, free FROM rooms
WHERE free > 0 OR (kind = 'r' AND free IS NOT NULL)
LIMIT :n

-- name: flow_heads_walk
-- As the PostgreSQL one: when many keys wait, the keys of the first :m waiting runs in the
-- claim's order (rota_runs_gated_order), with their room, the key whose first run comes
-- first first; when they give fewer than :n keys, flow_heads finds the others
WITH walked AS MATERIALIZED (
    SELECT limit_name, limit_key, rate_name, rate_key, priority, due_at, id
    FROM rota_runs INDEXED BY rota_runs_gated_order
    WHERE status = 'pending' AND NOT held AND (limit_name IS NOT NULL OR rate_name IS NOT NULL)
      AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues))) AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)
    ORDER BY priority DESC, due_at, id
    LIMIT :m
),
firsts AS (
    SELECT kind, name, key, priority, due_at, id,
           row_number() OVER (PARTITION BY kind, name, key ORDER BY priority DESC, due_at, id) AS rn
    FROM (SELECT 'l' AS kind, limit_name AS name, limit_key AS key, priority, due_at, id FROM walked
          WHERE limit_name IS NOT NULL AND due_at <= {now}
          UNION ALL
          SELECT 'r', rate_name, rate_key, priority, due_at, id FROM walked
          WHERE rate_name IS NOT NULL AND due_at <= {now})
),
rooms AS (
    SELECT h.kind, h.name, h.key,
           CASE WHEN h.kind = 'l'
                THEN (SELECT l.max FROM rota_limits l WHERE l.name = h.name AND l.max BETWEEN 1 AND 1000000)
                     - (SELECT count(*) FROM rota_runs x INDEXED BY rota_runs_limit_running
                        WHERE x.status = 'running' AND x.limit_name IS NOT NULL
                          AND x.limit_name = h.name AND x.limit_key = h.key)
                ELSE (SELECT CASE WHEN t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400  -- else damaged: no room
                                   THEN t.max - (SELECT count(*) FROM rota_rate_starts s
                                      WHERE s.name = h.name AND s.key = h.key
                                        AND s.started_at > {now} - t.per
                                        AND s.started_at <= {now} + t.per) ELSE 0 END
                      FROM rota_rates t WHERE t.name = h.name) END AS free
    FROM (SELECT kind, name, key, priority, due_at, id FROM firsts WHERE rn = 1
          ORDER BY priority DESC, due_at, id
          LIMIT -1) h
)
SELECT kind, name, key, free FROM rooms
WHERE free > 0 OR (kind = 'r' AND free IS NOT NULL)
LIMIT :n

-- name: flow_due
-- Is a limited or rated run due (the probe the plain claim's transaction ends with)? For a
-- worker of every queue (flow_due_in_queues: of some).
SELECT EXISTS (SELECT 1 FROM rota_runs INDEXED BY rota_runs_gated_due
               WHERE status = 'pending' AND NOT held AND due_at <= {now}
                 AND (limit_name IS NOT NULL OR rate_name IS NOT NULL)
                 AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue))

-- name: flow_due_in_queues
SELECT EXISTS (SELECT 1 FROM rota_runs INDEXED BY rota_runs_gated_due
               WHERE status = 'pending' AND NOT held AND due_at <= {now}
                 AND (limit_name IS NOT NULL OR rate_name IS NOT NULL)
                 AND queue IN (SELECT value FROM json_each(:queues))
                 AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue))

-- name: plain_due
-- Is a run without a limit or a rate due (the plain claim's candidates)? Run with a flow claim
-- whose plain claim was asked for no run (see the PostgreSQL file).
SELECT EXISTS (SELECT 1 FROM rota_runs INDEXED BY rota_runs_claim
               WHERE status = 'pending' AND NOT held AND due_at <= {now}
                 AND (misfire_at IS NULL OR misfire_at >= {now})
                 AND NOT cancel_requested
                 AND limit_name IS NULL AND rate_name IS NULL
                 AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues))) AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue))

-- name: flow_poll_later
-- poll_state after a claim that left due limited runs waiting for a slot: the first run due later
SELECT {now},
       (SELECT min(due_at) FROM rota_runs INDEXED BY rota_runs_due
        WHERE status = 'pending' AND NOT held AND due_at > {now} AND (misfire_at IS NULL OR misfire_at >= {now})
          AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues))) AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)),
       (SELECT min(t) FROM (
            SELECT min(next_run_at) AS t FROM rota_schedules WHERE active AND NOT paused
            UNION ALL
            SELECT min(misfire_at) FROM rota_runs INDEXED BY rota_runs_misfire
            WHERE status = 'pending' AND misfire_at IS NOT NULL AND misfire_at < {now}))

-- name: flow_room
SELECT e.value ->> 0, e.value ->> 1, e.value ->> 2,
       CASE WHEN e.value ->> 0 = 'l'
            THEN (SELECT l.max FROM rota_limits l WHERE l.name = e.value ->> 1 AND l.max BETWEEN 1 AND 1000000)
                 - (SELECT count(*) FROM rota_runs x INDEXED BY rota_runs_limit_running
                    WHERE x.status = 'running' AND x.limit_name IS NOT NULL
                      AND x.limit_name = e.value ->> 1 AND x.limit_key = e.value ->> 2)
            ELSE (SELECT CASE WHEN t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400  -- else damaged: no room
                               THEN t.max - (SELECT count(*) FROM rota_rate_starts s
                                  WHERE s.name = e.value ->> 1 AND s.key = e.value ->> 2
                                    AND s.started_at > {now} - t.per
                                        AND s.started_at <= {now} + t.per) ELSE 0 END
                  FROM rota_rates t WHERE t.name = e.value ->> 1) END
FROM json_each(:keys) AS e

-- name: flow_waiting_limit
-- (past its misfire deadline: left for the tick pass, see the PostgreSQL file)
SELECT id, limit_name, limit_key, rate_name, rate_key FROM rota_runs INDEXED BY rota_runs_limit_waiting
WHERE limit_name = :name AND limit_key = :key AND limit_name IS NOT NULL
  AND status = 'pending' AND NOT held AND due_at <= {now}
  AND (misfire_at IS NULL OR misfire_at >= {now})
  AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues))) AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)
ORDER BY priority DESC, due_at, id
LIMIT :n

-- name: flow_waiting_rate
-- (past its misfire deadline: left for the tick pass, see the PostgreSQL file)
SELECT id, limit_name, limit_key, rate_name, rate_key FROM rota_runs INDEXED BY rota_runs_rate_waiting
WHERE rate_name = :name AND rate_key = :key AND rate_name IS NOT NULL
  AND status = 'pending' AND NOT held AND due_at <= {now}
  AND (misfire_at IS NULL OR misfire_at >= {now})
  AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues))) AND NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = rota_runs.queue)
ORDER BY priority DESC, due_at, id
LIMIT :n

-- name: flow_take
-- transition: claim
-- :ids in the claim's order: the first :start start, the rest are held (as claim's);
-- tokens in id order. The misfire deadline of a tick made ahead goes, as in claim: the tick
-- was taken (a retry of it is no misfire).
UPDATE rota_runs
SET status = 'running', owner = :owner, token = :token + c.rank,
    attempt = attempt + (c.pos < :start AND attempt < 2147483647), rate_waited = 0, misfire_at = NULL,
    started_at = CASE WHEN c.pos < :start THEN {now} END, lease_until = {now} + :lease
FROM (SELECT value AS id, key AS pos, row_number() OVER (ORDER BY value) - 1 AS rank FROM json_each(:ids)) AS c
WHERE rota_runs.id = c.id AND rota_runs.status = 'pending'
RETURNING rota_runs.id, task, args, kwargs, attempt, max_attempts, token, timeout, backoff, schedule,
          scheduled_for, started_at, lease_until, priority, due_at

-- name: flow_started
INSERT INTO rota_rate_starts (name, key, started_at)
SELECT rate_name, rate_key, started_at FROM rota_runs
WHERE id IN (SELECT value FROM json_each(:ids)) AND rate_name IS NOT NULL

-- name: flow_bump
-- transition: rate_wait
-- (a damaged max or per bumps nothing; a damaged start, later than a window ahead, is not counted)
WITH t AS (SELECT max, per FROM rota_rates
           WHERE name = :name AND max BETWEEN 1 AND 1000000 AND per BETWEEN 0.001 AND 31622400),
w AS (SELECT s.started_at FROM rota_rate_starts s
      WHERE s.name = :name AND s.key = :key AND s.started_at > {now} - (SELECT per FROM t)
        AND s.started_at <= {now} + (SELECT per FROM t)),
o AS (SELECT started_at + (SELECT per FROM t) AS at FROM w ORDER BY started_at
      LIMIT 1 OFFSET max(coalesce((SELECT count(*) FROM w) - (SELECT max FROM t), 0), 0))
UPDATE rota_runs SET due_at = o.at, rate_waited = 1 FROM o
WHERE rota_runs.rate_name = :name AND rota_runs.rate_key = :key AND rota_runs.rate_name IS NOT NULL
  AND rota_runs.status = 'pending' AND NOT rota_runs.held AND rota_runs.due_at <= {now}
  AND rota_runs.due_at < o.at
  AND (SELECT count(*) FROM w) >= (SELECT max FROM t)

-- name: flow_prune
-- (also the damaged starts, later than a window ahead; none while the rate's per is damaged)
DELETE FROM rota_rate_starts
WHERE name = :name AND key = :key
  AND (started_at <= {now} - (SELECT per FROM rota_rates WHERE name = :name AND per BETWEEN 0.001 AND 31622400)
       OR started_at > {now} + (SELECT per FROM rota_rates WHERE name = :name AND per BETWEEN 0.001 AND 31622400))

-- name: flow_keyless
-- transition: keyless
-- Waiting runs with the name of a stored limit or rate and no key (damaged: no claim can take
-- one), each ended failed as damaged (rota/quarantine.py), a worker's check now and then.
-- Found per pool through rota_runs_limit_waiting and rota_runs_rate_waiting (name, NULL key).
UPDATE rota_runs
SET status = 'failed', finished_at = {now}, error = :error
WHERE id IN (SELECT id FROM (
        SELECT r.id FROM rota_limits l JOIN rota_runs r ON r.limit_name = l.name
        WHERE r.limit_key IS NULL AND r.status = 'pending' AND NOT r.held AND r.limit_name IS NOT NULL
        UNION ALL
        SELECT r.id FROM rota_rates t JOIN rota_runs r ON r.rate_name = t.name
        WHERE r.rate_key IS NULL AND r.status = 'pending' AND NOT r.held AND r.rate_name IS NOT NULL) AS k
      LIMIT :limit)
  AND status = 'pending' AND NOT held
RETURNING id, task

-- name: flow_any
SELECT (SELECT count(*) FROM rota_limits) + (SELECT count(*) FROM rota_rates)

-- name: flow_upsert_limit
INSERT INTO rota_limits (name, max, updated_at) VALUES (:name, :max, {now})
ON CONFLICT (name) DO UPDATE SET max = excluded.max, updated_at = excluded.updated_at

-- name: flow_rate_reopen
-- transition: rate_reopen
-- Before a deploy stores a rate with a new max or per: the runs waiting for its old window
-- (rate_waited, set by flow_bump, which moves only due runs) are due again, and the next
-- claim judges them by the new rate.
UPDATE rota_runs SET due_at = {now}, rate_waited = 0
WHERE rate_name = :name AND rate_waited AND status = 'pending' AND NOT held
  AND EXISTS (SELECT 1 FROM rota_rates t WHERE t.name = :name AND (t.max <> :max OR t.per <> :per))

-- name: flow_upsert_rate
INSERT INTO rota_rates (name, max, per, updated_at) VALUES (:name, :max, :per, {now})
ON CONFLICT (name) DO UPDATE SET max = excluded.max, per = excluded.per, updated_at = excluded.updated_at

-- name: flow_limits
SELECT l.name, l.max,
       (SELECT count(*) FROM rota_runs r WHERE r.limit_name = l.name AND r.status = 'running'),
       (SELECT count(*) FROM rota_runs r WHERE r.limit_name = l.name AND r.status = 'pending'),
       (SELECT count(DISTINCT limit_key) FROM rota_runs r WHERE r.limit_name = l.name AND r.status IN ('pending', 'running'))
FROM rota_limits l ORDER BY l.name

-- name: flow_rates
SELECT t.name, t.max, t.per,
       (SELECT count(*) FROM rota_rate_starts s WHERE s.name = t.name AND s.started_at > {now} - t.per
          AND s.started_at <= {now} + t.per AND t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400),
       (SELECT count(*) FROM rota_runs r WHERE r.rate_name = t.name AND r.status = 'pending'),
       (SELECT count(DISTINCT rate_key) FROM rota_runs r WHERE r.rate_name = t.name AND r.status = 'pending')
FROM rota_rates t ORDER BY t.name

-- name: flow_damaged
-- Every stored limit, rate and task spec, for a worker's check for damaged ones (small tables:
-- one row per pool or task; rota/stores/_flow_damage.py judges them)
SELECT 'l', name, max, NULL, NULL FROM rota_limits
UNION ALL
SELECT 'r', name, max, per, NULL FROM rota_rates
UNION ALL
SELECT 's', task, NULL, NULL, spec FROM rota_task_flow

-- ==== stored task declarations (migration 0011, rota/limit_specs.py) ======================

-- name: flow_put_spec
INSERT INTO rota_task_flow (task, spec, updated_at) VALUES (:task, :spec, {now})
ON CONFLICT (task) DO UPDATE SET spec = excluded.spec, updated_at = excluded.updated_at
WHERE rota_task_flow.spec IS NOT excluded.spec

-- name: flow_drop_specs
DELETE FROM rota_task_flow WHERE task IN (SELECT value FROM json_each(:tasks))

-- name: flow_spec
SELECT spec FROM rota_task_flow WHERE task = :task

-- name: flow_unresolved
-- (a schedule's tick, not a backfill: its tick, else NULL; see the PostgreSQL file)
SELECT id, task, args, kwargs, schedule, CASE WHEN schedule IS NOT NULL AND NOT backfill THEN tick END
FROM rota_runs
WHERE limit_name = :unresolved AND status = 'pending' AND NOT held
  AND task IN (SELECT value FROM json_each(:tasks))
ORDER BY limit_name, limit_key, priority DESC, due_at, id
LIMIT :n

-- name: flow_resolve
-- transition: keyed
UPDATE rota_runs
SET limit_name = :limit_name, limit_key = :limit_key, rate_name = :rate_name, rate_key = :rate_key
WHERE id = :id AND status = 'pending' AND limit_name = :unresolved

-- name: flow_skip_unkeyed
-- transition: skip_unkeyed
UPDATE rota_runs
SET status = 'skipped', error = :error, finished_at = {now},
    limit_name = NULL, limit_key = NULL, rate_name = NULL, rate_key = NULL
WHERE id = :id AND status = 'pending' AND limit_name = :unresolved
RETURNING id

-- name: flow_set_gates
-- transition: retry
UPDATE rota_runs
SET limit_name = :limit_name, limit_key = :limit_key, rate_name = :rate_name, rate_key = :rate_key
WHERE id = :id AND status = 'pending'

-- name: flow_specs_table
SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'rota_task_flow'

-- name: flow_unresolved_count
SELECT count(*) FROM rota_runs
WHERE limit_name = :unresolved AND status = 'pending' AND NOT held

-- name: set_traceparent
-- transition: enqueue
-- (part of the enqueue, in its transaction: the trace context the run was enqueued in, rota.tracing)
UPDATE rota_runs SET traceparent = :traceparent WHERE id = :id

-- name: run_traceparent
-- The trace context stored at enqueue.
SELECT traceparent FROM rota_runs WHERE id = :id

-- ==== paused queues and declared tasks (migration 0021, issue 44) ==========================

-- name: queue_pause
INSERT INTO rota_queue_pauses (queue, paused_at, paused_by) VALUES (:queue, {now}, :by)
ON CONFLICT (queue) DO NOTHING

-- name: queue_resume
DELETE FROM rota_queue_pauses WHERE queue = :queue

-- name: queue_pauses
SELECT queue, paused_at, paused_by FROM rota_queue_pauses ORDER BY queue

-- name: queue_counts
SELECT queue, sum(CASE WHEN status = 'pending' THEN 1 ELSE 0 END),
       sum(CASE WHEN status = 'running' THEN 1 ELSE 0 END)
FROM rota_runs WHERE status IN ('pending', 'running') GROUP BY queue

-- name: tasks_declare
INSERT INTO rota_tasks (task, declared_at) VALUES (:task, {now})
ON CONFLICT (task) DO UPDATE SET declared_at = excluded.declared_at

-- name: tasks_declared
SELECT task FROM rota_tasks ORDER BY task

-- name: schedule_set_notify_on
UPDATE rota_schedules SET notify_on = :notify_on WHERE name = :name

-- name: schedules_notify_on
SELECT name, notify_on FROM rota_schedules WHERE active AND notify_on IS NOT NULL

-- ==========================================================================================
-- durable steps (issue 43): checkpoints, parked runs, signals, progress (rota/stores/_durable.py)
-- ==========================================================================================

-- name: steps_of
SELECT name, seq, attempt, started_at, finished_at, outcome, result, error
FROM rota_steps WHERE run_id = :id ORDER BY seq, name

-- name: save_step
-- As on PostgreSQL: only while (id, token) holds the run; a succeeded step is never overwritten.
INSERT INTO rota_steps (run_id, name, seq, attempt, started_at, finished_at, outcome, result, error)
SELECT r.id, :name, :seq, r.attempt, {now} - :took, {now}, :outcome, :result, :error
FROM rota_runs r WHERE r.id = :id AND r.token = :token AND r.status = 'running'
ON CONFLICT (run_id, name) DO UPDATE
SET seq = excluded.seq, attempt = excluded.attempt, started_at = excluded.started_at,
    finished_at = excluded.finished_at, outcome = excluded.outcome, result = excluded.result,
    error = excluded.error
WHERE rota_steps.outcome <> 'succeeded'
RETURNING run_id

-- name: step_clock
SELECT {now}, EXISTS (SELECT 1 FROM rota_runs WHERE id = :id AND token = :token AND status = 'running')

-- name: park
-- transition: park
-- As on PostgreSQL, one run at a time (in the finish's write transaction).
UPDATE rota_runs
SET status = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'pending' END,
    attempt = CASE WHEN started_at IS NULL OR attempt = 0 THEN attempt ELSE attempt - 1 END,
    started_at = NULL, lease_until = NULL,
    due_at = {now} + max(:wake_in, 0),
    finished_at = CASE WHEN cancel_requested THEN {now} END,
    error = CASE WHEN cancel_requested
                 THEN json_object('type', 'Cancelled', 'message', 'cancelled on request', 'traceback', NULL)
                 ELSE error END
WHERE id = :id AND token = :token AND status = 'running'
RETURNING status, due_at

-- name: park_wait
INSERT INTO rota_waits (run_id, token, kind, name, until, since) VALUES (:id, :token, :kind, :name, :until, {now})
ON CONFLICT (run_id) DO UPDATE SET token = excluded.token, kind = excluded.kind, name = excluded.name, until = excluded.until,
                                   since = excluded.since

-- name: park_signalled
-- transition: park
UPDATE rota_runs SET due_at = {now}
WHERE id = :id AND status = 'pending' AND due_at > {now}
  AND EXISTS (SELECT 1 FROM rota_waits w JOIN rota_signals s ON s.run_id = w.run_id AND s.name = w.name
              WHERE w.run_id = :id AND w.token = rota_runs.token AND w.kind = 'signal')
RETURNING id

-- name: unpark
DELETE FROM rota_waits
WHERE run_id = :id
  AND EXISTS (SELECT 1 FROM rota_runs r WHERE r.id = :id AND r.token = :token AND r.status = 'running')

-- name: signal_lock
-- (SQLite: the write transaction holds the whole file)
SELECT status FROM rota_runs WHERE id = :id

-- name: signal_store
INSERT INTO rota_signals (run_id, name, payload, sent_at)
SELECT r.id, :name, :payload, {now} FROM rota_runs r
WHERE r.id = :id AND r.status IN ('pending', 'running')
ON CONFLICT (run_id, name) DO NOTHING
RETURNING run_id

-- name: signal_wake
-- transition: signal
UPDATE rota_runs SET due_at = {now}
WHERE id = :id AND status = 'pending' AND due_at > {now}
  AND EXISTS (SELECT 1 FROM rota_waits w WHERE w.run_id = :id AND w.token = rota_runs.token AND w.kind = 'signal'
              AND w.name = :name)
RETURNING id

-- name: signal_status
SELECT r.status, EXISTS (SELECT 1 FROM rota_signals s WHERE s.run_id = :id AND s.name = :name)
FROM rota_runs r WHERE r.id = :id

-- name: signal_of
SELECT payload, sent_at FROM rota_signals WHERE run_id = :id AND name = :name

-- name: signals_of
SELECT name, payload, sent_at FROM rota_signals WHERE run_id = :id ORDER BY sent_at, name

-- name: wait_of
SELECT w.kind, w.name, w.until, w.since FROM rota_waits w JOIN rota_runs r ON r.id = w.run_id AND r.token = w.token
WHERE w.run_id = :id AND r.status = 'pending'

-- name: progress_save
INSERT INTO rota_progress (run_id, fraction, message, updated_at)
SELECT r.id, :fraction, :message, {now} FROM rota_runs r
WHERE r.id = :id AND r.token = :token AND r.status = 'running'
ON CONFLICT (run_id) DO UPDATE SET fraction = excluded.fraction, message = excluded.message,
                                   updated_at = excluded.updated_at
RETURNING run_id

-- name: progress_of
SELECT fraction, message, updated_at FROM rota_progress WHERE run_id = :id

-- name: durable_forget
-- (one statement per table: :ids a JSON array; see durable_forget_*)
DELETE FROM rota_steps WHERE run_id IN (SELECT value FROM json_each(:ids))

-- name: durable_forget_waits
DELETE FROM rota_waits WHERE run_id IN (SELECT value FROM json_each(:ids))

-- name: durable_forget_signals
DELETE FROM rota_signals WHERE run_id IN (SELECT value FROM json_each(:ids))

-- name: durable_forget_progress
DELETE FROM rota_progress WHERE run_id IN (SELECT value FROM json_each(:ids))
