"""Schema 0008 (uniqueness windows, runs after others): a populated version-4 database
migrates in place on both stores; its runs keep working and gain the new controls."""

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


def _at_version_4(monkeypatch: pytest.MonkeyPatch, url: str) -> tuple[rota.App, str]:
    module: Any = pg_module if url.startswith("postgresql") else sqlite_module
    dialect = "postgres" if module is pg_module else "sqlite"
    with monkeypatch.context() as patch:
        patch.setattr(migrations_of(module), "load_migrations", lambda _d: load_migrations(dialect)[:4])
        patch.setattr(module, "load_queries", before_flow_control(module.load_queries))
        old = make_app(url)
        assert old.migrate()[-1] == "0004_hot_path"
        store: Any = old.store
        store.insert_runs([NewRun(task="t") for _ in range(3)])
        claimed = store.claim("old-worker", 2, None, 30.0)
        with store._tx() as s:  # ended as a version-4 rota did (today's finish reads later tables)
            s.q_text(
                "UPDATE rota_runs SET status = 'succeeded', result = '1', finished_at = started_at,"
                f" lease_until = NULL WHERE id = {int(claimed[0].id)}"
            )
        with store._tx() as s:  # a keyed run as the old code wrote it (no rota_unique yet)
            now = "now()" if dialect == "postgres" else "0"
            s.q_text(
                "INSERT INTO rota_runs (id, task, key, scheduled_for, due_at, created_at) "
                f"VALUES (100, 't', 'k', {now}, {now}, {now})"
            )
    return old, dialect


def test_a_populated_version_4_database_migrates_to_flow_deps(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    old, dialect = _at_version_4(monkeypatch, db_url)
    before = old.store.count_by_status()
    old.close()
    app = make_app(db_url)

    @app.task(name="t")
    def t() -> None: ...

    try:
        applied = app.migrate()
        assert "0008_flow_deps" in applied and applied == [
            f"{m.version:04d}_{m.name}" for m in load_migrations(dialect)[4:]
        ]
        assert app.store.count_by_status() == before
        assert all(r.waiting_on == 0 and not r.queued for r in app.list_runs())
        # the old keyed pending run still deduplicates, with or without a window
        keyed = next(r for r in app.list_runs() if r.key == "k")
        assert t.options(key="k", unique_for=60).enqueue().id == keyed.id
        # an old running run can be a parent: its success releases the new child
        running = app.list_runs(status="running")[0]
        child = t.options(after=[running.id]).enqueue()
        assert child.refresh().queued and child.refresh().waiting_on == 1
        token = running.token
        assert token is not None
        app.store.finish([Outcome(int(running.id), token, "succeeded", result="2")])
        assert not child.refresh().queued and child.refresh().waiting_on == 0
    finally:
        app.close()
