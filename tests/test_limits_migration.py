"""Schema version 10 (flow control): a populated database of schema version 4 migrates in
place; its runs keep working and limits hold on it afterwards."""

from __future__ import annotations

from typing import Any

import pytest

import rota
from rota.stores.base import NewRun, Outcome
from rota.stores.postgres import store as pg_module
from rota.stores.sqlite import store as sqlite_module
from rota.stores.sqlstore.queries import load_migrations

from .conftest import make_app
from .test_hot_path import before_flow_control, migrations_of

# Not on MySQL/MariaDB (conftest.STORES, not WITH_MYSQL): that store shipped with all its migrations
# at once, so no MySQL database was ever at version 4 (docs/how-to/deploy.md).


def test_a_populated_version_4_database_migrates_and_limits_hold_on_it(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module: Any = pg_module if db_url.startswith("postgresql") else sqlite_module
    dialect = "postgres" if module is pg_module else "sqlite"
    with monkeypatch.context() as patch:
        patch.setattr(migrations_of(module), "load_migrations", lambda _d: load_migrations(dialect)[:4])
        patch.setattr(module, "load_queries", before_flow_control(module.load_queries))
        old = make_app(db_url)
        assert old.migrate()[-1] == "0004_hot_path"
        old.store.insert_runs([NewRun(task="limited", args="[1]") for _ in range(3)] + [NewRun(task="t")])
        (running,) = old.store.claim("old-worker", 1, None, 30.0)
        old.close()
    app = make_app(db_url)
    try:
        assert "0010_flow_limits" in app.migrate()

        @app.task(limit=1, name="limited")
        def limited(n: int) -> None: ...

        app.prepare()
        store: Any = app.store
        # runs enqueued before the migration have no limit: the plain claim takes them
        assert len(store.claim("new-worker", 10, None, 30.0)) == 3
        assert store.finish([Outcome(running.id, running.token, "succeeded", result="1")]) == {running.id}
        for _ in range(3):
            limited.enqueue(2)
        assert len(store.claim("new-worker", 10, None, 30.0)) == 1  # the limit holds
        assert [(i.name, i.running, i.waiting) for i in store.list_limits()] == [("limited", 1, 2)]
    finally:
        app.close()


def test_the_plain_claim_index_leaves_limited_and_rated_runs_out(app: rota.App) -> None:
    app.migrate()
    with app.store._read() as s:  # type: ignore[attr-defined]
        if app.store.url.startswith("postgresql"):
            rows = s.q_text("SELECT pg_get_indexdef('rota_runs_claim_from'::regclass)")  # (schema 23)
        else:
            rows = s.q_text("SELECT sql FROM sqlite_master WHERE name = 'rota_runs_claim'")
    assert "limit_name IS NULL" in str(rows[0][0]) and "rate_name IS NULL" in str(rows[0][0])
