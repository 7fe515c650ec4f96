-- Concurrency limits and rate limits (see the PostgreSQL migration).
ALTER TABLE rota_runs ADD COLUMN limit_name VARCHAR(255), ADD COLUMN limit_key VARCHAR(512),
                      ADD COLUMN rate_name VARCHAR(255), ADD COLUMN rate_key VARCHAR(512);

CREATE TABLE rota_limits (
    name       VARCHAR(255) NOT NULL PRIMARY KEY,
    max        INT          NOT NULL CHECK (max > 0),
    updated_at DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
CREATE TABLE rota_rates (
    name       VARCHAR(255) NOT NULL PRIMARY KEY,
    max        INT          NOT NULL CHECK (max > 0),
    per        DOUBLE       NOT NULL CHECK (per > 0),
    updated_at DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
CREATE TABLE rota_rate_starts (
    id         BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name       VARCHAR(255) NOT NULL,
    `key`      VARCHAR(512) NOT NULL,
    started_at DATETIME(6)  NOT NULL,
    KEY rota_rate_starts_window (name, `key`(255), started_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE INDEX rota_runs_limit_waiting ON rota_runs (limit_name, limit_key(255), status, held, priority DESC, due_at, id);
CREATE INDEX rota_runs_rate_waiting ON rota_runs (rate_name, rate_key(255), status, held, priority DESC, due_at, id);
