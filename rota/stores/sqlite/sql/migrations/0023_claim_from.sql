-- rota schema, version 23 (SQLite): nothing to change. PostgreSQL's claim index is keyed
-- anew (see its 0023) because a transaction held open elsewhere keeps dead index entries
-- in the claim's way there; SQLite keeps no old row versions.
SELECT 1;
