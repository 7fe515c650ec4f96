-- rota schema, version 19 (SQLite): the trace context a run was enqueued in (issue 44).
--
-- `traceparent` is the W3C traceparent of the span that was current when the run was
-- enqueued (rota.tracing, with the `otel` extra installed and a span recording), else NULL.
-- A worker that traces reads it at each attempt's start and links the attempt's span to it.
ALTER TABLE rota_runs ADD COLUMN traceparent TEXT;
