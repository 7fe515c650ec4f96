"""The dashboard's chart and detail-page reads (rota.web.charts, rota.web.pages), on both
stores: numbers from the database, bounded reads (the cap and its estimate), the index
the queries use, bad input, a schedule's next ticks with DST notes, a worker's page."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from starlette.testclient import TestClient

import rota
import rota.testing
from rota.web import charts, create_app

from .conftest import WITH_MYSQL, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.fixture(autouse=True)
def _no_env_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROTA_DASHBOARD_TOKEN", raising=False)


@pytest.fixture
def done(app: rota.App) -> rota.App:
    @app.task(name="ok")
    def ok(x: Any = None) -> int:
        return 1

    @app.task(name="flaky", retries=2, backoff=0)
    def flaky(x: Any = None) -> None:
        raise ValueError("no")

    for i in range(6):
        ok.options(queue="mail" if i % 2 else "default").enqueue(i)
    flaky.enqueue(0)
    rota.testing.run_pending(app)
    return app


@pytest.fixture
def client(done: rota.App) -> Iterator[TestClient]:
    with TestClient(create_app(done), base_url="http://localhost") as c:
        yield c


def test_throughput_counts_the_runs_finished_in_each_bucket(client: TestClient, done: rota.App) -> None:
    data = client.get("/api/charts/throughput?window=15m").json()
    assert len(data["buckets"]) == 15 and data["bucket_seconds"] == 60 and not data["estimated"]
    assert data["totals"] == {"succeeded": 6, "failed": 1, "retried": 2, "skipped": 0, "cancelled": 0}
    starts = [datetime.fromisoformat(b["start"]) for b in data["buckets"]]
    assert all(s.second == 0 and s.microsecond == 0 for s in starts)  # aligned to the minute
    assert starts[-1] <= done.store.now() < starts[-1].replace(tzinfo=UTC) + (starts[1] - starts[0])
    mail = client.get("/api/charts/throughput?window=15m&queue=mail").json()["totals"]
    assert mail["succeeded"] == 3 and mail["failed"] == 0
    flaky = client.get("/api/charts/throughput?window=7d&task=flaky").json()
    assert flaky["totals"]["failed"] == 1 and flaky["totals"]["retried"] == 2 and len(flaky["buckets"]) == 168


def test_a_full_bucket_is_estimated_from_the_rows_it_read(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(charts, "MIN_CAP", 2)
    monkeypatch.setattr(charts, "THROUGHPUT_BUDGET", 2)
    monkeypatch.setattr(charts, "FILTERED_BUDGET", 2)
    data = client.get("/api/charts/throughput?window=15m").json()
    assert data["cap"] == 2 and data["estimated"]
    (busy,) = [b for b in data["buckets"] if b["estimated"]]
    assert sum(busy[k] for k in charts.OUTCOMES) >= 2  # scaled up from the 2 rows read, not 2
    rare = client.get("/api/charts/throughput?window=15m&task=flaky").json()
    assert rare["estimated"]  # the filter applies to the 2 rows read: a rare task reads no more


def test_lateness_and_wait_are_percentiles_of_the_runs_finished(client: TestClient, done: rota.App) -> None:
    data = client.get("/api/charts/lateness?window=1h").json()
    runs = [r for r in done.list_runs(limit=100) if r.started_at is not None]
    assert data["lateness"]["n"] == sum(1 for r in runs if r.attempt == 1)
    assert data["wait"]["n"] == len(runs)
    waits = sorted((r.started_at - max(r.created_at, r.due_at)).total_seconds() for r in runs if r.started_at)
    assert data["wait"]["p50"] == pytest.approx(waits[(len(waits) + 1) // 2 - 1], abs=0.002)
    assert charts.percentile([5, 1, 3, 2, 4], 50) == 3 and charts.percentile([1, 2], 95) == 2
    assert charts.percentile([], 50) is None


def test_backlog_by_queue(client: TestClient, done: rota.App) -> None:
    ok = done.tasks["ok"]
    ok.options(queue="mail").enqueue(1)
    ok.options(queue="mail", delay=600).enqueue(2)
    data = client.get("/api/charts/backlog").json()
    assert data["queues"] == [{"queue": "mail", "due": 1, "later": 1, "running": 0}] and not data["truncated"]
    assert data["pending"] == 2


def test_a_long_backlog_is_split_over_the_first_runs_due(
    client: TestClient, done: rota.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(charts, "BACKLOG_CAP", 3)
    ok = done.tasks["ok"]
    ok.options(queue="late", delay=600).enqueue_many([((i,), {}) for i in range(5)])
    ok.options(queue="mail").enqueue_many([((i,), {}) for i in range(2)])
    data = client.get("/api/charts/backlog").json()
    assert data["truncated"] and data["pending"] == 7  # the due ones come first
    assert data["queues"] == [{"queue": "late", "due": 0, "later": 1, "running": 0},
                              {"queue": "mail", "due": 2, "later": 0, "running": 0}]  # fmt: skip


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("window=2h", "unknown window '2h'; valid: 15m, 1h, 24h, 7d"),
        ("windw=1h", "unknown query parameter 'windw'"),
        ("task=%00", "task must not contain a NUL character"),
    ],
)
def test_bad_chart_input_is_one_clear_line(client: TestClient, query: str, message: str) -> None:
    response = client.get(f"/api/charts/throughput?{query}")
    assert response.status_code == 400 and message in response.json()["error"]


def test_the_chart_queries_read_the_finished_at_index(done: rota.App, db_url: str) -> None:
    """Each bucket is a range read of rota_runs_finished (migration 0007), never a table scan."""
    if db_url.startswith("mysql"):
        pytest.skip("MySQL's EXPLAIN of a query with bound parameters plans the derived table away")
    store: Any = done.store
    params = {"lo": 0.0, "hi": 1e10, "cap": 10, "task": None, "queue": None, "now": store.now()}
    for name in ("web_throughput", "web_throughput_where", "web_lateness"):
        sql = store.queries[name]
        with store._tx() as s:
            if db_url.startswith("postgres"):
                s.q_text("SET LOCAL enable_seqscan = off")
                plan = " ".join(str(r[0]) for r in s.q_text("EXPLAIN " + sql, **params))
            else:
                plan = " ".join(str(r[-1]) for r in s.q_text("EXPLAIN QUERY PLAN " + sql, **params))
        assert "rota_runs_finished" in plan, (name, plan)


def test_a_schedules_ticks_have_dst_notes_and_its_recent_outcomes(client: TestClient, done: rota.App) -> None:
    done.add_schedule("weekly", "ok", cron="30 2 * * 0", tz="Europe/Berlin")  # Sundays 02:30
    done.trigger("weekly")
    rota.testing.run_pending(done)
    data = client.get("/api/schedules/weekly/ticks?count=60&recent=5").json()
    assert len(data["next"]) == 60 and [r["status"] for r in data["recent"]] == ["succeeded"]
    notes = [t for t in data["next"] if t["note"]]
    assert notes, "a spring-forward Sunday within 60 weeks has a note"
    assert all(t["local"] and t["at"].endswith("Z") for t in data["next"])
    assert data["next"][0]["at"] == done.get_schedule("weekly").to_json()["next_run_at"]  # from its next run
    done.add_schedule("beat", "ok", every=30)
    beat = client.get("/api/schedules/beat/ticks?count=3").json()["next"]
    times = [datetime.fromisoformat(t["at"]) for t in beat]
    assert [(b - a).total_seconds() for a, b in itertools.pairwise(times)] == [30, 30]
    assert client.get("/api/schedules/nope/ticks").status_code == 404
    assert "count must be an integer from 1 to 100" in client.get("/api/schedules/beat/ticks?count=0").json()["error"]


def test_a_workers_page(client: TestClient, done: rota.App) -> None:
    done.store.register_worker("host-1:41:aa", "host-1", 41, 4, None)
    page = client.get("/api/workers/host-1:41:aa").json()
    assert page["worker"]["id"] == "host-1:41:aa" and page["running"] == [] and page["recent"] == []
    missing = client.get("/api/workers/nope")
    assert missing.status_code == 404 and "no worker with id 'nope'" in missing.json()["error"]
