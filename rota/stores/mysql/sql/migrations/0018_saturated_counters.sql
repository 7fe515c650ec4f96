-- (counters saturate since 0001 on MySQL)
SELECT 1;
