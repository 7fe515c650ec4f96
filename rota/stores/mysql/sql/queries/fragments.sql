-- MySQL fragments: SQL that several queries share, written once. A query uses one as
-- {{name}} or {{name(argument, ...)}}; in a fragment {{parameter}} is its argument. Expanded when
-- the queries load (rota/stores/sqlstore/queries.py); tests/test_queries.py checks that each is
-- used and that every fragment a query names exists.

-- fragment: queues
-- The worker's queues (a JSON array parameter) as a set to test `queue IN` against.
(SELECT j.v FROM JSON_TABLE(%(queues)s, '$[*]' COLUMNS (v VARCHAR(255) PATH '$')) AS j)

-- fragment: ids(param)
-- A JSON array of run ids as a set.
(SELECT j.v FROM JSON_TABLE({{param}}, '$[*]' COLUMNS (v BIGINT PATH '$')) AS j)

-- fragment: not_paused(queue)
NOT EXISTS (SELECT 1 FROM rota_queue_pauses qp WHERE qp.queue = {{queue}})

-- fragment: iso(t)
-- A time as the ISO text the history entries hold (2026-01-02T03:04:05.000006Z).
DATE_FORMAT({{t}}, '%%Y-%%m-%%dT%%H:%%i:%%s.%%fZ')

-- fragment: claimed_columns
-- The claimed runs' columns, as Claimed takes them (due_at as epoch seconds; the last:
-- whether the run has saved steps).
SELECT id, task, args, kwargs, attempt, max_attempts, token, timeout, backoff, schedule,
       scheduled_for, started_at, lease_until, priority, UNIX_TIMESTAMP(due_at),
       EXISTS (SELECT 1 FROM rota_steps s WHERE s.run_id = rota_runs.id)
FROM rota_runs WHERE id IN %(_ids)s

-- fragment: claim_update
-- The claim's update of the ids its first step locked (%(_ids)s; %(_idlist)s in claim order):
-- the first %(start)s in claim order are started (the attempt counted), the rest held; one
-- token per run, by its place in the claim's order. The start is the lock's reading of the
-- clock (%(at)s, claim_columns); the lease counts from the update's own reading, never
-- earlier: the store hands the claimed rows back from the lock's columns and these values,
-- without reading them again, with the lease from the lock's reading (%(at)s + the lease: a
-- little shorter than stored when the token connection waited, so the worker renews early,
-- never late).
UPDATE rota_runs
SET status = 'running', owner = %(owner)s, token = %(token)s + FIND_IN_SET(id, %(_idlist)s) - 1,
    attempt = CASE WHEN FIND_IN_SET(id, %(_idlist)s) <= %(start)s AND attempt < 2147483647
                   THEN attempt + 1 ELSE attempt END,
    started_at = CASE WHEN FIND_IN_SET(id, %(_idlist)s) <= %(start)s THEN %(at)s END,
    lease_until = {now} + INTERVAL %(lease)s SECOND, misfire_at = NULL
WHERE id IN %(_ids)s

-- fragment: claim_ahead_update
-- The claim ahead's update: every run held, due within %(ahead)s seconds (times: as claim_update).
UPDATE rota_runs
SET status = 'running', owner = %(owner)s, token = %(token)s + FIND_IN_SET(id, %(_idlist)s) - 1,
    lease_until = {now} + INTERVAL %(lease)s SECOND, misfire_at = NULL, started_at = NULL
WHERE id IN %(_ids)s

-- fragment: claim_columns
-- What the claim's lock reads of each run, in claim order (hot_path._claim builds Claimed from
-- them and the values its update writes): the columns the claim does not change (due_at as
-- epoch seconds; whether the run has saved steps: a plain read, the subquery takes no lock),
-- then the clock once for the whole claim.
SELECT id, task, args, kwargs, attempt, max_attempts, timeout, backoff, schedule, scheduled_for, priority,
       UNIX_TIMESTAMP(due_at), EXISTS (SELECT 1 FROM rota_steps s WHERE s.run_id = rota_runs.id), {now}

-- fragment: claimable(due)
-- A plain run a claim may take: pending, not held, due by {{due}}, not past its misfire
-- deadline, not asked to cancel, without a limit or a rate (flow_*), its queue not paused.
status = 'pending' AND held = 0 AND pending_held = 0 AND due_at <= {{due}}
  AND (misfire_at IS NULL OR misfire_at >= {now})
  AND cancel_requested = 0
  AND limit_name IS NULL AND rate_name IS NULL
  AND {{not_paused(rota_runs.queue)}}

-- fragment: room(kind, name, key)
-- The room of a limit key ('l': its max less its running runs) or a rate key ('r': its max
-- less the starts in its window); a damaged max or per: no room.
CASE WHEN {{kind}} = 'l'
     THEN (SELECT l.max FROM rota_limits l WHERE l.name = {{name}} AND l.max BETWEEN 1 AND 1000000)
          - (SELECT count(*) FROM rota_runs x
             WHERE x.limit_name = {{name}} AND x.limit_key = {{key}} AND x.limit_status = 'running')
     ELSE (SELECT CASE WHEN t.max BETWEEN 1 AND 1000000 AND t.per BETWEEN 0.001 AND 31622400
                       THEN t.max - (SELECT count(*) FROM rota_rate_starts s
                          WHERE s.name = {{name}} AND s.`key` = {{key}}
                            AND s.started_at > {now} - INTERVAL t.per SECOND
                            AND s.started_at <= {now} + INTERVAL t.per SECOND) ELSE 0 END
           FROM rota_rates t WHERE t.name = {{name}}) END

-- fragment: kept(t)
-- A stored time kept as it is by an update that sets it only in some cases, except the zero
-- date, which DATETIME holds when a client without strict mode wrote it (a hand edit, an old
-- dump): under rota's strict sql_mode no expression may yield it (the row's column would be
-- NULL: error 1048, and the whole statement failed, e.g. the failure of a run set aside as
-- damaged). A zero date becomes the time of the update.
CASE WHEN {{t}} < '1000-01-01' THEN {now} ELSE {{t}} END

-- fragment: epoch(t)
-- A stored time as Unix seconds for a listing; the zero date (see kept) as a time no
-- datetime holds, so the listing names the field as corrupt (UNIX_TIMESTAMP gives NULL for
-- it, which read as "no time": a damaged finished_at showed as a run not finished).
CASE WHEN {{t}} < '1000-01-01' THEN -100000000000000 ELSE UNIX_TIMESTAMP({{t}}) END

-- fragment: step_upsert
-- A checkpoint written again (save_step, save_steps): a succeeded step is never overwritten;
-- a wait's row keeps its start (the wait's, not its resume's). A kept time that is the zero
-- date (a damaged row) becomes the time of the write (see kept): NULL would fail the statement.
ON DUPLICATE KEY UPDATE
    seq = IF(rota_steps.outcome = 'succeeded', rota_steps.seq, VALUES(seq)),
    attempt = IF(rota_steps.outcome = 'succeeded', rota_steps.attempt, VALUES(attempt)),
    started_at = IF(rota_steps.outcome IN ('succeeded', 'waiting'), {{kept(rota_steps.started_at)}}, VALUES(started_at)),
    finished_at = IF(rota_steps.outcome = 'succeeded', {{kept(rota_steps.finished_at)}}, VALUES(finished_at)),
    result = IF(rota_steps.outcome = 'succeeded', rota_steps.result, VALUES(result)),
    error = IF(rota_steps.outcome = 'succeeded', rota_steps.error, VALUES(error)),
    outcome = IF(rota_steps.outcome = 'succeeded', rota_steps.outcome, VALUES(outcome))
