-- rota schema, version 22 (SQLite): durable steps, parked runs, signals and progress
-- (issue 43). See the PostgreSQL migration of the same number.
CREATE TABLE rota_steps (
    run_id      INTEGER NOT NULL,
    name        TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    started_at  REAL    NOT NULL,
    finished_at REAL    NOT NULL,
    outcome     TEXT    NOT NULL,
    result      TEXT,
    error       TEXT,
    PRIMARY KEY (run_id, name)
) STRICT, WITHOUT ROWID;

CREATE TABLE rota_waits (
    run_id INTEGER NOT NULL PRIMARY KEY,
    token  INTEGER NOT NULL,
    kind   TEXT    NOT NULL,
    name   TEXT,
    until  REAL    NOT NULL,
    since  REAL    NOT NULL
) STRICT, WITHOUT ROWID;

CREATE TABLE rota_signals (
    run_id  INTEGER NOT NULL,
    name    TEXT    NOT NULL,
    payload TEXT    NOT NULL,
    sent_at REAL    NOT NULL,
    PRIMARY KEY (run_id, name)
) STRICT, WITHOUT ROWID;

CREATE TABLE rota_progress (
    run_id     INTEGER NOT NULL PRIMARY KEY,
    fraction   REAL    NOT NULL,
    message    TEXT,
    updated_at REAL    NOT NULL
) STRICT, WITHOUT ROWID;
