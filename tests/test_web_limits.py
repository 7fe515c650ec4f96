"""GET /api/limits: each stored concurrency limit and rate with its running and waiting runs,
the same records as `rota limits --json`, on both stores."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import rota
from rota.web import create_app

from .conftest import WITH_MYSQL, store_url
from .test_cli import cli


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.fixture(autouse=True)
def _no_env_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROTA_DASHBOARD_TOKEN", raising=False)


def test_limits_and_rates_with_running_and_waiting_counts(app: rota.App, db_url: str) -> None:
    @app.task(limit=rota.Limit(1, by="customer"), name="export")
    def export(customer: int) -> None: ...

    @app.task(limit=rota.Limit(3, name="stripe"), name="charge")
    def charge() -> None: ...

    @app.task(rate=rota.Rate(5, per=60, name="github"), name="gh")
    def gh() -> None: ...

    app.prepare()
    for c in (1, 1, 1, 2):
        export.enqueue(c)
    for _ in range(3):
        gh.enqueue()
    assert len(app.store.claim("w", 10, None, 30.0)) == 5  # one export per customer, every gh
    export.enqueue(3)
    client = TestClient(create_app(app), base_url="http://localhost")
    response = client.get("/api/limits")
    assert response.status_code == 200
    data = response.json()
    assert data == {
        "limits": [
            {"name": "export", "max": 1, "running": 2, "waiting": 3, "keys": 3, "keys_full": 2, "corrupt": []},
            {"name": "stripe", "max": 3, "running": 0, "waiting": 0, "keys": 0, "keys_full": 0, "corrupt": []},
        ],
        "rates": [
            {
                "name": "github",
                "max": 5,
                "per_seconds": 60.0,
                "started_in_window": 3,
                "waiting": 0,
                "keys": 0,
                "keys_full": 0,
                "corrupt": [],
            }
        ],
        "unresolved": 0,
        "damaged_specs": [],
        "unknown_limits": [],
        "unknown_rates": [],
    }
    code, out = cli(db_url, "limits", "--json")
    assert code == 0 and json.loads(out) == data  # the same records as the CLI's


def test_a_keyed_limit_is_full_only_for_its_keys_at_their_max(app: rota.App) -> None:
    """max is per key: 2 running runs of 2 keys under Limit(2, by=) fill no key (the running
    count is over all keys); keys_full counts the keys whose running runs fill max."""

    @app.task(limit=rota.Limit(2, by="customer"), name="export")
    def export(customer: int) -> None: ...

    app.prepare()
    export.enqueue(1), export.enqueue(2)
    assert len(app.store.claim("w", 10, None, 30.0)) == 2
    client = TestClient(create_app(app), base_url="http://localhost")

    def row() -> dict[str, Any]:
        (limit,) = client.get("/api/limits").json()["limits"]
        return {k: limit[k] for k in ("max", "running", "waiting", "keys", "keys_full")}

    assert row() == {"max": 2, "running": 2, "waiting": 0, "keys": 2, "keys_full": 0}  # running = max: no key full
    export.enqueue(1), export.enqueue(1)
    assert len(app.store.claim("w", 10, None, 30.0)) == 1  # customer 1's second slot
    assert row() == {"max": 2, "running": 3, "waiting": 1, "keys": 2, "keys_full": 1}
    export.enqueue(2)
    assert len(app.store.claim("w", 10, None, 30.0)) == 1
    assert row() == {"max": 2, "running": 4, "waiting": 1, "keys": 2, "keys_full": 2}


def test_a_keyed_rate_is_full_only_for_its_keys_at_their_max(app: rota.App) -> None:
    """As a limit's: 2 starts of 2 keys under Rate(2, by=) fill no key's window."""

    @app.task(rate=rota.Rate(2, per=3600, by="customer"), name="fetch")
    def fetch(customer: int) -> None: ...

    app.prepare()
    fetch.enqueue(1), fetch.enqueue(2)
    assert len(app.store.claim("w", 10, None, 30.0)) == 2
    client = TestClient(create_app(app), base_url="http://localhost")

    def row() -> dict[str, Any]:
        (rate,) = client.get("/api/limits").json()["rates"]
        return {k: rate[k] for k in ("max", "started_in_window", "waiting", "keys", "keys_full")}

    assert row() == {"max": 2, "started_in_window": 2, "waiting": 0, "keys": 0, "keys_full": 0}
    fetch.enqueue(1), fetch.enqueue(1)
    assert len(app.store.claim("w", 10, None, 30.0)) == 1  # customer 1's second start in the hour
    assert row() == {"max": 2, "started_in_window": 3, "waiting": 1, "keys": 1, "keys_full": 1}


def test_no_limits_is_two_empty_lists_and_unknown_parameters_are_refused(app: rota.App) -> None:
    app.migrate()
    client = TestClient(create_app(app), base_url="http://localhost")
    assert client.get("/api/limits").json() == {"limits": [], "rates": [], "unresolved": 0, "damaged_specs": [],
                                                "unknown_limits": [], "unknown_rates": []}  # fmt: skip
    response = client.get("/api/limits?name=x")
    assert response.status_code == 400 and "unknown query parameter 'name'" in response.json()["error"]


def test_limits_need_the_token_like_every_read(app: rota.App) -> None:
    app.migrate()
    client = TestClient(create_app(app, token="s3cret-token"), base_url="http://localhost")
    assert client.get("/api/limits").status_code == 401
    good = client.get("/api/limits", headers={"authorization": "Bearer s3cret-token"})
    assert good.status_code == 200 and good.json() == {"limits": [], "rates": [], "unresolved": 0, "damaged_specs": [],
                                                       "unknown_limits": [], "unknown_rates": []}  # fmt: skip


def test_a_store_without_flow_control_has_nothing_to_show(app: rota.App) -> None:
    from rota.web.api import limit_records

    class Bare:
        store: Any = object()

    assert limit_records(Bare()) == {"limits": [], "rates": [], "unresolved": 0, "damaged_specs": [],  # type: ignore[arg-type]
                                     "unknown_limits": [], "unknown_rates": []}  # fmt: skip


def test_run_summaries_say_how_many_parents_a_run_waits_on(app: rota.App) -> None:
    @app.task(name="step")
    def step(x: int = 0) -> int:
        return x

    a, b = step.enqueue(1), step.enqueue(2)
    child = step.options(after=[a, b]).enqueue(3)
    client = TestClient(create_app(app), base_url="http://localhost")
    summaries = {r["id"]: r for r in client.get("/api/runs").json()}
    assert summaries[child.id]["waiting_on"] == 2 and summaries[child.id]["status"] == "pending"
    assert summaries[a.id]["waiting_on"] == 0 and summaries[b.id]["waiting_on"] == 0
    detail = client.get(f"/api/runs/{child.id}").json()
    assert detail["parents"] == sorted([a.id, b.id], key=int) and detail["waiting_on"] == 2
    assert client.get(f"/api/runs/{a.id}").json()["dependents"] == [child.id]
