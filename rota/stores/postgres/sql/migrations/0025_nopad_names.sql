-- rota schema, version 25 (PostgreSQL): nothing to change. MySQL/MariaDB's tables convert to a
-- binary NO PAD collation (see its 0025): 'a' and 'a ' were equal there; this store's text
-- comparisons were exact already.
SELECT 1;
