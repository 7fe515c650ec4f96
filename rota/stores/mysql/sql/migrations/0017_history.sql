-- (PostgreSQL's history table; MySQL keeps succeeded runs in rota_runs)
SELECT 1;
