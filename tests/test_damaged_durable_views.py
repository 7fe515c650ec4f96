"""A parked run whose durable rows are damaged (its saved step's time and error, its wait's
times, its progress, a signal), seen as users see runs: App.get_run, App.list_runs, `rota run
ID` (and --json), `rota runs` (and --json), `rota status`, the dashboard's JSON and page;
and acted on: App.signal, cancel, retry_many, retention's prune. Each damaged field reads as
empty and is named once (rota.quarantine), nothing answers 500 or a traceback, and the other
runs on the page are listed whole. On every store."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import rota
from rota import quarantine
from rota.cli import main
from rota.web import create_app

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for
from .damaged_durable import bad_fraction, bad_time, dialect, signal_row, sql


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.fixture(autouse=True)
def _fresh_names() -> None:
    quarantine.forget()


def _parked(app: rota.App, kind: str = "bogus") -> tuple[Any, Any, Any]:
    """Two runs parked waiting for signal 'go' (a step saved, progress set); a worker that
    parked them is stopped. The first one's durable rows are then damaged (its wait's kind
    set to `kind`)."""

    @app.task(name="waiter", pass_context=True)
    def waiter(ctx: rota.RunContext, n: int) -> Any:
        ctx.step("a", lambda: n)
        ctx.progress(0.5, "half")
        got = ctx.wait_for("go", timeout=timedelta(hours=1))
        return None if got is None else got.payload

    worker = start_worker(app)
    bad, good = waiter.enqueue(1), waiter.enqueue(2)
    for ref in (bad, good):
        wait_for(lambda r=ref: app.get_run(r.id).waiting is not None, what="the park")  # type: ignore[misc]
    worker.stop(wait=True, timeout=10)
    t, f, rid = bad_time(app), bad_fraction(app), int(bad.id)
    sql(app, f"UPDATE rota_steps SET started_at = {t}, finished_at = {t}, error = '{{oops' WHERE run_id = {rid}")
    sql(app, f"UPDATE rota_waits SET until = {t}, since = {t}, kind = '{kind}' WHERE run_id = {rid}")
    sql(app, f"UPDATE rota_progress SET fraction = {f}, updated_at = {t} WHERE run_id = {rid}")
    signal_row(app, rid, "other", "{oops", sent=t)
    return bad, good, waiter


def _never_due(app: rota.App, run_id: Any) -> None:
    """The parked run's own due time damaged too (rota_runs.due_at: the run is corrupt). Not on
    MySQL/MariaDB: its zero date is due at once, and the claim sets it aside (test_damaged_runs)."""
    if dialect(app) != "mysql":
        sql(app, f"UPDATE rota_runs SET due_at = {bad_time(app)} WHERE id = {int(run_id)}")


def _damage_named(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if getattr(r, "event", None) == quarantine.EVENT]


def test_a_parked_run_with_damaged_durable_rows_is_shown_everywhere(
    app_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    app = app_factory()
    caplog.set_level(logging.WARNING, logger="rota")
    bad, good, _ = _parked(app)
    _never_due(app, bad.id)
    run = app.get_run(bad.id)
    assert run.status == "pending"
    assert run.steps[0]["name"] == "a" and run.steps[0]["started_at"] is None
    assert run.steps[0]["error"]["type"] == "DamagedRow"
    assert run.waiting is not None and run.waiting["until"] is None and run.waiting["since"] is None
    assert run.progress is not None and run.progress["fraction"] is None and run.progress["at"] is None
    assert run.progress["message"] == "half"
    listed = {r.id: r for r in app.list_runs()}
    assert listed[bad.id].waiting is not None and listed[good.id].waiting is not None
    assert listed[good.id].waiting["until"] is not None
    url = app.database_url
    env = {"COLUMNS": "200"}
    for args in (["run", bad.id], ["run", bad.id, "--json"], ["runs"], ["runs", "--json"], ["status"]):
        out = CliRunner(env=env).invoke(main, ["--database-url", url, *args])
        assert out.exit_code == 0 and out.exception is None, (args, out.output, out.exception)
    with TestClient(create_app(app), base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        for path in (f"/api/runs/{bad.id}", "/api/runs", "/api/stats", "/"):
            answer = client.get(path)
            assert answer.status_code == 200, (path, answer.text[:300])
        detail = client.get(f"/api/runs/{bad.id}").json()
        assert detail["progress"]["fraction"] is None and detail["waiting"]["until"] is None
    named = _damage_named(caplog)
    for field in ("started_at", "until", "fraction", "updated_at"):
        assert any(field in line for line in named), (field, named)
    assert all(bad.id in line for line in named), named


def test_a_run_waiting_for_its_rate_with_a_due_time_out_of_range_is_shown(
    app_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """App.get_run reads what a pending run over its rate waits for (rate_wait_of: its due
    time). Before: the time that cannot be read raised there, so get_run, `rota run ID` and the
    dashboard's run JSON failed for it."""
    app = app_factory()
    caplog.set_level(logging.WARNING, logger="rota")
    ref = app.task(name="plain")(lambda: None).enqueue()
    sql(app, f"UPDATE rota_runs SET rate_waited = TRUE, rate_name = 'r', due_at = {bad_time(app)} WHERE id = {ref.id}")
    run = app.get_run(ref.id)
    if run.waiting is not None:  # (MySQL's zero date is no later than now: not over its rate,
        # so it shows what else it waits for: rate 'r' is declared by no worker)
        assert run.waiting["kind"] in ("rate", "undeclared") and run.waiting.get("until") is None
    out = CliRunner().invoke(main, ["--database-url", app.database_url, "run", ref.id])
    assert out.exit_code == 0, out.output
    with TestClient(create_app(app), base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        assert client.get(f"/api/runs/{ref.id}").status_code == 200


def test_a_parked_run_with_damaged_rows_can_be_signalled_cancelled_retried_and_pruned(
    app_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    app = app_factory()
    caplog.set_level(logging.WARNING, logger="rota")
    bad, good, waiter = _parked(app, kind="signal")  # a wait of another kind is woken by its time only
    sent = app.signal(bad.id, "go", {"late": True})
    assert sent.stored is True
    assert app.signal(good.id, "go", "ok").woken is True
    start_worker(app)
    assert good.wait(timeout=30).result == "ok"
    done = bad.wait(timeout=30)  # its saved step and wait decode: only their times are damaged
    assert (done.status, done.result) == ("succeeded", {"late": True}), done.error
    assert app.retry_many(status="succeeded", task="waiter") == 2
    other = waiter.enqueue(3)
    wait_for(lambda: app.get_run(other.id).waiting is not None, what="the park")
    rid = int(other.id)
    sql(app, f"UPDATE rota_waits SET until = {bad_time(app)} WHERE run_id = {rid}")
    assert app.cancel(other.id).status in ("cancelled", "pending")
    wait_for(lambda: app.get_run(other.id).status == "cancelled", what="the cancel")
    assert app.store.prune("cancelled", 0, 100) == 1
    with pytest.raises(rota.errors.RunNotFound):
        app.get_run(other.id)
