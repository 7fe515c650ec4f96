"""A schedule row that cannot be decoded (a time past year 9999 or before year 1, JSON that is
not valid, written by hand) is listed as corrupt and skipped with one warning, while the other
schedules keep running: `rota schedules`, /api/schedules, /metrics and a worker's start all
survive it (issue 21 item 1), on both stores. The warning is rota.quarantine's (event
row_damaged); tests/test_damaged_rows.py covers the values that cannot be planned."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import rota
from rota import quarantine
from rota.cli import main
from rota.web import create_app

from . import mysql_db
from .conftest import WITH_MYSQL, start_worker, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def _wait_for(condition: Any, what: str, timeout: float = 15.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _damage(app: rota.App, name: str, column: str, how: str) -> None:
    """Write a time no API would write: `future` past year 9999, `past` before year 1 (on
    MySQL/MariaDB, which holds neither, the zero date a client without strict mode can write)."""
    store: Any = app.store
    if store.dialect == "mysql":
        mysql_db.execute(
            app.database_url, f"UPDATE rota_schedules SET {column} = {mysql_db.ZERO_DATE} WHERE name = '{name}'"
        )
        return
    pg = store.dialect == "postgresql"
    values = {
        "future": f"{column} + interval '100000 years'" if pg else f"{column} + 1e12",
        "past": "'-infinity'" if pg else "-1e12",
        "now": "now() + interval '100000 years'" if pg else "1e12",
    }
    with store._tx() as s:
        s.q_text(f"UPDATE rota_schedules SET {column} = {values[how]} WHERE name = {store._p('name')}", name=name)


@pytest.fixture(autouse=True)
def _named_afresh() -> None:
    quarantine.forget()  # each test sees its own first warning


@pytest.fixture
def damaged(app: rota.App) -> rota.App:
    app.task(name="t")(lambda: None)
    app.add_schedule("good", "t", every=3600)
    app.add_schedule("bad", "t", every=3600)
    app.add_schedule("old", "t", every=3600)
    _damage(app, "bad", "next_run_at", "future")
    _damage(app, "old", "last_run_at", "now")
    return app


def test_listings_name_the_damaged_fields_and_keep_the_rest(damaged: rota.App) -> None:
    items = {s.name: s for s in damaged.list_schedules()}
    assert set(items) == {"good", "bad", "old"}
    assert items["bad"].corrupt == ("next_run_at",) and items["bad"].next_run_at is None
    assert items["old"].corrupt == ("last_run_at",) and items["old"].next_run_at is not None
    assert items["good"].corrupt == () and items["good"].next_run_at is not None
    assert damaged.get_schedule("bad").to_json()["corrupt"] == ["next_run_at"]
    assert damaged.get_schedule("good").to_json()["corrupt"] == []


def test_cli_api_and_metrics_survive_a_damaged_schedule(damaged: rota.App) -> None:
    url = damaged.database_url
    result = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["--database-url", url, "schedules"])
    assert result.exit_code == 0, result.output
    (bad,) = [line for line in result.output.splitlines() if line.startswith("bad ")]
    assert "corrupt: next_run_at" in bad
    listed = CliRunner().invoke(main, ["--database-url", url, "schedules", "--json"])
    assert listed.exit_code == 0, listed.output
    assert {s["name"]: s["corrupt"] for s in json.loads(listed.output)}["bad"] == ["next_run_at"]

    with TestClient(create_app(damaged), base_url="http://127.0.0.1") as client:
        api = client.get("/api/schedules")
        assert api.status_code == 200
        assert {s["name"]: s["corrupt"] for s in api.json()} == {
            "bad": ["next_run_at"],
            "good": [],
            "old": ["last_run_at"],
        }
        assert client.get("/api/schedules/bad").json()["corrupt"] == ["next_run_at"]
        metrics = client.get("/metrics")
        assert metrics.status_code == 200 and "rota_up 1.0" in metrics.text
        assert 'rota_schedule_next_run_timestamp_seconds{schedule="good"}' in metrics.text


@pytest.mark.parametrize("how", ["future", "past"])
def test_a_worker_starts_skips_it_with_one_warning_and_runs_the_others(
    app: rota.App, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    app.task(name="t")(lambda: None)
    app.add_schedule("bad", "t", every=3600)
    app.add_schedule("good", "t", every=1, run_immediately=True)
    _damage(app, "bad", "next_run_at", how)
    caplog.set_level(logging.WARNING, logger="rota")
    worker = start_worker(app)
    _wait_for(lambda: len(app.list_runs(schedule="good", status="succeeded")) >= 2, "the good schedule to run twice")
    assert worker.state == "running"
    assert app.list_runs(schedule="bad") == []
    warnings = [r for r in caplog.records if getattr(r, "event", None) == "row_damaged"]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "damaged schedule 'bad' set aside: next_run_at is not a valid time" in warnings[0].getMessage()


def test_pause_and_resume_or_an_update_repairs_it(damaged: rota.App) -> None:
    damaged.pause("bad")
    resumed = damaged.resume("bad")
    assert resumed.corrupt == () and resumed.next_run_at is not None
    _damage(damaged, "bad", "next_run_at", "future")
    updated = damaged.update_schedule("bad", misfire="skip")
    assert updated.corrupt == () and updated.next_run_at is not None
