"""Run counts by status without a scan (issue 14 item 6): trigger-kept on SQLite, exact
active counts plus planner estimates for final statuses on a big PostgreSQL table."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import rota
from rota.stores.base import NewRun, Outcome

from .conftest import WITH_MYSQL, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def _scanned(store: Any) -> dict[str, int]:
    """The truth, by a full scan."""
    runs = "rota_runs_all" if store.url.startswith("postgresql") else "rota_runs"  # + rota_history (schema 17)
    with store._read() as s:
        return {status: int(n) for status, n in s.q_text(f"SELECT status, count(*) FROM {runs} GROUP BY status")}


def _cheap(app: rota.App) -> dict[str, int]:
    stats = app.stats()
    assert stats["runs_counted"] == "exact" and stats["runs_estimated"] == []
    return {status: n for status, n in stats["runs"].items() if n}


def test_counts_stay_right_through_enqueue_claim_finish_cancel_and_prune(app: rota.App) -> None:
    store: Any = app.store
    store.insert_runs([NewRun(task="t") for _ in range(6)])
    store.insert_runs([NewRun(task="t", key="k")])  # the keyed path (insert_run)
    store.insert_runs([NewRun(task="t", key="k")])  # a duplicate: nothing inserted
    assert _cheap(app) == _scanned(store) == {"pending": 7}
    claimed = store.claim("w", 4, None, 30.0)
    assert _cheap(app) == _scanned(store) == {"pending": 3, "running": 4}
    store.finish([
        Outcome(claimed[0].id, claimed[0].token, "succeeded", result="1"),
        Outcome(claimed[1].id, claimed[1].token, "failed", error='{"type":"E","message":"m"}', history="{}"),
        Outcome(claimed[2].id, claimed[2].token, "pending", retry_in=60, history="{}"),
    ])  # fmt: skip
    assert _cheap(app) == _scanned(store) == {"pending": 4, "running": 1, "succeeded": 1, "failed": 1}
    app.cancel(int(claimed[3].id))  # running: only requested
    pending = app.list_runs(status="pending", limit=1)[0]
    app.cancel(pending.id)
    assert _cheap(app) == _scanned(store) == {"pending": 3, "running": 1, "succeeded": 1, "failed": 1, "cancelled": 1}
    assert store.prune("succeeded", -60, 100) == 1
    assert store.prune("cancelled", -60, 100) == 1
    assert _cheap(app) == _scanned(store) == {"pending": 3, "running": 1, "failed": 1}
    assert store.count_by_status() == _scanned(store)


def test_stats_say_the_counts_are_exact_and_list_every_status(app: rota.App) -> None:
    app.task(name="t")(lambda: None).enqueue()
    stats = app.store.stats()
    assert stats["runs"] == {"pending": 1, "running": 0, "succeeded": 0, "failed": 0, "skipped": 0, "cancelled": 0}
    assert stats["runs_counted"] == "exact"


@pytest.mark.postgres
def test_a_big_postgres_table_estimates_final_statuses_and_counts_active_runs_exactly(pg_url: str) -> None:
    from .conftest import make_app

    app = make_app(pg_url)
    try:
        store: Any = app.store
        store.insert_runs([NewRun(task="t") for _ in range(300)])
        claimed = store.claim("w", 200, None, 30.0)
        store.finish([Outcome(c.id, c.token, "succeeded", result="1") for c in claimed[:150]])
        with store._read() as s:
            s.q_text("ANALYZE rota_runs, rota_history")  # (the succeeded runs moved there: schema 17)
        store.exact_count_limit = 100  # the table counts as big
        counts = store.run_counts()
        assert counts.estimated == frozenset({"succeeded", "failed", "skipped", "cancelled"})
        assert counts.counts["pending"] == 100 and counts.counts["running"] == 50  # exact
        assert 120 <= counts.counts["succeeded"] <= 180  # the planner's estimate
        stats = app.stats()
        assert stats["runs_counted"] == "estimated"
        assert stats["runs_estimated"] == ["cancelled", "failed", "skipped", "succeeded"]
    finally:
        app.close()


def test_api_stats_and_metrics_carry_the_counts_and_how_they_were_counted(app: rota.App) -> None:
    from starlette.testclient import TestClient

    from rota.web import create_app

    app.task(name="t")(lambda: None).enqueue()
    with TestClient(create_app(app), base_url="http://127.0.0.1") as client:  # a loopback Host (no token)
        stats = client.get("/api/stats").json()
        metrics = client.get("/metrics").text
    assert stats["runs"]["pending"] == 1
    assert stats["runs_counted"] == "exact" and stats["runs_estimated"] == []
    assert 'rota_runs{status="pending"} 1.0' in metrics
