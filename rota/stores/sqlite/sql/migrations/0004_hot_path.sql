-- rota schema, version 4 (SQLite): nothing to change.
--
-- PostgreSQL's version 4 trims the indexes a claim and a finish write to: there, an UPDATE
-- that changes any indexed column writes a new entry into every index. SQLite rewrites only
-- the entries of the indexes whose columns the UPDATE changes, so its indexes stay. This
-- file keeps the two backends' migration numbers equal (a test checks).
SELECT 1;
