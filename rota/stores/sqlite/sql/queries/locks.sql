-- SQLite queries: named locks (rota.locks over the run store).
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- name: lock_acquire
INSERT INTO rota_locks AS l (name, owner, token, acquired_at, expires_at)
VALUES (:name, :owner, 1, {now}, {now} + :ttl)
ON CONFLICT (name) DO UPDATE
SET owner = excluded.owner, token = l.token + 1, acquired_at = excluded.acquired_at,
    expires_at = excluded.expires_at
WHERE l.owner IS NULL OR l.expires_at IS NULL OR l.expires_at <= {now}
RETURNING token

-- name: lock_renew
UPDATE rota_locks SET expires_at = {now} + :ttl
WHERE name = :name AND owner = :owner AND token = :token AND expires_at > {now}
RETURNING token

-- name: lock_release
UPDATE rota_locks SET owner = NULL, expires_at = NULL
WHERE name = :name AND owner = :owner AND token = :token
RETURNING token

-- name: list_locks
SELECT name, owner, token, acquired_at, expires_at,
       owner IS NOT NULL AND expires_at > {now}
FROM rota_locks ORDER BY name
