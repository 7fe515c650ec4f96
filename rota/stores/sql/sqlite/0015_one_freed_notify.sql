-- rota schema, version 15 (SQLite): nothing to change.
--
-- PostgreSQL's version 15 makes the trigger that wakes workers when a limited run stops
-- running fire once per transaction. SQLite wakes workers in process, with no trigger. This
-- file keeps the two backends' migration numbers equal (a test checks).
SELECT 1;
