-- Named queries of the MySQL store: the worker's hot path (claims, starts, heartbeats,
-- finishes, hand-backs, rescues). No UPDATE ... RETURNING: a claim selects the due
-- runs FOR UPDATE SKIP LOCKED (claim_ids, with what the claim hands back), takes one token
-- per run from the counter, then updates those ids (claim), in one transaction (hot_path.py).

-- name: claim_ids
-- The due plain runs in claim order, locked; runs another claimer locked are skipped. Their
-- columns (claim_columns): the claim does not read them again.
{{claim_columns}}
FROM rota_runs FORCE INDEX (rota_runs_claim)
WHERE {{claimable({now})}}
ORDER BY priority DESC, due_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: claim_in_queues_ids
{{claim_columns}}
FROM rota_runs FORCE INDEX (rota_runs_claim)
WHERE {{claimable({now})}} AND queue IN {{queues}}
ORDER BY priority DESC, due_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: claim_ahead_ids
{{claim_columns}}
FROM rota_runs FORCE INDEX (rota_runs_claim)
WHERE {{claimable({now} + INTERVAL %(ahead)s SECOND)}}
ORDER BY priority DESC, due_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: claim_ahead_in_queues_ids
{{claim_columns}}
FROM rota_runs FORCE INDEX (rota_runs_claim)
WHERE {{claimable({now} + INTERVAL %(ahead)s SECOND)}} AND queue IN {{queues}}
ORDER BY priority DESC, due_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: next_token
-- The counter's row, locked until the claim commits: tokens are never handed out twice. The
-- next token and the counter as stored; NULL when the counter is damaged (at its column's
-- maximum, past it, or below 0: no claim could take a token): see token_rebase.
SELECT CASE WHEN value BETWEEN 0 AND 9223372036854775807 - 1000000 THEN value + 1 END, value
FROM rota_counters WHERE name = 'token' FOR UPDATE

