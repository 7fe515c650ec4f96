-- rota schema, version 19 (PostgreSQL): the trace context a run was enqueued in (issue 44).
--
-- `traceparent` is the W3C traceparent of the span that was current when the run was
-- enqueued (rota.tracing, with the `otel` extra installed and a span recording), else NULL.
-- A worker that traces reads it at each attempt's start and links the attempt's span to it.
-- rota_history keeps rota_runs' columns in its order (schema 17), so it gets the column too,
-- and the view over both is made again to show it. Adding a NULL column rewrites no rows.
LOCK TABLE rota_runs IN ACCESS EXCLUSIVE MODE;
ALTER TABLE rota_runs ADD COLUMN traceparent text;
ALTER TABLE rota_history ADD COLUMN traceparent text;
CREATE OR REPLACE VIEW rota_runs_all AS
    SELECT * FROM rota_runs
    UNION ALL
    SELECT * FROM rota_history;
