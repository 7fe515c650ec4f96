"""Named SQL: every backend defines the same queries and numbered migrations."""

from __future__ import annotations

from rota.stores.queries import load_migrations, load_queries

# SQLite has no sequences: a claim reads the token counter and bumps it only when it claimed.
# Its finish runs one prepared UPDATE per outcome (executemany: no RETURNING), so it reads the
# runs its outcomes still hold first (finish_holding); PostgreSQL's finish returns them. Its
# refuse (one UPDATE per run: no DELETE inside) takes a refused rated run's start out of the
# rate's log in a statement before it (refuse_unlog; disown_unlog for disown); PostgreSQL's refuse
# and disown do it in a CTE.
SQLITE_ONLY = {"next_token", "take_token", "finish_holding", "refuse_unlog", "disown_unlog"}
# PostgreSQL only: the flow claim's planner setting (no bitmap scans while walking the keys
# near the head) and its one-statement take of limit keys after the advisory locks (SQLite,
# one writer with nothing changing meanwhile, takes them step by step).
POSTGRES_ONLY = {"flow_walk_plan", "flow_take_limits", "move_history", "history_estimate"}  # the last two: schema 17


# MySQL/MariaDB orchestrates as SQLite does (a token counter, finish_holding, the unlog
# statements), so it defines SQLite's names, and these of its own: the claim's first step that
# locks the due runs' ids (no UPDATE ... RETURNING), what PostgreSQL's triggers do to rota_runs
# itself (a MySQL trigger may not update its own table: ended_runs, release_dependents,
# cancel_dependents), the change probe instead of NOTIFY (data_version), the flow claim's lock
# and the migrations table's probe.
MYSQL_ONLY = {
    "claim_ids", "claim_in_queues_ids", "claim_ahead_ids", "claim_ahead_in_queues_ids",
    "ended_runs", "release_dependents", "cancel_dependents", "data_version", "flow_lock", "migrations_table",
}  # fmt: skip


def test_every_backend_defines_the_same_named_queries() -> None:
    sqlite = set(load_queries("sqlite", ":now"))
    postgres = set(load_queries("postgres", "now()"))
    mysql = set(load_queries("mysql", "UTC_TIMESTAMP(6)"))
    assert sqlite - SQLITE_ONLY == postgres - POSTGRES_ONLY
    assert sqlite >= SQLITE_ONLY and postgres >= POSTGRES_ONLY
    assert mysql - MYSQL_ONLY == sqlite and mysql >= MYSQL_ONLY


def test_every_backend_has_the_same_migration_numbers() -> None:
    sqlite = [(m.version, m.name) for m in load_migrations("sqlite")]
    postgres = [(m.version, m.name) for m in load_migrations("postgres")]
    mysql = [(m.version, m.name) for m in load_migrations("mysql")]
    assert sqlite == postgres == mysql and sqlite[0] == (1, "initial")
