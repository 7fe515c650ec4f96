-- (PostgreSQL's wake-up trigger; MySQL has no NOTIFY: workers poll)
SELECT 1;
