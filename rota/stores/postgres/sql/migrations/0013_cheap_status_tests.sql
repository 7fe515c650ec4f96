-- rota schema, version 13 (PostgreSQL): nothing to change.
--
-- SQLite's version 13 rewrites 0012's `status IN (...)` index predicates as ORs (there, an IN
-- list of three constants builds a temporary b-tree on every update). PostgreSQL tests an IN
-- list as an array in place, so its indexes stay. This file keeps the two backends' migration
-- numbers equal (a test checks).
SELECT 1;
