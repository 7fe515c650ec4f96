"""Listings beside rows damaged in ways a decoder of valid JSON or a queue's pause time did
not expect (found by the review of issue 41), on both stores: a run's `error` that is JSON of
another shape than an object, `attempts` that are not a list of objects, and a paused queue
whose `paused_at` cannot be read. Every listing answers, the damage is named, the rest shown."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

import rota
import rota.testing
from rota import quarantine
from rota.cli import main

from . import mysql_db
from .conftest import WITH_MYSQL, store_url
from .test_damaged_rows import _named, _sql


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.fixture(autouse=True)
def _named_afresh() -> None:
    quarantine.forget()


def _cli(app: rota.App, *args: str) -> tuple[int, str]:
    result = CliRunner(env={"COLUMNS": "250"}).invoke(main, ["--database-url", app.database_url, *args])
    return result.exit_code, result.output + (repr(result.exception) if result.exception else "")


@pytest.mark.parametrize(
    ("column", "value", "field"),
    [
        ("error", '"just a string"', "error"),
        ("error", "[1, 2]", "error"),
        ("attempts", '{"x": 1}', "attempts"),
        ("attempts", "[5, null]", "attempts"),
        ("attempts", '[{"error": "boom"}]', "attempts"),
    ],
)
def test_a_run_whose_stored_json_has_the_wrong_shape_is_listed_as_corrupt(
    app: rota.App, column: str, value: str, field: str
) -> None:
    task = app.task(name="t")(lambda x: x)
    good, bad = task.options(delay=60).enqueue(1), task.options(delay=60).enqueue(2)
    cast = "CAST({v} AS jsonb)" if column == "attempts" and app.store.dialect == "postgresql" else "{v}"
    _sql(
        app,
        f"UPDATE rota_runs SET status = 'failed', {column} = {cast.format(v='{v}')} WHERE id = {{id}}",
        v=value,
        id=int(bad.id),
    )
    assert field in app.get_run(bad.id).corrupt  # type: ignore[union-attr]
    for args in (
        ("runs",),
        ("runs", "--status", "failed"),
        ("run", bad.id),
        ("run", bad.id, "--json"),
        ("runs", "--json"),
    ):
        code, out = _cli(app, *args)
        assert code == 0 and "Traceback" not in out and "Error(" not in out, (args, out)
    code, out = _cli(app, "runs", "--json")
    listed = {r["id"]: r for r in json.loads(out)}
    assert set(listed) == {good.id, bad.id} and field in listed[bad.id]["corrupt"], listed


def test_a_paused_queue_whose_pause_time_is_damaged_never_breaks_status_or_queues(
    app: rota.App, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rota")
    app.pause_queue("mail")
    far: Any = {"postgresql": "'infinity'", "mysql": mysql_db.ZERO_DATE}.get(app.store.dialect, "1e300")
    _sql(app, f"UPDATE rota_queue_pauses SET paused_at = {far} WHERE queue = 'mail'")
    for args in (("status",), ("queues",), ("status", "--json"), ("queues", "--json")):
        code, out = _cli(app, *args)
        assert code == 0 and "Traceback" not in out and "Error(" not in out, (args, out)
    listed = {q.name: q for q in app.list_queues()}
    app.list_queues()
    assert listed["mail"].paused and listed["mail"].paused_at is None
    assert _named(caplog, quarantine.QUEUE_PAUSE) == {"mail": 1}


@pytest.mark.parametrize("column", ["scheduled_for", "created_at", "due_at", "started_at"])
def test_a_finished_run_with_an_infinite_time_never_breaks_the_lateness_chart(app: rota.App, column: str) -> None:
    """A damaged run set aside ends now, so it falls in the chart's window; PostgreSQL refuses
    to subtract an infinite timestamp, which failed the whole chart with a 500."""
    from starlette.testclient import TestClient

    from rota.web import create_app

    task = app.task(name="t")(lambda x: x)
    good, bad = task.enqueue(1), task.enqueue(2)
    rota.testing.run_pending(app)
    far = {"postgresql": "'-infinity'", "mysql": mysql_db.ZERO_DATE}.get(app.store.dialect, "-9e999")
    _sql(app, f"UPDATE rota_runs SET {column} = {far} WHERE id = {int(bad.id)}")
    _sql(app, f"UPDATE rota_history SET {column} = {far} WHERE id = {{id}}", id=int(bad.id)) if _has_history(
        app
    ) else None
    with TestClient(create_app(app), base_url="http://localhost") as client:
        for window in ("15m", "1h"):
            response = client.get(f"/api/charts/lateness?window={window}")
            assert response.status_code == 200, response.text
            assert response.json()["wait"]["n"] >= 1  # the good run is still counted
    assert good.id


def _has_history(app: rota.App) -> bool:
    return bool(app.store.dialect == "postgresql")
