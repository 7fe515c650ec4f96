CREATE TABLE rota_queue_pauses (
    queue     VARCHAR(255) NOT NULL PRIMARY KEY,
    paused_at DATETIME(6)  NOT NULL,
    paused_by VARCHAR(255)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE rota_tasks (
    task        VARCHAR(255) NOT NULL PRIMARY KEY,
    declared_at DATETIME(6)  NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

ALTER TABLE rota_schedules ADD COLUMN notify_on LONGTEXT;
