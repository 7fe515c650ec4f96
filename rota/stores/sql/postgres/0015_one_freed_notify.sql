-- rota schema, version 15 (PostgreSQL): a limited run that stops running wakes the workers
-- once per transaction, not once per run.
--
-- 0010's rota_limit_freed was an AFTER trigger FOR EACH ROW: a finish of 100 limited runs
-- called its PL/pgSQL function 100 times to queue the same NOTIFY (which PostgreSQL then
-- folds into one), about a fifth of the finish statement's time in a limited drain. It is now
-- a BEFORE trigger whose WHEN clause is false once the transaction has notified: the function
-- runs for the first such row of a transaction and marks the transaction (a setting local to
-- it, valued with the schema, so a transaction that ends runs in two schemas notifies both);
-- the rows after it test the mark and call nothing. A rolled-back savepoint takes its NOTIFY
-- and its mark back together. Every statement that ends or returns a running run still wakes
-- the workers through the trigger, whichever it is (finish, hand-back, rescue, cancel).
DROP TRIGGER rota_limit_freed ON rota_runs;
CREATE OR REPLACE FUNCTION rota_limit_freed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('rota' || CASE
        WHEN current_schema() = 'public' THEN ''
        WHEN octet_length(current_schema()) <= 58 THEN ':' || current_schema()
        ELSE ':' || md5(current_schema()) END, 'run');
    PERFORM set_config('rota.limit_freed', current_schema(), true);
    RETURN NEW;
END $$;
CREATE TRIGGER rota_limit_freed BEFORE UPDATE OF status ON rota_runs
    FOR EACH ROW WHEN (OLD.status = 'running' AND NEW.status <> 'running' AND OLD.limit_name IS NOT NULL
                       AND current_setting('rota.limit_freed', true) IS DISTINCT FROM current_schema())
    EXECUTE FUNCTION rota_limit_freed();
