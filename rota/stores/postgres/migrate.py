"""PostgreSQL's numbered migrations (rota/stores/postgres/sql/migrations/NNNN_*.sql), recorded in
rota_migrations: the schema version check and `migrate`, one migrating process at a time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...config import redact_url as redact
from ...errors import SchemaVersionError
from ..sqlstore.queries import latest_version, load_migrations
from .session import _check_can_migrate


class PgMigrations:
    """The migration methods of PostgresStore (a mixin: `_read`, `_tx` and `url` are the store's)."""

    url: str

    if TYPE_CHECKING:  # the store's own (no stub here may shadow them at run time)

        def _read(self) -> Any: ...

        def _tx(self) -> Any: ...

    def schema_version(self) -> tuple[int, int]:
        latest = latest_version(load_migrations("postgres"))
        with self._read() as s:
            if not s.q_text("SELECT to_regclass('rota_migrations')")[0][0]:
                return 0, latest
            return int(s.q_text("SELECT coalesce(max(version), 0) FROM rota_migrations")[0][0]), latest

    def migrate(self, *, dry_run: bool = False) -> list[str]:
        migrations = load_migrations("postgres")
        with self._tx() as s:
            # Another process may be migrating (or a migration may take long): wait for it.
            s.q_text("SET LOCAL lock_timeout = 0")
            s.q_text("SET LOCAL statement_timeout = 0")
            s.q_text("SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.rota_migrate'))")
            if not s.q_text("SELECT to_regclass('rota_migrations')")[0][0]:
                if not dry_run:
                    _check_can_migrate(s, migrations)  # a clear message before the first CREATE
                s.q_text(
                    "CREATE TABLE IF NOT EXISTS rota_migrations (version integer PRIMARY KEY, "
                    "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
                )
            current = int(s.q_text("SELECT coalesce(max(version), 0) FROM rota_migrations")[0][0])
            if current > latest_version(migrations):
                raise SchemaVersionError(
                    f"the database at {redact(self.url)} has rota schema version {current}, newer "
                    f"than the {latest_version(migrations)} this version of rota knows: upgrade rota on this "
                    "host (never run older code against a migrated database)"
                )
            pending = [m for m in migrations if m.version > current]
            if pending and not dry_run:
                _check_can_migrate(s, pending)
            applied = []
            for m in pending:
                applied.append(f"{m.version:04d}_{m.name}")
                if not dry_run:
                    s.cur.execute(m.sql.encode())
                    s.q_text(
                        "INSERT INTO rota_migrations (version, name) VALUES (%(v)s, %(n)s)",
                        v=m.version,
                        n=m.name,
                    )
            return applied
