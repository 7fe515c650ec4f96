"""The JSON API's run detail of durable runs against its OpenAPI description (issue 43), on
every store: `steps`, `waiting` (a park's sleep or signal, or a rate's window) and `progress`
are described, with the fields the API sends (schemathesis, in test_web_contract.py, seldom
meets a parked run among the ids it makes up)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from starlette.testclient import TestClient

import rota
from rota.web import create_app

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for

TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "null": type(None),
         "object": dict, "array": list}  # fmt: skip


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def _conforms(value: Any, schema: dict[str, Any], where: str) -> None:
    """The parts of JSON Schema the API's description uses here: type, enum, anyOf, required,
    properties (every field sent must be described), items."""
    if "anyOf" in schema:
        problems = []
        for option in schema["anyOf"]:
            try:
                _conforms(value, option, where)
                return
            except AssertionError as exc:
                problems.append(str(exc))
        raise AssertionError(f"{where}: {value!r} matches no option: {problems}")
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        assert any(isinstance(value, TYPES[k]) and not (k != "boolean" and isinstance(value, bool)) for k in kinds), (
            f"{where}: {value!r} is not {kinds}"
        )
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {value!r} not in {schema['enum']}"
    if isinstance(value, dict) and "properties" in schema:
        assert set(schema.get("required", ())) <= value.keys(), f"{where}: missing {schema['required']}"
        assert value.keys() <= schema["properties"].keys(), (
            f"{where}: undescribed {value.keys() - schema['properties'].keys()}"
        )
        for key, item in value.items():
            _conforms(item, schema["properties"][key], f"{where}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            _conforms(item, schema["items"], f"{where}[{i}]")


def test_the_run_detail_of_parked_and_rate_waiting_runs_is_described(
    app: rota.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ROTA_DASHBOARD_TOKEN", raising=False)

    @app.task(name="described", rate=rota.Rate(1, per=timedelta(hours=1), name="api"), pass_context=True)
    def described(ctx: rota.RunContext) -> None:
        ctx.step("one", lambda: 1)
        ctx.progress(0.5, "half")
        ctx.wait_for("go", timeout=timedelta(hours=1))

    start_worker(app)
    parked, over_rate = described.enqueue(), described.enqueue()
    wait_for(lambda: (app.get_run(parked.id).waiting or {}).get("kind") == "signal", what="the park")
    wait_for(lambda: (app.get_run(over_rate.id).waiting or {}).get("kind") == "rate", what="the rate's wait")
    with TestClient(create_app(app), base_url="http://localhost") as client:
        spec = client.get("/api/openapi.json").json()
        run_schema = spec["components"]["schemas"]["Run"]
        for run_id, kind in ((parked.id, "signal"), (over_rate.id, "rate")):
            body = client.get(f"/api/runs/{run_id}").json()
            assert body["waiting"]["kind"] == kind
            shown = [f for f in ("steps", "waiting", "progress") if f in body]  # only what the run has
            assert shown == (["steps", "waiting", "progress"] if kind == "signal" else ["waiting"])
            for field in shown:
                _conforms(body[field], run_schema["properties"][field], f"run {run_id}.{field}")
    assert [s["outcome"] for s in app.get_run(parked.id).steps] == ["succeeded", "waiting"]
    for run_id in (parked.id, over_rate.id):
        app.cancel(run_id)
