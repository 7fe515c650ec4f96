-- rota schema, version 22 (MySQL/MariaDB): the tables of durable steps (issue 43), as on
-- PostgreSQL and SQLite. The statements that use them are not on this store yet: it refuses
-- ctx.step and App.signal with one clear error (SqlDurable.durable_supported).
CREATE TABLE rota_steps (
    run_id      BIGINT       NOT NULL,
    name        VARCHAR(255) NOT NULL,
    seq         INT          NOT NULL,
    attempt     INT          NOT NULL,
    started_at  DATETIME(6)  NOT NULL,
    finished_at DATETIME(6)  NOT NULL,
    outcome     VARCHAR(16)  NOT NULL,
    result      LONGTEXT,
    error       LONGTEXT,
    PRIMARY KEY (run_id, name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE rota_waits (
    run_id BIGINT       NOT NULL PRIMARY KEY,
    token  BIGINT       NOT NULL,
    kind   VARCHAR(16)  NOT NULL,
    name   VARCHAR(255),
    until  DATETIME(6)  NOT NULL,
    since  DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE rota_signals (
    run_id  BIGINT       NOT NULL,
    name    VARCHAR(255) NOT NULL,
    payload LONGTEXT     NOT NULL,
    sent_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (run_id, name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE rota_progress (
    run_id     BIGINT      NOT NULL PRIMARY KEY,
    fraction   DOUBLE      NOT NULL,
    message    VARCHAR(500),
    updated_at DATETIME(6) NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
