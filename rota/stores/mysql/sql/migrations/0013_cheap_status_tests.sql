-- (SQLite's CHECK rewrite; nothing to change on MySQL)
SELECT 1;
