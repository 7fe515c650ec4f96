CREATE TABLE rota_dashboard_signouts (
    nonce      VARCHAR(255) NOT NULL PRIMARY KEY,
    expires_at BIGINT       NOT NULL,
    KEY rota_dashboard_signouts_expiry (expires_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
