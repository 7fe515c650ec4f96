-- rota schema, version 8 (PostgreSQL): uniqueness windows and runs that wait for others.
--
-- rota_unique: the newest run created per (task, key). `.options(key=, unique_for=)` upserts
-- its row in ONE statement (INSERT ... ON CONFLICT DO UPDATE): the row lock taken by the
-- upsert serializes concurrent enqueues of one key, so check-and-insert is atomic without an
-- advisory lock, in the store's transaction or in a caller's.
--
-- rota_deps: (parent, child) edges of `.options(after=[...])`. A child waits `pending` with
-- `held` (the claim and the poll already leave held runs out) and `waiting_on` = the number
-- of parents not yet succeeded. A parent gets `has_dependents`; the trigger below fires only
-- for such runs, when their status becomes final, whatever statement did it (a worker's
-- finish, a transactional finish, a rescue, a cancel), in that statement's transaction:
--   transition: release_dependents  (parent succeeded: waiting_on - 1; at 0 the child is
--                                    due, at the later of its own time and the parent's end)
--   transition: cancel_dependents   (parent failed, cancelled or skipped: the child ends
--                                    cancelled, error naming the parent; cascades, since the
--                                    child's own status change fires this trigger again)

CREATE TABLE rota_unique (
    task       text        NOT NULL,
    key        text        NOT NULL,
    run_id     bigint,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (task, key)
);

CREATE TABLE rota_deps (
    parent bigint NOT NULL,
    child  bigint NOT NULL,
    PRIMARY KEY (parent, child)
);
CREATE INDEX rota_deps_child ON rota_deps (child);

-- Constant defaults: no table rewrite, however many runs there are.
ALTER TABLE rota_runs ADD COLUMN waiting_on integer NOT NULL DEFAULT 0;
ALTER TABLE rota_runs ADD COLUMN has_dependents boolean NOT NULL DEFAULT false;
-- How many waiting runs deep a dependent is (0 if no parent was waiting): after= refuses
-- chains deeper than rota.flow.MAX_CHAIN, so a failure's cascade stays within the
-- trigger's nesting limits (max_stack_depth here, SQLITE_MAX_TRIGGER_DEPTH there).
ALTER TABLE rota_runs ADD COLUMN after_depth integer NOT NULL DEFAULT 0;

CREATE FUNCTION rota_run_settled() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    at timestamptz := coalesce(NEW.finished_at, now());
BEGIN
    IF NEW.status = 'succeeded' THEN
        UPDATE rota_runs c
        SET waiting_on = c.waiting_on - 1,
            held = c.waiting_on > 1,
            after_depth = CASE WHEN c.waiting_on = 1 THEN 0 ELSE c.after_depth END,
            scheduled_for = CASE WHEN c.waiting_on = 1 THEN greatest(c.scheduled_for, at) ELSE c.scheduled_for END,
            due_at = CASE WHEN c.waiting_on = 1 THEN greatest(c.due_at, at) ELSE c.due_at END
        WHERE c.id IN (SELECT d.child FROM rota_deps d WHERE d.parent = NEW.id)
          AND c.status = 'pending' AND c.waiting_on > 0;
        IF FOUND THEN
            PERFORM pg_notify('rota' || CASE
                WHEN current_schema() = 'public' THEN ''
                WHEN octet_length(current_schema()) <= 58 THEN ':' || current_schema()
                ELSE ':' || md5(current_schema()) END, 'run');
        END IF;
    ELSE
        UPDATE rota_runs c
        SET status = 'cancelled', held = false, waiting_on = 0, finished_at = at,
            error = json_build_object(
                'type', 'DependencyFailed',
                'message', 'parent run ' || NEW.id || ' (' || NEW.task || ') ended ' || NEW.status,
                'traceback', NULL)::text
        WHERE c.id IN (SELECT d.child FROM rota_deps d WHERE d.parent = NEW.id)
          AND c.status = 'pending';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER rota_run_settled AFTER UPDATE OF status ON rota_runs FOR EACH ROW
    WHEN (NEW.has_dependents
          AND OLD.status IN ('pending', 'running')
          AND NEW.status NOT IN ('pending', 'running'))
    EXECUTE FUNCTION rota_run_settled();

-- Pruning a run (retention, `rota prune`) drops its edges as a child and its key's record,
-- once per DELETE statement: a pruned run can no longer wait for anything nor be returned.
CREATE INDEX rota_unique_run ON rota_unique (run_id);

CREATE FUNCTION rota_runs_pruned() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM rota_deps d USING gone g WHERE d.child = g.id;
    DELETE FROM rota_unique u USING gone g WHERE u.run_id = g.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER rota_runs_pruned AFTER DELETE ON rota_runs REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION rota_runs_pruned();
