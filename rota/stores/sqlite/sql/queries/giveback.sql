-- SQLite queries: runs given back: hand_back, fence, refuse, disown, and the rescue of expired leases.
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

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
-- A lease run out, or one no worker can have granted (see lease_damaged): each an index probe.
SELECT 1
WHERE EXISTS (SELECT 1 FROM rota_runs INDEXED BY rota_runs_lease WHERE status = 'running' AND lease_until < {now})
   OR EXISTS (SELECT 1 FROM rota_runs INDEXED BY rota_runs_lease WHERE status = 'running' AND lease_until IS NULL)
   OR EXISTS (SELECT 1 FROM rota_runs INDEXED BY rota_runs_lease
              WHERE status = 'running' AND lease_until > {now} + 31622400)

-- name: lease_damaged
-- transition: lease_damaged
-- Running runs whose lease no worker can have granted: none (NULL), infinite, not a time, or
-- more than 366 days past now (a lease is at most a year, rota/config.py MAX_SECONDS). The rescue
-- never takes them (their lease never runs out): they are damaged (rota/quarantine.py), ended
-- failed with a DamagedRow error, never retried, which frees their schedule, limit and key.
UPDATE rota_runs
SET status = 'failed', finished_at = {now}, lease_until = NULL,
    error = json_object('type', 'DamagedRow', 'message', 'damaged row: a running run whose lease '
        || CASE WHEN lease_until IS NULL THEN 'is NULL (none)'
                ELSE 'ends at ' || CASE WHEN typeof(lease_until) IN ('integer', 'real') AND lease_until < 1e12
                                        THEN strftime('%Y-%m-%dT%H:%M:%fZ', lease_until, 'unixepoch')
                                        ELSE quote(lease_until) END
                     || ', more than 366 days past now' END
        || ' (no worker grants a lease longer than a year): no rescue would ever take it'
        || '; not retried (repair the row and `rota retry` it, or delete it)', 'traceback', NULL)
WHERE id IN (SELECT id FROM (SELECT id FROM rota_runs INDEXED BY rota_runs_lease
                             WHERE status = 'running' AND lease_until IS NULL LIMIT :limit)
             UNION ALL
             SELECT id FROM (SELECT id FROM rota_runs INDEXED BY rota_runs_lease
                             WHERE status = 'running' AND lease_until > {now} + 31622400 LIMIT :limit))
  AND status = 'running'
RETURNING id, task, status, owner, error

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
          'message', 'worker ' || coalesce(owner, '?') || ' stopped while the handler still ran ('
                     || CASE WHEN error LIKE '%"at_once": true%' THEN 'it was stopped at once by a second signal'
                             ELSE 'it outlived the shutdown timeout' END
                     || '): its process was ended before the lease expired at '
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
