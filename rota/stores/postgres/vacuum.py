"""What holds back PostgreSQL's cleanup of rota's tables, for `/metrics` and `rota status`.

Every claim and finish leaves a dead row version behind; vacuum may remove it only once no
transaction that could still see it remains. One old transaction anywhere in the database (a
session idle in a transaction, a long report, a prepared transaction, a replication slot or
a standby with hot_standby_feedback) holds that horizon back for every table: dead rows pile
up in rota_runs, and the claim's index scan walks over them. So rota reports the age of the
oldest such transaction and its own tables' dead rows, and a worker warns once when
`autovacuum` is off. Read-only queries on the statistics views, at scrape or `status` time
only: nothing on the claim path. A role without pg_monitor (or pg_read_all_stats) sees only
its own sessions in pg_stat_activity: monitor with one that has it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

log = logging.getLogger("rota.store")

# The oldest transaction that holds back cleanup in this database: its age in transactions
# (age(xid)) and, where the server knows when it began, in seconds. Our own session excluded.
OLDEST_XMIN = """
WITH holders(xids, began) AS (
    SELECT age(backend_xmin), xact_start FROM pg_stat_activity
     WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
       AND (datname = current_database() OR datname IS NULL)
    UNION ALL
    SELECT age(transaction), prepared FROM pg_prepared_xacts WHERE database = current_database()
    UNION ALL
    SELECT greatest(age(xmin), age(catalog_xmin)), NULL FROM pg_replication_slots
     WHERE coalesce(xmin, catalog_xmin) IS NOT NULL
)
SELECT max(xids), extract(epoch FROM now() - min(began))::float8, current_setting('autovacuum') = 'on'
  FROM holders
"""
# rota's own tables in the schema this store uses: dead and live row versions.
DEAD_TUPLES = """
SELECT relname, n_dead_tup, n_live_tup FROM pg_stat_user_tables
 WHERE schemaname = current_schema() AND left(relname, 5) = 'rota_' ORDER BY relname
"""


_WARNED: set[str] = set()  # database URLs this process warned about


@dataclass
class VacuumHealth:
    """The numbers `/metrics` and `rota status` show (see the module's docstring)."""

    oldest_xmin_xids: int = 0  # 0 (and under 1 s): nothing holds cleanup back; a snapshot taken
    # before any new transaction id was handed out is 0 transactions old however long it is held
    oldest_xmin_seconds: float = 0.0
    autovacuum: bool = True
    dead_tuples: dict[str, int] = field(default_factory=dict)
    live_tuples: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "oldest_xmin_age_xids": self.oldest_xmin_xids,
            "oldest_xmin_age_seconds": round(self.oldest_xmin_seconds, 3),
            "autovacuum": self.autovacuum,
            "dead_tuples": dict(self.dead_tuples),
        }

    def line(self) -> str:
        """One line for `rota status`."""
        dead = ", ".join(f"{t} {n}" for t, n in self.dead_tuples.items() if n) or "none"
        held = (
            f"oldest transaction holding back cleanup {self.oldest_xmin_seconds:.0f} s "
            f"({self.oldest_xmin_xids} transactions) old"
            if self.oldest_xmin_xids or self.oldest_xmin_seconds >= 1.0
            else "nothing holds back cleanup"
        )
        return f"{held}; dead rows: {dead}" + ("" if self.autovacuum else "; autovacuum is OFF")


class PgVacuum:
    """The mixin of PostgresStore: `vacuum_health()` and the start-up autovacuum warning."""

    if TYPE_CHECKING:
        url: str

        def _read(self) -> Any: ...  # PostgresStore's

    def vacuum_health(self) -> VacuumHealth:
        with self._read() as s:
            xids, seconds, autovacuum = s.q_text(OLDEST_XMIN)[0]
            tables = s.q_text(DEAD_TUPLES)
        return VacuumHealth(
            int(xids or 0),
            float(seconds or 0.0),
            bool(autovacuum),
            {str(t): int(dead or 0) for t, dead, _ in tables},
            {str(t): int(live or 0) for t, _, live in tables},
        )

    def warn_autovacuum(self) -> None:
        """At worker start: one warning line when autovacuum is off, once per database
        URL and process (several workers in one process say it once)."""
        with self._read() as s:
            on = s.q_text("SELECT current_setting('autovacuum') = 'on'")[0][0]
        if not on and self.url not in _WARNED:
            _WARNED.add(self.url)
            log.warning(
                "autovacuum is off on this PostgreSQL server: dead rows will pile up in rota's tables "
                "and claims slow down; turn it on, or VACUUM rota_runs regularly"
            )