-- name: token_rebase
-- A damaged token counter (rota/quarantine.py) starts again past every token a run holds or
-- held, so fencing still holds (as SQLite's).
SELECT coalesce(max(token), 0) + 1 FROM rota_runs
WHERE token BETWEEN 0 AND 9223372036854775807 - 1000000

-- name: take_token
UPDATE rota_counters SET value = %(token)s WHERE name = 'token'

-- name: take_tokens
-- A claim's %(n)s tokens in one statement, committed on its own on the store's token
-- connection (the counter's row is locked for this statement only, not to the claim's
-- commit); its new value back in the OK packet (LAST_INSERT_ID(expr): the cursor's lastrowid). A
-- damaged counter (see next_token) is left as it is and the lastrowid is 0: the store rebases it.
UPDATE rota_counters
SET value = CASE WHEN value BETWEEN 0 AND 9223372036854775807 - 1000000 THEN LAST_INSERT_ID(value + %(n)s)
                 ELSE value END
WHERE name = 'token'

-- name: claim
-- transition: claim
-- The ids claim_ids locked (%(_ids)s; %(_idlist)s in claim order): the first %(start)s in
-- claim order are started (the attempt counted), the rest held; one token per run, by its
-- place in the claim's order.
{{claim_update}}

-- name: claim_in_queues
-- transition: claim
{{claim_update}}

-- name: claim_ahead
-- transition: claim_ahead
-- The runs due within %(ahead)s seconds, claimed held by an idle worker just before their time.
{{claim_ahead_update}}

-- name: claim_ahead_in_queues
-- transition: claim_ahead
{{claim_ahead_update}}

-- name: start
-- transition: start
-- A held run whose handler started %(ago)s seconds ago: the attempt counted, started_at set.
SELECT id FROM rota_runs
WHERE id = %(id)s AND token = %(token)s AND status = 'running' AND started_at IS NULL
  AND cancel_requested = 0
FOR UPDATE
;
UPDATE rota_runs SET attempt = attempt + (attempt < 2147483647), started_at = {now} - INTERVAL %(ago)s SECOND
WHERE id IN %(_ids)s

-- name: heartbeat
-- transition: heartbeat
SELECT id, cancel_requested FROM rota_runs
WHERE id = %(id)s AND token = %(token)s AND status = 'running' FOR UPDATE
;
UPDATE rota_runs SET lease_until = {now} + INTERVAL %(lease)s SECOND WHERE id IN %(_ids)s
;
SELECT cancel_requested FROM rota_runs WHERE id IN %(_ids)s

-- name: finish_holding
-- The outcomes' runs still running, with their tokens, locked in id order: the finish then
-- writes exactly the outcomes whose token still holds; and whether a run's end changes
-- others (an exclusive schedule's slot, dependents: hot_path.settle), so that most
-- finishes settle nothing.
SELECT id, token, (exclusive <> 0 AND held = 0) OR has_dependents <> 0 FROM rota_runs
WHERE id IN %(ids)s AND status = 'running'
ORDER BY id FOR UPDATE

-- name: finish_succeeded
-- transition: finish
-- The batch's plain successes in one statement (%(rows)s: a JSON array of [id, token, result,
-- started]); started: a held run started that many seconds ago whose start was not written.
UPDATE rota_runs r
JOIN JSON_TABLE(%(rows)s, '$[*]' COLUMNS (id BIGINT PATH '$[0]', token BIGINT PATH '$[1]',
                                          result LONGTEXT PATH '$[2]', started DOUBLE PATH '$[3]')) AS b
  ON r.id = b.id AND r.token = b.token
SET r.attempt = CASE WHEN b.started IS NOT NULL AND r.started_at IS NULL THEN r.attempt + 1 ELSE r.attempt END,
    r.started_at = coalesce(r.started_at, {now} - INTERVAL b.started SECOND),
    r.status = 'succeeded', r.result = b.result, r.error = NULL, r.finished_at = {now}, r.lease_until = NULL
WHERE r.status = 'running'

-- name: finish
-- transition: finish, retry
-- A retry (status pending) of a run whose cancellation was requested ends cancelled. (MySQL
-- assigns left to right: started_at and attempt are read before they are set, status last.)
UPDATE rota_runs
SET result = %(result)s, error = %(error)s, lease_until = NULL,
    finished_at = CASE WHEN %(status)s = 'pending' AND cancel_requested = 0 THEN NULL ELSE {now} END,
    attempt = CASE WHEN %(started)s IS NOT NULL AND started_at IS NULL THEN attempt + 1 ELSE attempt END,
    started_at = coalesce(started_at, {now} - INTERVAL %(started)s SECOND),
    due_at = CASE WHEN %(status)s = 'pending' THEN {now} + INTERVAL %(retry_in)s SECOND ELSE {{kept(due_at)}} END,
    attempts = CASE WHEN %(history)s IS NULL OR NOT JSON_VALID(attempts) THEN attempts
                    ELSE JSON_ARRAY_APPEND(attempts, '$', JSON_COMPACT(%(history)s)) END,
    refused_at = NULL,
    status = CASE WHEN %(status)s = 'pending' AND cancel_requested <> 0 THEN 'cancelled' ELSE %(status)s END
WHERE id = %(id)s AND token = %(token)s AND status = 'running'

-- name: lock_finished_schedules
-- (finish_holding locks the runs in id order; the schedules' rows are locked by the trigger)
SELECT %(ids)s

-- name: finished_parents
SELECT 1 FROM rota_runs WHERE id IN %(ids)s AND has_dependents <> 0 LIMIT 1

-- name: ended_runs
-- After a statement that may have ended runs (hot_path.settle): the ended ones, with what
-- their end does to other runs (an exclusive schedule's slot, dependents).
SELECT id, status, schedule, exclusive <> 0 AND held = 0, has_dependents <> 0, task, finished_at
FROM rota_runs
WHERE id IN %(ids)s AND status NOT IN ('pending', 'running')
ORDER BY id

-- name: release_dependents
-- transition: release_dependents
-- A parent succeeded: each dependent waits for one parent fewer; the last makes it due (no
-- earlier than the parent's finish).
UPDATE rota_runs c
JOIN rota_deps d ON d.child = c.id AND d.parent = %(parent)s
JOIN rota_runs p ON p.id = d.parent
SET c.scheduled_for = CASE WHEN c.waiting_on = 1 THEN GREATEST(c.scheduled_for, coalesce(p.finished_at, {now}))
                           ELSE {{kept(c.scheduled_for)}} END,
    c.due_at = CASE WHEN c.waiting_on = 1 THEN GREATEST(c.due_at, coalesce(p.finished_at, {now})) ELSE {{kept(c.due_at)}} END,
    c.after_depth = CASE WHEN c.waiting_on = 1 THEN 0 ELSE c.after_depth END,
    c.held = c.waiting_on > 1,
    c.waiting_on = c.waiting_on - 1
WHERE c.status = 'pending' AND c.waiting_on > 0

-- name: cancel_dependents
-- transition: cancel_dependents
-- A parent ended otherwise: its pending dependents are cancelled (and theirs, in turn).
SELECT c.id FROM rota_deps d JOIN rota_runs c ON c.id = d.child
WHERE d.parent = %(parent)s AND c.status = 'pending'
ORDER BY c.id FOR UPDATE
;
UPDATE rota_runs c JOIN rota_runs p ON p.id = %(parent)s
SET c.status = 'cancelled', c.held = 0, c.waiting_on = 0,
    c.finished_at = coalesce(p.finished_at, {now}),
    c.error = JSON_OBJECT('type', 'DependencyFailed',
                          'message', CONCAT('parent run ', p.id, ' (', p.task, ') ended ', p.status),
                          'traceback', NULL)
WHERE c.id IN %(_ids)s
;
SELECT id FROM rota_runs WHERE id IN %(_ids)s

-- name: handler_outcome
SELECT status, token FROM rota_runs WHERE id = %(id)s

-- name: finish_transactional
-- transition: finish
SELECT id FROM rota_runs WHERE id = %(id)s AND token = %(token)s AND status = 'running' FOR UPDATE
;
UPDATE rota_runs
SET attempt = CASE WHEN started_at IS NULL THEN attempt + 1 ELSE attempt END,
    started_at = coalesce(started_at, {now}),
    status = 'succeeded', result = %(result)s, error = NULL, finished_at = {now}, lease_until = NULL
WHERE id IN %(_ids)s

-- name: hand_back
-- transition: hand_back
-- Pending again at once for another worker (see SQLite's): a held run as it was, a started
-- one with its attempt given back and recorded in history as handed back; cancellation
-- requested: cancelled. (Assignments run left to right: the history first, status last.)
SELECT id FROM rota_runs WHERE id = %(id)s AND token = %(token)s AND status = 'running' FOR UPDATE
;
UPDATE rota_runs
SET attempts = CASE WHEN started_at IS NULL OR cancel_requested <> 0 OR NOT JSON_VALID(attempts) THEN attempts
                    ELSE JSON_ARRAY_APPEND(attempts, '$', JSON_OBJECT(
        'attempt', attempt, 'worker', owner,
        'started_at', {{iso(started_at)}},
        'finished_at', {{iso({now})}},
        'status', 'handed back',
        'error', JSON_OBJECT('type', 'HandedBack', 'message', %(reason)s))) END,
    error = CASE WHEN cancel_requested <> 0
                 THEN JSON_OBJECT('type', 'Cancelled', 'message', CONCAT('cancelled on request (', %(reason)s, ')'),
                                  'traceback', NULL)
                 ELSE error END,
    attempt = CASE WHEN started_at IS NULL OR cancel_requested <> 0 THEN attempt ELSE attempt - 1 END,
    due_at = CASE WHEN started_at IS NULL THEN GREATEST(due_at, {now}) ELSE {now} END, lease_until = NULL,
    refused_at = CASE WHEN started_at IS NULL THEN {{kept(refused_at)}} END,
    finished_at = CASE WHEN cancel_requested <> 0 THEN {now} END,
    started_at = CASE WHEN cancel_requested <> 0 THEN started_at END,
    status = CASE WHEN cancel_requested <> 0 THEN 'cancelled' ELSE 'pending' END
WHERE id IN %(_ids)s
;
SELECT id, status FROM rota_runs WHERE id IN %(_ids)s

-- name: fence
-- transition: fence
-- A stopping worker's last write for a run whose handler still runs: its lease shortened to
-- %(lease)s seconds, and the note the rescue reads.
SELECT id FROM rota_runs WHERE id = %(id)s AND token = %(token)s AND status = 'running' FOR UPDATE
;
UPDATE rota_runs SET lease_until = {now} + INTERVAL %(lease)s SECOND, error = %(error)s WHERE id IN %(_ids)s

-- name: refuse_unlog
-- Before refuse, in its transaction: a refused rated run never started its handler, so its
-- start leaves its window's log (one row).
DELETE FROM rota_rate_starts WHERE id = (
    SELECT l.id FROM rota_runs r JOIN rota_rate_starts l
        ON l.name = r.rate_name AND l.`key` = r.rate_key AND l.started_at = r.started_at
    WHERE r.id = %(id)s AND r.token = %(token)s AND r.status = 'running' AND r.rate_name IS NOT NULL
    LIMIT 1)

-- name: refuse
-- transition: refuse
-- A run of a task its worker does not register, given back for a worker that does (see the
-- SQLite file). (Assignments run left to right: refused_at is read before it is set.)
SELECT id FROM rota_runs WHERE id = %(id)s AND token = %(token)s AND status = 'running' FOR UPDATE
;
UPDATE rota_runs
SET finished_at = CASE WHEN cancel_requested <> 0 OR refused_at < {now} - INTERVAL %(grace)s SECOND THEN {now} END,
    status = CASE WHEN cancel_requested <> 0 THEN 'cancelled'
                  WHEN refused_at < {now} - INTERVAL %(grace)s SECOND THEN 'failed'
                  ELSE 'pending' END,
    attempt = CASE WHEN started_at IS NULL THEN attempt ELSE attempt - 1 END,
    started_at = NULL, lease_until = NULL,
    due_at = GREATEST(due_at, {now} + INTERVAL LEAST(%(delay_max)s, GREATEST(%(delay_min)s,
                 TIMESTAMPDIFF(MICROSECOND, coalesce(refused_at, {now}), {now}) / 2e6)) SECOND),
    refused_at = coalesce(refused_at, {now}),
    error = CASE WHEN cancel_requested <> 0
                 THEN JSON_OBJECT('type', 'Cancelled', 'message', 'cancelled on request', 'traceback', NULL)
                 ELSE %(error)s END
WHERE id IN %(_ids)s
;
SELECT id, status FROM rota_runs WHERE id IN %(_ids)s

-- name: disown_unlog
-- Before disown, in its transaction: one logged start per rated run that a claim whose reply
-- was lost started (see refuse_unlog). Runs of one claim share their start time: a group of n
-- such runs takes the group's first n log rows (one row each, not the same row n times).
SELECT s.id FROM rota_rate_starts s JOIN (
    SELECT l.id, v.n,
           row_number() OVER (PARTITION BY l.name, l.`key`, l.started_at ORDER BY l.id) AS k
    FROM (SELECT rate_name, rate_key, started_at, count(*) AS n FROM rota_runs
          WHERE status = 'running' AND owner = %(owner)s AND lease_until > {now}
            AND token NOT IN {{ids(%(tokens)s)}}
            AND rate_name IS NOT NULL AND started_at IS NOT NULL
          GROUP BY rate_name, rate_key, started_at) v
    JOIN rota_rate_starts l
        ON l.name = v.rate_name AND l.`key` = v.rate_key AND l.started_at = v.started_at
) w ON w.id = s.id
WHERE w.k <= w.n
FOR UPDATE
;
DELETE FROM rota_rate_starts WHERE id IN %(_ids)s

-- name: disown
-- transition: disown
-- A claim whose reply this worker never got: the runs it owns with a token it does not hold,
-- whose lease still runs, given back as they were before that claim.
SELECT id FROM rota_runs
WHERE status = 'running' AND owner = %(owner)s AND lease_until > {now}
  AND token NOT IN {{ids(%(tokens)s)}}
ORDER BY id FOR UPDATE
;
UPDATE rota_runs
SET attempt = CASE WHEN started_at IS NULL OR attempt <= 0 THEN attempt ELSE attempt - 1 END,
    started_at = NULL, lease_until = NULL,
    finished_at = CASE WHEN cancel_requested <> 0 THEN {now} END,
    error = CASE WHEN cancel_requested <> 0
                 THEN JSON_OBJECT('type', 'Cancelled', 'message', 'cancelled on request', 'traceback', NULL)
                 ELSE error END,
    status = CASE WHEN cancel_requested <> 0 THEN 'cancelled' ELSE 'pending' END
WHERE id IN %(_ids)s
;
SELECT id, status FROM rota_runs WHERE id IN %(_ids)s

-- name: any_expired
-- A lease run out, or one no worker can have granted (see lease_damaged): each an index probe.
SELECT 1 FROM DUAL
WHERE EXISTS (SELECT 1 FROM rota_runs FORCE INDEX (rota_runs_lease) WHERE status = 'running' AND lease_until < {now})
   OR EXISTS (SELECT 1 FROM rota_runs FORCE INDEX (rota_runs_lease) WHERE status = 'running' AND lease_until IS NULL)
   OR EXISTS (SELECT 1 FROM rota_runs FORCE INDEX (rota_runs_lease)
              WHERE status = 'running' AND lease_until > {now} + INTERVAL 366 DAY)

-- name: lease_damaged
-- transition: lease_damaged
-- Running runs whose lease no worker can have granted (see SQLite's): none (NULL) or more
-- than 366 days past now. Ended failed as damaged (DamagedRow), never retried.
SELECT id FROM rota_runs FORCE INDEX (rota_runs_lease)
WHERE status = 'running' AND (lease_until IS NULL OR lease_until > {now} + INTERVAL 366 DAY)
ORDER BY id LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
;
UPDATE rota_runs
SET error = CONCAT('{"type":"DamagedRow","message":', JSON_QUOTE(CONCAT('damaged row: a running run whose lease ',
                          CASE WHEN lease_until IS NULL THEN 'is NULL (none)'
                               ELSE CONCAT('ends at ', {{iso(lease_until)}}, ', more than 366 days past now') END,
                          ' (no worker grants a lease longer than a year): no rescue would ever take it',
                          '; not retried (repair the row and `rota retry` it, or delete it)')),
        ',"traceback":null}'),  -- compact, as rota writes it (`rota runs --damaged`)
    status = 'failed', finished_at = {now}, lease_until = NULL
WHERE id IN %(_ids)s
;
SELECT id, task, status, owner, error FROM rota_runs WHERE id IN %(_ids)s ORDER BY id

-- name: rescue
-- transition: rescue
-- Runs whose lease ran out (see SQLite's): a held run pending again with no attempt counted
-- (its history says the worker was lost holding it if it was due before the lease ran out),
-- a started one retried if attempts remain, else failed; cancellation requested: cancelled.
-- The lost rows are locked (SKIP LOCKED: a run being finished is not lost); the error is
-- computed first, from the row as it was; assignments run left to right.
SELECT id FROM rota_runs FORCE INDEX (rota_runs_lease)
WHERE status = 'running' AND lease_until < {now}
ORDER BY lease_until LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
;
UPDATE rota_runs
SET error = CASE
        WHEN started_at IS NOT NULL AND error LIKE CONCAT('{"type": "WorkerStopped", "token": ', token, ',%%')
        THEN JSON_OBJECT('type', 'WorkerStopped',
            'message', CONCAT('worker ', coalesce(owner, '?'), ' stopped while the handler still ran (',
                              CASE WHEN error LIKE '%%"at_once": true%%' THEN 'it was stopped at once by a second signal'
                                   ELSE 'it outlived the shutdown timeout' END,
                              '): its process was ended before the lease expired at ',
                              {{iso(lease_until)}},
                              ' (attempt ', attempt, ' of ', max_attempts, ')'),
            'traceback', NULL)
        ELSE JSON_OBJECT('type', 'WorkerLost',
            'message', CONCAT('worker ', coalesce(owner, '?'), ' was lost: its lease expired at ',
                              {{iso(lease_until)}},
                              CASE WHEN started_at IS NULL
                                   THEN ' while it held the run, before its start was recorded (no attempt counted)'
                                   ELSE CONCAT(' (attempt ', attempt, ' of ', max_attempts, ')') END),
            'traceback', NULL) END,
    attempts = CASE WHEN NOT JSON_VALID(attempts) THEN attempts
        WHEN started_at IS NULL AND due_at > lease_until THEN attempts
        WHEN started_at IS NULL
        THEN JSON_ARRAY_APPEND(attempts, '$', JSON_OBJECT(
            'attempt', attempt + 1, 'worker', owner, 'token', token, 'started_at', NULL,
            'held', JSON_EXTRACT('true', '$'),
            'finished_at', {{iso({now})}},
            'status', 'lost', 'error', JSON_COMPACT(error)))
        WHEN cancel_requested = 0 AND attempt < max_attempts
        THEN JSON_ARRAY_APPEND(attempts, '$', JSON_OBJECT(
            'attempt', attempt, 'worker', owner,
            'started_at', {{iso(started_at)}},
            'finished_at', {{iso({now})}},
            'status', 'lost', 'error', JSON_COMPACT(error)))
        ELSE attempts END,
    due_at = CASE WHEN started_at IS NULL THEN GREATEST(due_at, {now}) ELSE {now} END,
    refused_at = CASE WHEN started_at IS NULL THEN {{kept(refused_at)}} END,
    finished_at = CASE WHEN cancel_requested = 0 AND (started_at IS NULL OR attempt < max_attempts) THEN NULL
                       ELSE {now} END,
    status = CASE WHEN cancel_requested <> 0 THEN 'cancelled'
                  WHEN started_at IS NULL OR attempt < max_attempts THEN 'pending' ELSE 'failed' END,
    lease_until = NULL
WHERE id IN %(_ids)s
;
SELECT id, task, status, owner, error FROM rota_runs WHERE id IN %(_ids)s ORDER BY id

-- name: poll_state
-- The first due run by the due index, in its order (min(due_at) read every pending run
-- through another index: 60 ms with 10,000 pending).
SELECT {now},
       (SELECT due_at FROM rota_runs FORCE INDEX (rota_runs_due)
        WHERE status = 'pending' AND held = 0 AND pending_held = 0 AND (misfire_at IS NULL OR misfire_at >= {now})
          AND {{not_paused(rota_runs.queue)}}
        ORDER BY due_at LIMIT 1),
       (SELECT min(t) FROM (
            SELECT min(next_run_at) AS t FROM rota_schedules WHERE active <> 0 AND paused = 0
            UNION ALL
            SELECT min(misfire_pending) FROM rota_runs WHERE misfire_pending < {now}) AS x)

-- name: poll_state_in_queues
SELECT {now},
       (SELECT due_at FROM rota_runs FORCE INDEX (rota_runs_due)
        WHERE status = 'pending' AND held = 0 AND pending_held = 0 AND (misfire_at IS NULL OR misfire_at >= {now})
          AND queue IN {{queues}}
          AND {{not_paused(rota_runs.queue)}}
        ORDER BY due_at LIMIT 1),
       (SELECT min(t) FROM (
            SELECT min(next_run_at) AS t FROM rota_schedules WHERE active <> 0 AND paused = 0
            UNION ALL
            SELECT min(misfire_pending) FROM rota_runs WHERE misfire_pending < {now}) AS x)

-- name: now
SELECT {now}
