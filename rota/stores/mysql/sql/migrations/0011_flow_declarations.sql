CREATE TABLE rota_task_flow (
    task       VARCHAR(255) NOT NULL PRIMARY KEY,
    spec       LONGTEXT     NOT NULL,
    updated_at DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
