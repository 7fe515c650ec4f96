-- rota schema, version 5 (SQLite): reserved for another branch of the third wave.
-- Branch `ticks` needed a migration and was given number 6; this placeholder keeps the
-- numbers without a gap on that branch alone. Delete it when a real 0005 is merged.
SELECT 1;
