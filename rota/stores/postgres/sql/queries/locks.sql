-- PostgreSQL queries: named locks (rota.locks over the run store).
-- (Conventions: see the head of enqueue.sql. Loaded with every .sql file here: rota/stores/sqlstore/queries.py.)

-- name: lock_acquire
INSERT INTO rota_locks AS l (name, owner, token, acquired_at, expires_at)
VALUES (%(name)s, %(owner)s, 1, {now}, {now} + make_interval(secs => %(ttl)s))
ON CONFLICT (name) DO UPDATE
SET owner = EXCLUDED.owner, token = l.token + 1, acquired_at = EXCLUDED.acquired_at,
    expires_at = EXCLUDED.expires_at
WHERE l.owner IS NULL OR l.expires_at IS NULL OR l.expires_at <= {now}
RETURNING token

-- name: lock_renew
UPDATE rota_locks SET expires_at = {now} + make_interval(secs => %(ttl)s)
WHERE name = %(name)s AND owner = %(owner)s AND token = %(token)s AND expires_at > {now}
RETURNING token

-- name: lock_release
UPDATE rota_locks SET owner = NULL, expires_at = NULL
WHERE name = %(name)s AND owner = %(owner)s AND token = %(token)s
RETURNING token

-- name: list_locks
SELECT name, owner, token, acquired_at, expires_at,
       owner IS NOT NULL AND expires_at > {now}
FROM rota_locks ORDER BY name
