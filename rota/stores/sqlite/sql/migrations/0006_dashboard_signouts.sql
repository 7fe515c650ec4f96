-- rota schema, version 6 (SQLite): signed-out dashboard sessions (rota.web.sessions).
--
-- A sign-out is remembered here, not in the dashboard's memory, so that it survives a
-- restart and holds for every dashboard on this database. `nonce` is the session's random
-- nonce (never the token); `expires_at` is when the session would have expired anyway
-- (Unix seconds): the row is useless after it and deleted at a later sign-out.
CREATE TABLE rota_dashboard_signouts (
    nonce      TEXT    NOT NULL PRIMARY KEY,
    expires_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

CREATE INDEX rota_dashboard_signouts_expiry ON rota_dashboard_signouts (expires_at);
