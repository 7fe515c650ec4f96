"""Contract tests: the JSON API against its own OpenAPI description (/api/openapi.json),
with schemathesis generating requests (valid and invalid) for every operation, on both
stores, over a database holding runs of every kind (including a corrupt one)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402

import rota  # noqa: E402
import rota.testing  # noqa: E402
from rota.web import create_app  # noqa: E402

from .conftest import WITH_MYSQL, store_url  # noqa: E402


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.fixture
def web_schema(app: rota.App, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.delenv("ROTA_DASHBOARD_TOKEN", raising=False)

    @app.task(name="ok")
    def ok(x: Any = None) -> dict[str, Any]:
        return {"x": x}

    @app.task(name="bad")
    def bad(x: Any = None) -> None:
        raise ValueError(f"bad {x}")

    @app.task(name="limited", limit=rota.Limit(2, by="x"), rate=rota.Rate(5, per=60, name="github"))
    def limited(x: Any = None) -> None: ...

    app.prepare()  # stores the limit and the rate: /api/limits answers with one of each
    app.add_schedule("reports/daily", "ok", every=3600)
    damaged = ok.enqueue("a" * 1000)
    bad.enqueue(1)
    rota.testing.run_pending(app)
    ok.options(delay=3600).enqueue(2)
    store: Any = app.store
    with store._tx() as s:  # one damaged row: listings must still answer in shape
        for table in ("rota_runs", "rota_history") if store.dialect == "postgresql" else ("rota_runs",):
            s.q_text(f"UPDATE {table} SET result = '{{nope' WHERE id = {store._p('id')}", id=int(damaged.id))
    with app.lock("nightly", ttl=60):
        pass
    return schemathesis.openapi.from_asgi("/api/openapi.json", create_app(app, allowed_hosts=["*"]))


def test_the_api_keeps_its_description(web_schema: Any) -> None:
    """Every operation, valid and invalid inputs: no 5xx, documented statuses, bodies in
    their schema. (The schemathesis pytest plugin fails on our pytest; the strategies are
    driven directly.)"""
    from schemathesis.specs.openapi.checks import positive_data_acceptance

    operations = [result.ok() for result in web_schema.get_all_operations()]
    assert len(operations) == 28
    for operation in operations:
        # A body of changes made as data (a cron expression, a task name) is checked by the
        # library as the Python API checks it: a schema-valid one may still be refused, 400.
        _check(operation, [positive_data_acceptance] if operation.body else [])


def _check(operation: Any, excluded: list[Any]) -> None:
    @given(case=operation.as_strategy())
    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(case: Any) -> None:
        case.call_and_validate(excluded_checks=excluded)

    check()


@pytest.mark.parametrize(
    ("method", "path", "params", "status"),
    [
        ("GET", "/api/runs/{id}", {"id": "damaged"}, 200),
        ("GET", "/api/runs/{id}", {"id": "failed"}, 200),
        ("POST", "/api/runs/{id}/retry", {"id": "failed"}, 201),
        ("POST", "/api/runs/{id}/retry", {"id": "later"}, 409),
        ("POST", "/api/runs/{id}/cancel", {"id": "later"}, 200),
        ("POST", "/api/runs/{id}/cancel", {"id": "damaged"}, 200),
        ("GET", "/api/schedules/{name}", {"name": "reports/daily"}, 200),
        ("POST", "/api/schedules/{name}/pause", {"name": "reports/daily"}, 200),
        ("POST", "/api/schedules/{name}/resume", {"name": "reports/daily"}, 200),
        ("POST", "/api/schedules/{name}/trigger", {"name": "reports/daily"}, 201),
        ("POST", "/api/schedules", {"body": {"name": "hourly", "task": "ok", "every": 3600}}, 201),
        ("POST", "/api/schedules/{name}/update", {"name": "reports/daily", "body": {"every": 60}}, 200),
        ("POST", "/api/schedules/{name}/remove", {"name": "reports/daily"}, 200),
        ("POST", "/api/tasks/{name}/enqueue", {"name": "ok", "body": {"kwargs": {"x": 1}}}, 201),
        ("POST", "/api/queues/{name}/pause", {"name": "mail"}, 200),
        ("POST", "/api/queues/{name}/resume", {"name": "mail"}, 200),
        ("GET", "/api/queues", {}, 200),
        ("GET", "/api/tasks", {}, 200),
    ],
)
def test_actions_that_succeed_keep_the_description(
    web_schema: Any, app: rota.App, method: str, path: str, params: dict[str, Any], status: int
) -> None:
    """Random inputs seldom name a real run or schedule: these do, and their answers are
    checked against the description too. Runs are named by role (ids differ by store: a
    PostgreSQL sequence may skip numbers)."""
    runs = {"damaged" if r.corrupt else "failed" if r.status == "failed" else "later" if r.status == "pending" else "": r.id
            for r in app.list_runs()}  # fmt: skip
    params = dict(params)  # (the parametrized dict is shared by both stores' cases)
    if "id" in params:
        params = {"id": runs[params["id"]]}
    body = params.pop("body", None)
    operation = web_schema[path][method]
    case = operation.Case(path_parameters=params, **({"body": body, "media_type": "application/json"} if body else {}))
    response = case.call()
    assert response.status_code == status, response.text
    case.validate_response(response)


def test_a_task_name_no_route_matches_is_a_documented_404(app: rota.App, monkeypatch: pytest.MonkeyPatch) -> None:
    # Schemathesis found it on PostgreSQL: a newline in the task name matches no route, and the
    # answer (404) was missing from the enqueue operation's description.
    from starlette.testclient import TestClient

    monkeypatch.delenv("ROTA_DASHBOARD_TOKEN", raising=False)
    with TestClient(create_app(app), base_url="http://127.0.0.1") as client:
        answer = client.post("/api/tasks/a%0Ab/enqueue", json={})
        described = client.get("/api/openapi.json").json()["paths"]["/api/tasks/{name}/enqueue"]["post"]
    assert answer.status_code == 404 and answer.json() == {"error": "Not Found"}
    assert "404" in described["responses"]
