-- rota schema, version 13 (SQLite): status tests that build no temporary b-tree.
--
-- SQLite evaluates an `x IN (a, b, c)` of three or more constants by building a temporary
-- b-tree. An UPDATE that changes `status` tests every partial index whose predicate names it,
-- and the table's CHECK, for each row it writes; a finish is one execution per run. 0012's
-- `status IN ('failed', 'cancelled', 'skipped')` and 0001's CHECK cost a claim and finish
-- cycle about 13 us per run, a third of it (bench/results/issue18-w1-2core-2026-12-01.md).
-- An OR of equalities is a few comparisons.
--
-- The indexes first. A listing's `status = :status` bound to one of these statuses implies
-- the OR, so SQLite uses them (the store's listing also repeats the predicate:
-- rota/stores/_sql_base.py, UNHAPPY_TERM).
DROP INDEX IF EXISTS rota_runs_unhappy_task;
CREATE INDEX rota_runs_unhappy_task ON rota_runs (task, status, id)
    WHERE (status = 'failed' OR status = 'cancelled' OR status = 'skipped');
DROP INDEX IF EXISTS rota_runs_unhappy_schedule;
CREATE INDEX rota_runs_unhappy_schedule ON rota_runs (schedule, status, id)
    WHERE schedule IS NOT NULL AND (status = 'failed' OR status = 'cancelled' OR status = 'skipped');
-- Then the CHECK, last. SQLite cannot ALTER a CHECK; an equivalent one is put in the table's
-- definition in place, as https://sqlite.org/lang_altertable.html allows for a change that no
-- stored row can contradict. The index changes above bumped the schema's version, so every
-- other connection reads the new definition at its next statement; RESET (writable_schema
-- off, and the schema read again) makes this one read it too. A definition not worded as 0001
-- wrote it is left as it is. With SQLite's defensive mode on (rota never turns it on), the
-- UPDATE is refused and the migration rolls back whole.
PRAGMA writable_schema = ON;
UPDATE sqlite_master
SET sql = replace(sql,
    'CHECK (status IN (''pending'', ''running'', ''succeeded'', ''failed'', ''skipped'', ''cancelled''))',
    'CHECK (status = ''pending'' OR status = ''running'' OR status = ''succeeded'''
    || ' OR status = ''failed'' OR status = ''skipped'' OR status = ''cancelled'')')
WHERE type = 'table' AND name = 'rota_runs';
PRAGMA writable_schema = RESET;
