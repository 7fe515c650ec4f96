"""Issue 44 item 11: bulk actions on everything a filter matches (one POST, counted first,
bounded, audited) and the read-only role (a second token that can look but not act), on
both stores."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import rota
import rota.testing
from rota.errors import ConfigurationError
from rota.web import bulk, create_app

from .conftest import WITH_MYSQL, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


TOKEN, VIEWER = "full-token-1", "look-only-2"
ADMIN = {"authorization": f"Bearer {TOKEN}"}
READER = {"authorization": f"Bearer {VIEWER}"}


@pytest.fixture(autouse=True)
def _no_env_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROTA_DASHBOARD_TOKEN", raising=False)
    monkeypatch.delenv("ROTA_DASHBOARD_READONLY_TOKEN", raising=False)


@pytest.fixture
def filled(app: rota.App) -> rota.App:
    """Three failed runs of `bad`, one succeeded run of `ok`, two pending runs of `later`."""

    @app.task(name="ok")
    def ok(x: Any = None) -> None: ...

    @app.task(name="bad")
    def bad(x: Any = None) -> None:
        raise ValueError(f"bad {x}")

    @app.task(name="later")
    def later(x: Any = None) -> None: ...

    app.add_schedule("reports/daily", "ok", every=3600)
    for i in range(3):
        bad.enqueue(i)
    ok.enqueue(0)
    rota.testing.run_pending(app)
    later.options(delay=3600).enqueue(1)
    later.options(delay=3600).enqueue(2)
    return app


def web(app: rota.App) -> TestClient:
    return TestClient(create_app(app, token=TOKEN, readonly_token=VIEWER), raise_server_exceptions=False)


def test_bulk_retry_counts_first_then_acts_on_that_many(filled: rota.App, caplog: pytest.LogCaptureFixture) -> None:
    client = web(filled)
    body = {"action": "retry", "filter": {"status": "failed", "task": "bad"}}
    counted = client.post("/api/runs/bulk", json={**body, "dry_run": True}, headers=ADMIN)
    assert counted.status_code == 200, counted.text
    assert counted.json()["matched"] == 3 and counted.json()["done"] == 0
    assert len(filled.list_runs(task="bad")) == 3  # a dry run changes nothing
    stale = client.post("/api/runs/bulk", json={**body, "expect": 2}, headers=ADMIN)
    assert stale.status_code == 409 and "now matches 3 runs, not 2" in stale.json()["error"]
    with caplog.at_level(logging.INFO, logger="rota.web"):
        done = client.post("/api/runs/bulk", json={**body, "expect": 3}, headers=ADMIN)
    assert done.status_code == 200, done.text
    assert done.json()["done"] == 3 and done.json()["skipped"] == 0 and len(done.json()["ids"]) == 3
    assert sorted(r.status for r in filled.list_runs(task="bad")) == ["failed"] * 3 + ["pending"] * 3
    audit = [r.getMessage() for r in caplog.records if "dashboard bulk retry" in r.getMessage()]
    assert audit and "3 of 3 runs" in audit[0] and '"task": "bad"' in audit[0] and "(admin)" in audit[0]


def test_bulk_cancel_skips_finished_runs(filled: rota.App) -> None:
    client = web(filled)
    done = client.post("/api/runs/bulk", json={"action": "cancel", "filter": {}}, headers=ADMIN)
    assert done.status_code == 200, done.text
    assert done.json()["matched"] == 6 and done.json()["done"] == 2 and done.json()["skipped"] == 4
    assert {r.status for r in filled.list_runs(task="later")} == {"cancelled"}


def test_bulk_is_bounded(filled: rota.App, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk, "BULK_LIMIT", 2)
    answer = web(filled).post("/api/runs/bulk", json={"action": "retry", "filter": {"task": "bad"}}, headers=ADMIN)
    assert answer.status_code == 409 and "more than 2 runs match" in answer.json()["error"]
    assert len(filled.list_runs(task="bad")) == 3


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"action": "delete"}, "action must be one of retry, cancel"),
        ({"action": "retry", "filter": {"status": "done"}}, "unknown status 'done'"),
        ({"action": "retry", "filter": {"worker": "w"}}, "unknown filter 'worker'"),
        ({"action": "retry", "expect": -1}, "expect must be a count"),
        ({"action": "retry", "force": True}, "unknown field 'force'"),
    ],
)
def test_bulk_bad_input_is_400(filled: rota.App, body: dict[str, Any], message: str) -> None:
    answer = web(filled).post("/api/runs/bulk", json=body, headers=ADMIN)
    assert answer.status_code == 400 and message in answer.json()["error"], answer.text


def test_bulk_from_another_site_is_refused(filled: rota.App) -> None:
    headers = {**ADMIN, "sec-fetch-site": "cross-site"}
    answer = web(filled).post("/api/runs/bulk", json={"action": "cancel"}, headers=headers)
    assert answer.status_code == 403
    assert {r.status for r in filled.list_runs(task="later")} == {"pending"}


def action_paths(app: rota.App) -> list[str]:
    failed = app.list_runs(task="bad")[0].id
    pending = app.list_runs(task="later")[0].id
    return [
        f"/api/runs/{failed}/retry",
        f"/api/runs/{pending}/cancel",
        "/api/runs/bulk",
        "/api/schedules/reports/daily/pause",
        "/api/schedules/reports/daily/resume",
        "/api/schedules/reports/daily/trigger",
    ]


def test_the_read_only_token_looks_but_cannot_act(filled: rota.App) -> None:
    client = web(filled)
    before = {r.id: r.status for r in filled.list_runs(limit=100)}
    assert client.get("/api/runs", headers=READER).status_code == 200
    assert client.get("/api/stats", headers=READER).status_code == 200
    page = client.get("/", headers=READER)
    assert page.status_code == 200 and 'data-role="readonly"' in page.text
    assert 'data-role="admin"' in client.get("/", headers=ADMIN).text
    for path in action_paths(filled):
        answer = client.post(path, json={"action": "cancel"}, headers=READER)
        assert answer.status_code == 403, (path, answer.text)
        assert "read-only" in answer.json()["error"]
    assert {r.id: r.status for r in filled.list_runs(limit=100)} == before
    assert filled.get_schedule("reports/daily").paused is False
    assert client.post(action_paths(filled)[1], headers=ADMIN).status_code == 200  # the full token still acts


def test_a_read_only_session_cannot_act(filled: rota.App) -> None:
    client = web(filled)
    assert client.post("/login", data={"token": VIEWER}, follow_redirects=False).status_code == 303
    assert 'data-role="readonly"' in client.get("/").text
    assert client.get("/api/runs").status_code == 200
    for path in action_paths(filled):
        assert client.post(path).status_code == 403, path
    assert client.post("/logout", follow_redirects=False).status_code == 303
    assert client.get("/api/runs").status_code == 401


def test_read_only_token_needs_a_different_full_token(app: rota.App, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="needs a full token"):
        create_app(app, readonly_token=VIEWER)
    with pytest.raises(ConfigurationError, match="must differ"):
        create_app(app, token=TOKEN, readonly_token=TOKEN)
    monkeypatch.setenv("ROTA_DASHBOARD_READONLY_TOKEN", VIEWER)
    client = TestClient(create_app(app, token=TOKEN))
    assert client.post("/api/runs/1/cancel", headers=READER).status_code == 403
