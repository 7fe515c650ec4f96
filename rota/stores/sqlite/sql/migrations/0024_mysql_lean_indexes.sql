-- rota schema, version 24 (SQLite): nothing to change. MySQL/MariaDB's indexes that held
-- `status` for every run key virtual columns that are NULL outside what each index is for
-- (see its 0024): this store's partial indexes were that already.
SELECT 1;
