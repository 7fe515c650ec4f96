"""Named SQL: both backends define the same queries and numbered migrations."""

from __future__ import annotations

from rota.stores.sqlstore.queries import load_migrations, load_queries

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


def test_both_backends_define_the_same_named_queries() -> None:
    sqlite = set(load_queries("sqlite", ":now"))
    postgres = set(load_queries("postgres", "now()"))
    assert sqlite - SQLITE_ONLY == postgres - POSTGRES_ONLY
    assert sqlite >= SQLITE_ONLY and postgres >= POSTGRES_ONLY


def test_both_backends_have_the_same_migration_numbers() -> None:
    sqlite = [(m.version, m.name) for m in load_migrations("sqlite")]
    postgres = [(m.version, m.name) for m in load_migrations("postgres")]
    assert sqlite == postgres and sqlite[0] == (1, "initial")
