-- Uniqueness windows and runs that wait for others (see the PostgreSQL migration). The
-- release and cancellation of dependents is the store's (settle_dependents after the
-- statement that ended a parent): a trigger may not update the table that fired it.
CREATE TABLE rota_unique (
    task       VARCHAR(255) NOT NULL,
    `key`      VARCHAR(512) NOT NULL,
    run_id     BIGINT,
    created_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (task, `key`),
    KEY rota_unique_run (run_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE rota_deps (
    parent BIGINT NOT NULL,
    child  BIGINT NOT NULL,
    PRIMARY KEY (parent, child),
    KEY rota_deps_child (child)
) ENGINE = InnoDB;

ALTER TABLE rota_runs ADD COLUMN waiting_on INT NOT NULL DEFAULT 0,
                      ADD COLUMN has_dependents TINYINT NOT NULL DEFAULT 0,
                      ADD COLUMN after_depth INT NOT NULL DEFAULT 0;

CREATE TRIGGER rota_run_pruned AFTER DELETE ON rota_runs FOR EACH ROW
BEGIN
    DELETE FROM rota_deps WHERE child = OLD.id;
    DELETE FROM rota_unique WHERE run_id = OLD.id;
END;
