"""The `rota` command without surprises (issue 22): global options after the subcommand, no
read-only command creating a database, each listing naming the database it read."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import rota
from rota.cli import main

from .conftest import PG_URL, WITH_MYSQL, make_app, require, store_url
from .procs import ROOT, wait_until


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


BASIC = "tests.apps.basic:app"
READ_AND_STEER = (
    ("runs",),
    ("schedules",),
    ("workers",),
    ("status",),
    ("locks",),
    ("run", "1"),
    ("trigger", "nightly"),
    ("pause", "nightly"),
    ("resume", "nightly"),
    ("cancel", "1"),
    ("retry", "1"),
)


def cli(*args: str, env: dict[str, str | None] | None = None) -> tuple[int, str]:
    result = CliRunner(env={"COLUMNS": "200", **(env or {})}).invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


# -- item 3: global options after the subcommand ---------------------------------------------
def test_global_options_are_accepted_after_the_subcommand(db_url: str) -> None:
    app = make_app(db_url)
    handle = app.task(name="t")(lambda: None).enqueue()
    code, out = cli("runs", "--database-url", db_url, "--json")
    assert code == 0, out
    assert [r["id"] for r in json.loads(out)] == [handle.id]
    code, out = cli("status", "--database-url", db_url, "-v", "--log-format", "json")
    assert code == 0 and "pending 1" in out, out
    code, out = cli(
        "enqueue", BASIC, "noop", "--args", "[3]", "--database-url", db_url, env={"ROTA_DATABASE_URL": None}
    )
    assert code == 0, out
    assert app.get_run(out.strip()).args == [3]
    app.close()


def test_a_value_after_the_subcommand_wins(tmp_path: Path) -> None:
    good, missing = f"sqlite:///{tmp_path}/good.db", f"sqlite:///{tmp_path}/missing.db"
    rota.App(good).migrate()
    code, out = cli("--database-url", missing, "runs", "--database-url", good)
    assert code == 0 and "good.db" in out.splitlines()[0], out


def test_every_command_lists_the_global_options_in_its_help() -> None:
    for name in main.commands:
        code, out = cli(name, "--help")
        assert code == 0, out
        assert "--log-level" in out and "--log-format" in out and "--verbose" in out, (name, out)
        if name not in ("explain", "demo"):
            assert "--database-url" in out, (name, out)
    code, out = cli("worker", "--help")
    assert "ROTA_DATABASE_URL" in out and "also accepted before the command" in " ".join(out.split())


def test_an_option_of_some_commands_given_elsewhere_says_where_it_goes() -> None:
    code, out = cli("--json", "runs")
    assert code == 2 and out.count("\n") == 1, out
    assert "--json here: it goes after the command" in out and "(e.g. rota runs --json)" in out, out
    code, out = cli("demo", "--json")
    assert code == 2 and "`rota demo` does not take it" in out and "runs" in out, out
    code, out = cli("runs", "--bogus")
    assert code == 2 and "No such option '--bogus'" in out, out


def test_a_real_worker_takes_database_url_after_app(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/w.db"
    app = make_app(url)
    app.task(name="noop")(lambda i: i)
    handle = app.get_task("noop").enqueue(5)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROTA_")}
    cmd = [sys.executable, "-m", "rota", "worker", BASIC, "--database-url", url, "--poll-interval", "0.05"]
    log = open(tmp_path / "worker.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: app.get_run(handle.id).status == "succeeded", 30, "the run to succeed")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        log.close()
    assert "No such option" not in (tmp_path / "worker.log").read_text()
    app.close()


# -- item 4: no read-only command creates a database; listings name it -------------------------
@pytest.mark.parametrize("args", READ_AND_STEER, ids=lambda a: a[0])
def test_no_read_or_steer_command_creates_a_database(tmp_path: Path, monkeypatch: Any, args: tuple[str, ...]) -> None:
    monkeypatch.chdir(tmp_path)
    code, out = cli(*args, env={"ROTA_DATABASE_URL": None, "ROTA_LOCKS_URL": None})
    assert code == 1 and out.count("\n") == 1 and out.startswith("error: "), out
    assert f"no database at {tmp_path}/rota.db (sqlite:///rota.db, the default" in out, out
    assert "--database-url" in out and "ROTA_DATABASE_URL" in out and "rota migrate" in out, out
    assert not (tmp_path / "rota.db").exists()


def test_the_message_says_where_the_url_came_from(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/typo.db"
    code, out = cli("runs", env={"ROTA_DATABASE_URL": url})
    assert code == 1 and f"no database at {tmp_path}/typo.db" in out and "from ROTA_DATABASE_URL" in out, out
    code, out = cli("--database-url", url, "runs")
    assert code == 1 and "from --database-url" in out, out
    assert not (tmp_path / "typo.db").exists()
    code, out = cli("--database-url", url, "migrate")  # the one command that creates it
    assert code == 0 and (tmp_path / "typo.db").exists()
    code, out = cli("--database-url", url, "runs")
    assert code == 0, out


@pytest.mark.postgres
def test_a_schema_without_rota_tables_is_not_migrated_by_a_read(pg_url: str) -> None:
    code, out = cli("--database-url", pg_url, "runs")
    assert code == 1 and "no rota tables in postgresql://" in out and "rota migrate" in out, out
    app = rota.App(pg_url)
    assert app._store.schema_version()[0] == 0  # nothing was created
    app.close()


@pytest.mark.postgres
def test_a_missing_postgresql_database_is_said_once() -> None:
    require("postgres")
    url = PG_URL.rsplit("/", 1)[0] + "/rota_no_such_database"
    code, out = cli("--database-url", url, "runs")
    assert code == 1 and out.count("\n") == 1, out
    assert out.count('database "rota_no_such_database" does not exist') == 1, out


def test_each_listing_names_the_database_it_read(db_url: str, tmp_path: Path, monkeypatch: Any) -> None:
    app = make_app(db_url)
    app.task(name="t")(lambda: None).enqueue()
    for command in ("runs", "schedules", "workers", "locks"):
        code, out = cli("--database-url", db_url, command)
        assert code == 0, out
        assert out.splitlines()[0].startswith(f"database: {app.database_label}; times: local, "), out
        code, out = cli("--database-url", db_url, command, "--json")
        assert isinstance(json.loads(out), list), out  # JSON unchanged: no header
    app.close()
    monkeypatch.chdir(tmp_path)
    if db_url.startswith("sqlite"):  # the default, relative URL: the absolute path too
        code, out = cli("runs", env={"ROTA_DATABASE_URL": None})
        assert out.splitlines()[0].startswith(f"database: sqlite:///rota.db ({tmp_path}/rota.db); times: local, "), out


def test_a_narrow_terminal_keeps_the_database_whole_on_its_own_line(db_url: str) -> None:
    app = make_app(db_url)
    app.migrate()
    label = f"database: {app.database_label}"
    app.close()
    width = max(len(label) + 2, 40)  # room for the database, not for the times after it
    code, out = cli("--database-url", db_url, "runs", env={"COLUMNS": str(width)})
    assert code == 0, out
    first, second = out.splitlines()[:2]
    assert first == label and "…" not in first and second.startswith("times: local, "), out
