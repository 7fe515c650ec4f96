"""The MySQL store's numbered migrations (rota/stores/mysql/sql/NNNN_*.sql), the server
version check and the privilege probe (a mixin of MySQLStore).

DDL commits implicitly in MySQL: a migration cannot be rolled back with the row that records
it. So each migration's statements run first and its version is recorded right after, and
one process migrates at a time (GET_LOCK on the database's name). A migration that failed
halfway leaves the statements before the failure applied and its version unrecorded: the
error names the migration and the statement, and `rota migrate` after the fix runs it again
(every statement of a migration here can be run again only where it says so). A migration
cut short (a connection cut, a server restart, a worker killed while it migrated) is run again
the same way: what it had made is already there (a table, column, index, trigger or row: the
"already exists" errors of _APPLIED) and is passed over."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ...config import redact_url as redact
from ...errors import DatabaseError, PermissionDenied, SchemaVersionError
from ..sqlstore.queries import latest_version, load_migrations
from .session import IDLE_IN_TRANSACTION, Pool, check_version

_LOCK_WAIT = 600  # seconds a migrating process waits for another one
# A statement of a migration whose version is not recorded that made what exists already: a
# table (1050), column (1060), index (1061), row (1062) or trigger (1359).
_APPLIED = (1050, 1060, 1061, 1062, 1359)


class MySQLMigrations:
    """`schema_version`, `migrate` and the checks made when the pool first opens."""

    url: str
    server: str | None
    max_packet: int | None = None  # the server's max_allowed_packet (session.translate)

    if TYPE_CHECKING:

        def _read(self) -> Any: ...

        def _tx(self) -> Any: ...

    def _check_server(self, pool: Pool) -> None:
        """The version check, on the pool's first connection: MariaDB 10.6+ or MySQL 8.0.4+.
        MariaDB spells the isolation variable tx_isolation before 11.1, MySQL transaction_isolation.
        On MariaDB every session is ended after IDLE_IN_TRANSACTION seconds idle in a transaction."""
        with pool.connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT VERSION(), @@max_allowed_packet")
            row = cur.fetchone()
            version, self.max_packet = str(row[0]), int(row[1])
            self.server = check_version(version, self.url)
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            if self.server.startswith("MariaDB"):  # (MySQL has no idle bound: docs/how-to/deploy.md)
                pool.bounds = f"SET SESSION idle_transaction_timeout = {IDLE_IN_TRANSACTION}"
                cur.execute(pool.bounds)

    def schema_version(self) -> tuple[int, int]:
        latest = latest_version(load_migrations("mysql"))
        with self._read() as s:
            if not s.q("migrations_table"):
                return 0, latest
            return int(s.q_text("SELECT coalesce(max(version), 0) FROM rota_migrations")[0][0]), latest

    def migrate(self, *, dry_run: bool = False) -> list[str]:
        migrations = load_migrations("mysql")
        with self._read() as s:
            got = s.q_text("SELECT GET_LOCK(CONCAT(DATABASE(), '.rota_migrate'), %(wait)s)", wait=_LOCK_WAIT)
            if not got or got[0][0] != 1:
                raise DatabaseError(f"another process kept migrating {redact(self.url)} for {_LOCK_WAIT} s")
            try:
                return self._migrate(s, migrations, dry_run)
            finally:
                s.q_text("SELECT RELEASE_LOCK(CONCAT(DATABASE(), '.rota_migrate'))")

    def _migrate(self, s: Any, migrations: list[Any], dry_run: bool) -> list[str]:
        if not dry_run:
            s.q_text(
                "CREATE TABLE IF NOT EXISTS rota_migrations (version INT NOT NULL PRIMARY KEY, "
                "name VARCHAR(255) NOT NULL, applied_at DATETIME(6) NOT NULL) ENGINE = InnoDB"
            )
        current = 0
        if s.q("migrations_table"):
            current = int(s.q_text("SELECT coalesce(max(version), 0) FROM rota_migrations")[0][0])
        latest = latest_version(migrations)
        if current > latest:
            raise SchemaVersionError(
                f"the database at {redact(self.url)} has rota schema version {current}, newer than the "
                f"{latest} this version of rota knows: upgrade rota on this host (never run older code "
                "against a migrated database)"
            )
        applied = []
        for m in [m for m in migrations if m.version > current]:
            applied.append(f"{m.version:04d}_{m.name}")
            if dry_run:
                continue
            for statement in statements(m.sql):
                try:
                    s.cur.execute(statement)
                except Exception as exc:
                    if _code(exc) in _APPLIED:
                        continue  # made by an earlier attempt cut short before the version was recorded
                    if _denied(exc):
                        raise PermissionDenied(
                            f"migration {m.version:04d}_{m.name} on {redact(self.url)} was refused: {exc}; the "
                            "user that migrates needs CREATE, ALTER, INDEX, DROP and TRIGGER on the database"
                        ) from exc
                    raise
            s.q_text(
                "INSERT INTO rota_migrations (version, name, applied_at) VALUES (%(v)s, %(n)s, UTC_TIMESTAMP(6))",
                v=m.version,
                n=m.name,
            )
        return applied


def _code(exc: Exception) -> object:
    args = getattr(exc, "args", None)
    return args[0] if args else None


def _denied(exc: Exception) -> bool:
    return _code(exc) in (1044, 1142, 1227, 1419)


_END = re.compile(r";\s*$")


def statements(script: str) -> Iterator[str]:
    """A migration's statements: each ends with `;` at the end of a line; a trigger's
    BEGIN ... END body keeps its own (it ends at the line `END;`)."""
    buffer: list[str] = []
    in_body = False
    for line in script.splitlines():
        if not buffer and (not line.strip() or line.lstrip().startswith("--")):
            continue
        buffer.append(line)
        if line.strip().upper() == "BEGIN":
            in_body = True
        if in_body:
            if line.strip().upper() == "END;":
                yield "\n".join(buffer)[:-1]
                buffer, in_body = [], False
        elif _END.search(line):
            yield _END.sub("", "\n".join(buffer))
            buffer = []
    if "".join(buffer).strip():
        raise DatabaseError(f"incomplete SQL statement in migration: {' '.join(buffer)[:80]!r}")
