"""Schema version 4 (issue 12 target 3): fewer index entries per claim and finish on
PostgreSQL. A database at version 3 with runs in every status migrates in place and keeps
working; heartbeats can be HOT updates; reads that lost their index still answer."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

import rota
from rota.stores.base import NewRun, Outcome
from rota.stores.postgres import migrate as _pg_migrate
from rota.stores.postgres import store as pg_module
from rota.stores.sqlite import store as sqlite_module
from rota.stores.sqlstore.queries import load_migrations

from .conftest import STORES, WITH_MYSQL, make_app, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


STATUSES = {"pending", "running", "succeeded", "failed", "skipped", "cancelled"}


def _at_version_3(monkeypatch: pytest.MonkeyPatch, url: str) -> rota.App:
    """An app whose database was migrated by a rota that knew versions 1-3 only."""
    module: Any = pg_module if url.startswith("postgresql") else sqlite_module
    dialect = "postgres" if module is pg_module else "sqlite"
    with monkeypatch.context() as patch:
        patch.setattr(migrations_of(module), "load_migrations", lambda _d: load_migrations(dialect)[:3])
        patch.setattr(module, "load_queries", before_flow_control(module.load_queries))
        old = make_app(url)
        assert old.migrate() == ["0001_initial", "0002_worker_faults", "0003_operate"]
    # That rota's claim did not know misfire_at (schema version 6): strip it from ours.
    return old


def migrations_of(module: Any) -> Any:
    """The module whose load_migrations a store's migrate() calls (PostgreSQL's: _pg_migrate)."""
    return _pg_migrate if module is pg_module else module


def before_misfire_deadlines(claim: str) -> str:
    """The claim as a rota before schema version 5 wrote it: no misfire deadline."""
    claim = re.sub(r",\s*misfire_at = NULL", "", claim)
    return "\n".join(line for line in claim.splitlines() if "misfire_at >=" not in line)


def before_paused_queues(sql: str) -> str:
    """A statement without the paused-queues guard (schema version 21), nor the claim's
    saved-steps column (rota_steps: version 22)."""
    sql = re.sub(r",\s*EXISTS \(SELECT 1 FROM rota_steps s WHERE s\.run_id = \w+\.id\)", "", sql)
    sql = re.sub(r"AND coalesce\(\w+\.queue <> ALL \(ARRAY\(SELECT queue FROM rota_queue_pauses\)\), true\)", "", sql)
    return re.sub(r"AND NOT EXISTS \(SELECT 1 FROM rota_queue_pauses qp WHERE qp\.queue = \w+\.queue\)", "", sql)


def before_flow_control(load: Any) -> Any:
    """The queries of a rota at schema version 4 (what these tests migrate from): the claims
    had no misfire deadline (version 5) and no filter for limited and rated runs (version 10);
    those columns do not exist yet; and it read its runs from one table (the view of both
    tables is version 17's, the paused queues version 21's)."""

    def queries(*args: Any) -> dict[str, str]:
        flow = "AND limit_name IS NULL AND rate_name IS NULL"
        old = {
            name: before_paused_queues("\n".join(ln for ln in sql.splitlines() if flow not in ln)).replace(
                "rota_runs_all", "rota_runs"
            )
            for name, sql in load(*args).items()
        }
        for claim in ("claim", "claim_in_queues"):
            old[claim] = before_misfire_deadlines(old[claim])
        return old

    return queries


def _runs_in_every_status(store: Any) -> dict[str, int]:
    """One run per status (plus a keyed pending one and a running one left to expire)."""
    ids = store.insert_runs([NewRun(task="t") for _ in range(5)] + [NewRun(task="t", key="k")])
    store.insert_runs([NewRun(task="t", status="skipped")])
    claimed = store.claim("old-worker", 4, None, 30.0)
    # Ended with plain SQL, as a version-3 rota did: today's finish statements may read
    # tables of later migrations (rota_deps, 0010) that a version-3 database lacks.
    with store._tx() as s:
        for c, status in zip(claimed, ("succeeded", "failed", "cancelled"), strict=False):
            s.q_text(
                f"UPDATE rota_runs SET status = '{status}', finished_at = started_at, lease_until = NULL"
                f" WHERE id = {int(c.id)}"
            )
    with store._read() as s:
        rows = s.q_text("SELECT status, count(*) FROM rota_runs GROUP BY status")
    counts = {str(status): int(n) for status, n in rows}
    assert set(counts) == STATUSES and len(ids) == 6
    return counts


# (an older schema built with SQLite's or PostgreSQL's own migrations; MySQL's start at 21)
@pytest.mark.parametrize("db_url", STORES, indirect=True)
def test_a_version_3_database_with_runs_in_every_status_migrates_and_keeps_working(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = _at_version_3(monkeypatch, db_url)
    before = _runs_in_every_status(old.store)
    old.close()
    app = make_app(db_url)
    try:
        assert app.migrate()[:1] == ["0004_hot_path"]  # and any later ones
        assert app.store.count_by_status() == before
        for status, n in before.items():
            assert len(app.list_runs(status=status)) == n
        assert len(app.list_runs(task="t")) == sum(before.values())
        store: Any = app.store
        running = int(app.list_runs(status="running")[0].id)
        assert store.heartbeat([(running, running_token(store, running))], 30.0)[0] == {running}
        claimed = store.claim("new-worker", 10, None, 30.0)  # the two pending ones
        assert len(claimed) == 2
        done = store.finish([Outcome(c.id, c.token, "succeeded", result="2") for c in claimed])
        assert done == {c.id for c in claimed}
        store.insert_runs([NewRun(task="t", key="k")])  # the key is free again: its run ended
        assert app.stats()["runs"]["pending"] == 1
    finally:
        app.close()


def running_token(store: Any, run_id: int) -> int:
    with store._read() as s:
        return int(s.q_text(f"SELECT token FROM rota_runs WHERE id = {int(run_id)}")[0][0])


@pytest.mark.postgres
def test_postgres_indexes_leave_the_lease_out_and_running_runs_out_of_task_and_schedule(pg_url: str) -> None:
    app = make_app(pg_url)
    try:
        app.migrate()
        with app.store._read() as s:  # type: ignore[attr-defined]
            rows = s.q_text(
                "SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid) FROM pg_index"
                " WHERE indrelid = 'rota_runs'::regclass"
            )
        definitions = dict(rows)
        assert not [name for name, text in definitions.items() if "lease_until" in text]
        # every index but the primary key leaves some statuses out; task and schedule leave
        # out the running runs, so a claim writes no entry there
        assert {name for name, text in definitions.items() if " WHERE " not in text} == {"rota_runs_pkey"}
        for name in ("rota_runs_task", "rota_runs_schedule"):
            assert "status <> 'running'" in definitions[name]
    finally:
        app.close()


@pytest.mark.postgres
def test_postgres_rescue_finds_an_expired_lease_through_the_active_index(pg_url: str) -> None:
    app = make_app(pg_url)
    try:
        store: Any = app.store
        store.insert_runs([NewRun(task="t", max_attempts=2), NewRun(task="t")])
        claimed = store.claim("lost", 2, None, 0.01)
        with store._read() as s:
            s.q_text("SELECT pg_sleep(0.05)")
        rescued = {r.id: (r.status, r.owner) for r in store.rescue()}
        assert rescued == {claimed[0].id: ("pending", "lost"), claimed[1].id: ("failed", "lost")}
        error: Any = app.get_run(str(claimed[1].id)).error
        assert "was lost" in error["message"]
    finally:
        app.close()


@pytest.mark.postgres
def test_postgres_lists_a_task_s_and_a_schedule_s_runs_in_every_status_newest_first(pg_url: str) -> None:
    app = make_app(pg_url)
    try:
        store: Any = app.store
        new = [NewRun(task="t", schedule="s") for _ in range(5)] + [NewRun(task="u")]
        ids = [run_id for run_id, _ in store.insert_runs(new)]
        claimed = store.claim("w", 3, None, 30.0)  # the three oldest run
        store.finish([Outcome(claimed[1].id, claimed[1].token, "succeeded", result="1")])
        newest_first = [str(i) for i in reversed(ids[:5])]
        assert [r.id for r in app.list_runs(task="t")] == newest_first
        assert [r.id for r in app.list_runs(schedule="s")] == newest_first
        assert [r.id for r in app.list_runs(task="t", limit=2)] == newest_first[:2]
        assert [r.id for r in app.list_runs(task="t", before=ids[3], limit=2)] == newest_first[2:4]
        assert [r.status for r in app.list_runs(task="t")] == ["pending"] * 2 + ["running", "succeeded", "running"]
        assert [r.id for r in app.list_runs(task="t", status="running")] == [str(ids[2]), str(ids[0])]
        assert [r.id for r in app.list_runs(task="u")] == [str(ids[5])]
    finally:
        app.close()
