-- rota schema, version 17 (SQLite): nothing to change.
--
-- PostgreSQL's version 17 moves succeeded one-off runs to a history table, so that the table
-- the claims walk stays as small as the active work: there a finish writes a new row version
-- and leaves the old one dead until VACUUM. SQLite updates a row in place and frees its pages
-- at once, and its drain does not slow with the runs it keeps (W5 at 10,000,000 runs,
-- bench/results/issue19-history-2core-2026-12-01.md), so its runs stay in one table. This
-- file keeps the two backends' migration numbers equal (a test checks).
SELECT 1;
