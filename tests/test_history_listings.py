"""Listing a task's or a schedule's unhappy runs reads an index of those runs only (migration
0012), so its time does not grow with the history kept; the results are those of a scan."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import rota
from rota.stores.base import Outcome, RunFilter

from .conftest import WITH_MYSQL, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def _finish_all(app: rota.App) -> None:
    while claimed := app.store.claim("w", 500, None, 30):
        outcomes = []
        for c in claimed:
            status = "failed" if c.id % 3 == 0 else "succeeded"
            outcomes.append(Outcome(c.id, c.token, status, result="null", error='{"type": "X"}'))
        app.store.finish(outcomes)


@pytest.fixture
def history(app: rota.App) -> rota.App:
    @app.task(name="a")
    def a() -> None: ...

    @app.task(name="b")
    def b() -> None: ...

    a.enqueue_many([((), {})] * 60)
    b.enqueue_many([((), {})] * 60)
    _finish_all(app)
    app.add_schedule("s", "b", every=3600, overlap="concurrent")
    for _ in range(3):
        app.trigger("s")
    for run in app.list_runs(schedule="s"):
        app.cancel(run.id)
    return app


@pytest.mark.parametrize("status", ["failed", "succeeded", "cancelled"])
def test_a_tasks_runs_of_one_status_are_those_a_scan_finds(history: rota.App, status: str) -> None:
    everything = history.list_runs(limit=1000)
    for task in ("a", "b"):
        expected = [r.id for r in everything if r.task == task and r.status == status]
        assert [r.id for r in history.list_runs(task=task, status=status, limit=1000)] == expected
        page = history.list_runs(task=task, status=status, limit=5)
        assert [r.id for r in page] == expected[:5]
        if page:
            rest = history.list_runs(task=task, status=status, before=page[-1].id, limit=1000)
            assert [r.id for r in rest] == expected[5:]
    by_schedule = [r.id for r in everything if r.schedule == "s" and r.status == status]
    assert [r.id for r in history.list_runs(schedule="s", status=status, limit=1000)] == by_schedule


def test_the_unhappy_listing_reads_its_own_index(history: rota.App, db_url: str) -> None:
    if db_url.startswith("mysql"):
        pytest.skip("MySQL has no partial indexes: its listings read rota_runs_task_status and the like")
    store = history.store
    for flt, index in (
        (RunFilter(status="failed", task="a"), "rota_runs_unhappy_task"),
        (RunFilter(status="cancelled", schedule="s"), "rota_runs_unhappy_schedule"),
    ):
        suffix, params = store._runs_where(flt)  # type: ignore[attr-defined]
        sql = store.queries["run_columns"] + suffix  # type: ignore[attr-defined]
        with store._tx() as s:  # type: ignore[attr-defined]
            if db_url.startswith("postgres"):
                s.q_text("SET LOCAL enable_seqscan = off")
                s.q_text("SET LOCAL enable_bitmapscan = off")
                plan = " ".join(str(r[0]) for r in s.q_text("EXPLAIN " + sql, **params))
            else:
                plan = " ".join(str(r[-1]) for r in s.q_text("EXPLAIN QUERY PLAN " + sql, **params))
        assert index in plan, (flt, plan)


def test_postgresql_lists_by_a_status_literal_so_a_cached_plan_keeps_the_partial_index(
    history: rota.App, db_url: str
) -> None:
    """psycopg prepares a statement after a few calls; a generic plan for `status = $1` cannot
    use the partial indexes whose predicates name the statuses. A literal keeps one plan per
    status on its index; SQLite binds it and repeats the index's predicate instead."""
    suffix, params = history.store._runs_where(RunFilter(status="failed", task="a"))  # type: ignore[attr-defined]
    if db_url.startswith("postgres"):
        assert "status = 'failed'" in suffix and "status" not in params
    else:
        assert (
            params["status"] == "failed"
            and "(status = 'failed' OR status = 'cancelled' OR status = 'skipped')" in suffix
        )
    for _ in range(8):  # prepared by now: the listing still answers right
        assert all(r.status == "failed" and r.task == "a" for r in history.list_runs(task="a", status="failed"))
