"""`rota status` and `/metrics` say how run counts were counted; `rota schedules` marks a
schedule that cannot be planned (issue 14 follow-ups)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

import rota
from rota.cli import main
from rota.stores.base import NewRun, Outcome

from .conftest import WITH_MYSQL, make_app, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def cli(url: str, *args: str, columns: int = 140) -> tuple[int, str]:
    result = CliRunner(env={"COLUMNS": str(columns)}).invoke(main, ["--database-url", url, *args])
    return result.exit_code, result.output


def _metrics_help(app: rota.App) -> str:
    from starlette.testclient import TestClient

    from rota.web import create_app

    with TestClient(create_app(app), base_url="http://127.0.0.1") as client:
        text = client.get("/metrics").text
    (line,) = [line for line in text.splitlines() if line.startswith("# HELP rota_runs ")]
    return line


def test_status_says_the_counts_are_exact(db_url: str) -> None:
    app = make_app(db_url)
    app.task(name="t")(lambda: None).enqueue()
    code, out = cli(db_url, "status")
    assert code == 0, out
    (runs,) = [line for line in out.splitlines() if line.startswith("runs:")]
    assert "pending 1" in runs and runs.endswith("(exact)") and "~" not in runs
    code, out = cli(db_url, "status", "--json")
    stats = json.loads(out)
    assert stats["runs_counted"] == "exact" and stats["runs_estimated"] == []
    assert _metrics_help(app).endswith("(exact counts)")
    app.close()


@pytest.mark.postgres
def test_status_and_metrics_say_which_counts_are_estimated(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import rota.stores.postgres.store

    monkeypatch.setattr(rota.stores.postgres.store, "EXACT_COUNT_LIMIT", 100)  # the table counts as big
    app = make_app(pg_url)
    store: Any = app.store
    store.insert_runs([NewRun(task="t") for _ in range(300)])
    claimed = store.claim("w", 200, None, 30.0)
    store.finish([Outcome(c.id, c.token, "succeeded", result="1") for c in claimed[:150]])
    with store._read() as s:
        s.q_text("ANALYZE rota_runs")
    code, out = cli(pg_url, "status")
    assert code == 0, out
    (runs,) = [line for line in out.splitlines() if line.startswith("runs:")]
    assert "pending 100" in runs and "running 50" in runs and "succeeded ~" in runs, runs
    assert "estimated" in runs and "cancelled, failed, skipped, succeeded" in runs, runs
    code, out = cli(pg_url, "status", "--json")
    stats = json.loads(out)
    assert stats["runs_counted"] == "estimated"
    assert stats["runs_estimated"] == ["cancelled", "failed", "skipped", "succeeded"]
    help_line = _metrics_help(app)
    assert "estimated" in help_line and "succeeded" in help_line, help_line
    app.close()


def _mark(app: rota.App, name: str, error: str) -> None:
    store: Any = app.store
    with store._tx() as s:
        s.q_text(f"UPDATE rota_schedules SET plan_error = '{error}', next_run_at = NULL WHERE name = '{name}'")


def test_schedules_mark_one_that_cannot_be_planned_without_wrapping(db_url: str) -> None:
    app = make_app(db_url)
    app.task(name="t")(lambda: None)
    app.add_schedule("fine", "t", every=60)
    code, out = cli(db_url, "schedules")
    assert code == 0 and "plan error" not in out and "cannot plan" not in out, out
    app.add_schedule("reports/elsewhere-nightly", "t", cron="0 3 * * *")
    error = "unknown time zone Mars/Olympus: " + "a long explanation " * 20
    _mark(app, "reports/elsewhere-nightly", error)
    for width in (300, 140, 100):
        code, out = cli(db_url, "schedules", columns=width)
        assert code == 0, out
        lines = out.splitlines()
        assert all(len(line) <= width for line in lines), out
        (marked,) = [line for line in lines if "reports/elsewhere-nightly" in line]
        assert "cannot plan!" in marked, out
        (fine,) = [line for line in lines if line.lstrip().startswith("fine")]
        assert "cannot plan" not in fine
    code, out = cli(db_url, "schedules", columns=300)
    assert "plan error" in out and "unknown time zone Mars/Olympus" in out and "…" in out, out
    code, out = cli(db_url, "schedules", "--json")
    listed = {s["name"]: s for s in json.loads(out)}
    assert listed["reports/elsewhere-nightly"]["plan_error"] == error and listed["fine"]["plan_error"] is None
    app.close()
