-- (PostgreSQL's hot-path statements; nothing to change on MySQL)
SELECT 1;
