-- rota schema, version 22 (SQLite): nothing to change. PostgreSQL's claim index is keyed
-- anew (see its 0022) because a transaction held open elsewhere keeps dead index entries
-- in the claim's way there; SQLite keeps no old row versions.
SELECT 1;
