"""The `rota` command (database-only commands and enqueue), through click's runner."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

import rota
import rota.testing
from rota.cli import main
from rota.stores.sqlstore.queries import latest_version, load_migrations

from .conftest import WITH_MYSQL, make_app, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


RUN_FIELDS = {
    "id",
    "task",
    "schedule",
    "status",
    "attempt",
    "scheduled_for",
    "started_at",
    "finished_at",
    "worker",
    "result",
    "error",
}


def cli(url: str, *args: str) -> tuple[int, str]:
    result = CliRunner(env={"COLUMNS": "300"}).invoke(main, ["--database-url", url, *args])
    return result.exit_code, result.output


def test_runs_run_status_and_workers(db_url: str) -> None:
    app = make_app(db_url)
    app.task(name="ok")(lambda: {"fine": True})
    app.task(name="bad")(lambda: 1 / 0)
    good = app.get_task("ok").enqueue()
    bad = app.get_task("bad").enqueue()
    rota.testing.run_pending(app)

    code, out = cli(db_url, "runs", "--json")
    assert code == 0
    runs = json.loads(out)
    assert [r["id"] for r in runs] == [bad.id, good.id]
    assert set(runs[0]) >= RUN_FIELDS
    assert runs[1]["result"] == {"fine": True} and runs[1]["finished_at"].endswith("Z")
    assert runs[0]["status"] == "failed" and runs[0]["error"]["type"] == "ZeroDivisionError"

    code, out = cli(db_url, "runs", "--status", "failed")
    assert code == 0 and "ZeroDivisionError" in out and "bad" in out
    code, out = cli(db_url, "run", bad.id)
    assert code == 0 and "division by zero" in out and "Traceback" in out
    code, out = cli(db_url, "run", "424242")
    assert code == 1 and "no run with id '424242'" in out
    code, out = cli(db_url, "status", "--json")
    assert code == 0 and json.loads(out)["runs"]["succeeded"] == 1
    code, out = cli(db_url, "workers", "--json")
    assert code == 0 and isinstance(json.loads(out), list)
    app.close()


def test_cancel_retry_and_enqueue(db_url: str, monkeypatch: object) -> None:
    app = make_app(db_url)
    handle = app.task(name="later")(lambda: None).options(delay=3600).enqueue()
    code, out = cli(db_url, "cancel", handle.id)
    assert code == 0 and f"run {handle.id} cancelled" in out
    code, out = cli(db_url, "cancel", handle.id)
    assert code == 0 and "already cancelled" in out
    code, out = cli(db_url, "retry", handle.id)
    assert code == 0 and f"(retry of {handle.id})" in out
    new_id = out.split()[1]
    assert app.get_run(new_id).retry_of == handle.id

    code, out = cli(db_url, "enqueue", "tests.apps.basic:app", "noop", "--args", "[7]", "--json")
    assert code == 0, out
    run = app.get_run(json.loads(out)["id"])
    assert (run.task, run.args) == ("noop", [7])
    code, out = cli(db_url, "enqueue", "tests.apps.basic:app", "nope")
    assert code == 1 and "no task named 'nope'" in out and "did you mean 'noop'" in out
    code, out = cli(db_url, "enqueue", "tests.apps.basic:app", "noop", "--args", "{bad")
    assert code == 2 and "not JSON" in out
    app.close()


def test_runs_of_an_unknown_task_warn_with_a_close_name(db_url: str) -> None:
    app = make_app(db_url)
    app.task(name="shop.charge")(lambda: None).enqueue()
    app.close()  # a task no App declares any more: its runs still list
    runner = CliRunner(env={"COLUMNS": "300"})
    result = runner.invoke(main, ["--database-url", db_url, "runs", "--task", "shop.chrage", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout) == [], result.output
    assert result.stderr == (
        "warning: no run of task 'shop.chrage' exists (did you mean 'shop.charge'?): "
        "--task takes the full task name, as the task column shows it\n"
    )
    for args in (["--task", "shop.charge"], ["--task", "shop.charge", "--status", "failed"]):
        result = runner.invoke(main, ["--database-url", db_url, "runs", *args])
        assert result.exit_code == 0 and result.stderr == "", result.output  # it exists: no warning
    assert "shop.charge" in runner.invoke(main, ["--database-url", db_url, "runs", "--task", "shop.charge"]).stdout


def test_migrate_is_idempotent(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/m.db"
    code, out = cli(url, "migrate", "--dry-run")
    assert code == 0 and "would apply: 0001_initial" in out
    code, out = cli(url, "migrate")
    assert code == 0 and "applied: 0001_initial" in out
    code, out = cli(url, "migrate")
    latest = latest_version(load_migrations("sqlite"))
    assert code == 0 and f"up to date (version {latest} of {latest})" in out


def test_bad_database_url_is_one_clear_line(tmp_path: object) -> None:
    code, out = cli("oracle://x@y/z", "runs")
    assert code == 1 and "unsupported database URL scheme 'oracle'" in out and "Traceback" not in out


def test_steering_an_unknown_schedule_says_where_the_names_are(db_url: str) -> None:
    """`rota pause nope` said only "no active schedule named 'nope'": nothing on what is valid
    when no stored name is close."""
    app = make_app(db_url)
    app.add_schedule("nightly-report", app.task(name="report")(lambda: None), cron="0 3 * * *")
    for command in ("pause", "resume", "trigger"):
        code, out = cli(db_url, command, "nope")
        assert code == 1 and out.count("\n") == 1, out
        assert "'nope'" in out and "`rota schedules` lists them" in out, out
        code, out = cli(db_url, command, "nightly-reprot")
        assert "did you mean 'nightly-report'" in out and "rota schedules" not in out, out
    app.close()
