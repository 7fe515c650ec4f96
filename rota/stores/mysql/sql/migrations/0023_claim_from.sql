-- rota schema, version 23 (MySQL/MariaDB): nothing to change. PostgreSQL's claim index is
-- keyed anew (see its 0023) so that a claim can start where the last one ended, past the dead
-- index entries a transaction held open elsewhere keeps there; this store's claim is its own.
SELECT 1;
