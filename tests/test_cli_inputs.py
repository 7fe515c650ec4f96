"""Bad input to `rota`: one `error:` line before anything starts, no traceback, no password;
and text from the database printed without markup or terminal escapes."""

from __future__ import annotations

import json
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import rota
import rota.testing
from rota.cli import main

from . import mysql_db
from .conftest import WITH_MYSQL, make_app, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


BASIC = "tests.apps.basic:app"
PLAIN = "tests.apps.flow_limited:app"  # sets no lease, poll interval or shutdown timeout in code


def cli(*args: str, env: dict[str, str | None] | None = None) -> tuple[int, str]:
    result = CliRunner(env={"COLUMNS": "140", **(env or {})}).invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def one_error_line(code: int, out: str, *needles: str) -> None:
    assert code in (1, 2), out
    assert out.startswith("error: ") and out.count("\n") == 1, out
    assert "Traceback" not in out
    for needle in needles:
        assert needle in out, out


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A migrated, empty database (a read-only command refuses a missing one)."""
    url = f"sqlite:///{tmp_path}/rota.db"
    app = rota.App(url)
    app.migrate()
    app.close()
    return url


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("enqueue", BASIC, "noop", "--delay", "1e300"), ("--delay", "'1e300'", "90s, 15m, 6h or 2d")),
        (("enqueue", BASIC, "noop", "--delay", "36501d"), ("--delay", "'36501d' is too long", "at most 36500d")),
        (("enqueue", BASIC, "noop", "--delay", "nan"), ("--delay", "nan")),
        (("enqueue", BASIC, "noop", "--delay", "-5"), ("--delay", "'-5'", "0 or more")),
        (("enqueue", BASIC, "noop", "--delay", "5x"), ("--delay", "'5x'", "a plain number is seconds")),
        (("enqueue", BASIC, "noop", "--args", '["\\ud800"]'), ("--args", "lone surrogate")),
        (("enqueue", BASIC, "noop", "--args", '["\udcff"]'), ("--args", "lone surrogate")),
        (("enqueue", BASIC, "noop", "--args", "[1"), ("--args", "not JSON")),
        (("enqueue", BASIC, "noop", "--kwargs", "[]"), ("--kwargs", "JSON object")),
        (("enqueue", BASIC, "noop", "--queue", "bad queue!"), ("'bad queue!'",)),
        (
            ("worker", BASIC, "--metrics-port", "99999"),
            ("--metrics-port", "'99999' is not a whole number from 1 to 65535"),
        ),
        (("worker", BASIC, "-q", "mail", "-q", "bad queue!"), ("--queue", "'bad queue!'", "letters, digits")),
        (("worker", BASIC, "--lease", "inf"), ("--lease", "inf")),
        (("worker", PLAIN, "--lease", "0.1"), ("--lease", "'0.1' is not valid", ">= 0.5 and at most one year")),
        (("worker", PLAIN, "--poll-interval", "0.001"), ("--poll-interval", "'0.001'", ">= 0.01")),
        (("worker", PLAIN, "--shutdown-timeout", "-1"), ("--shutdown-timeout", "'-1'", ">= 0 and")),
        (("worker", BASIC, "-c", "0"), ("--concurrency", "0")),
        # click said "'x' is not a valid integer range.": the valid range, in words
        (("worker", BASIC, "-c", "x"), ("--concurrency", "'x' is not a whole number from 1 to 10000")),
        (("worker", BASIC, "--prefetch", "-1"), ("--prefetch", "'-1' is not a whole number from 0 to 100000")),
        (("dashboard", BASIC, "--port", "99999"), ("--port", "99999")),
        (
            ("explain", "* * * * *", "--count", "100000000"),
            ("--count", "'100000000' is not a whole number from 1 to 1000"),
        ),
        (("explain", "* * * * *", "--after", "notadate"), ("--after", "'notadate'", "ISO time")),
        (("runs", "--limit", "0"), ("--limit",)),
        (("runs", "--queue", "a b"), ("--queue", "'a b'", "letters, digits")),
        (("runs", "--queue", "a,b"), ("--queue", "'a,b'", "letters, digits")),
        (("run", "abc"), ("no run with id 'abc'",)),
        (("run", "-5"), ("no run with id '-5'", "integers from 1")),
        (("run", "-12", "--json"), ("no run with id '-12'", "integers from 1")),
        (("cancel", "-5"), ("no run with id '-5'", "integers from 1")),
        (("retry", "-5"), ("no run with id '-5'", "integers from 1")),
        (("enqueue", BASIC, "noop", "--after", "abc"), ("--after", "'abc' is not a run id")),
        (("enqueue", BASIC, "noop", "--unique-for", "10m"), ("--unique-for needs --key",)),
        (("enqueue", BASIC, "noop", "--key", "k", "--unique-for", "0"), ("--unique-for", "'0' must be more than 0")),
        (("retry", "--failed", "--since", "0s"), ("--since", "'0s' must be more than 0")),
        (("retry", "--failed", "--task", "nope"), ("no run of task 'nope' exists", "nothing to retry")),
    ],
)
def test_bad_flags_are_one_line(url: str, args: tuple[str, ...], needles: tuple[str, ...]) -> None:
    code, out = cli("--database-url", url, *args)
    one_error_line(code, out, *needles)


def test_a_negative_number_as_an_option_value_is_not_taken_for_a_run_id(url: str) -> None:
    code, out = cli("--database-url", url, "retry", "--failed", "--task", "-5")
    one_error_line(code, out, "no run of task '-5' exists")  # the option's value, not a run id
    code, out = cli("--database-url", url, "run", "1", "-x")
    one_error_line(code, out, "No such option '-x'")


@pytest.mark.parametrize(
    ("delay", "seconds"), [("5m", 300), ("90s", 90), ("1.5h", 5400), ("2d", 172800), ("45", 45), ("0", 0)]
)
def test_delay_takes_the_durations_of_the_other_flags(url: str, delay: str, seconds: float) -> None:
    code, out = cli("--database-url", url, "enqueue", BASIC, "noop", "--args", "[1]", "--delay", delay, "--json")
    assert code == 0, out
    app = rota.App(url)
    run = app.get_run(json.loads(out)["id"])
    app.close()
    assert (run.due_at - run.created_at).total_seconds() == pytest.approx(seconds, abs=1), (delay, run)


def test_a_busy_metrics_or_dashboard_port_is_refused_before_start(url: str, busy_port: int) -> None:
    code, out = cli("--database-url", url, "worker", BASIC, "--metrics-port", str(busy_port))
    one_error_line(code, out, f"port {busy_port}", "in use")
    code, out = cli(
        "--database-url", url, "dashboard", BASIC, "--host", "0.0.0.0", "--port", str(busy_port), "--token", "t" * 16
    )
    one_error_line(code, out, f"port {busy_port}", "in use")
    code, out = cli("--database-url", url, "worker", BASIC, env={"ROTA_METRICS_PORT": str(busy_port)})
    one_error_line(code, out, "in use")
    code, out = cli("--database-url", url, "dashboard", BASIC, env={"ROTA_DASHBOARD_PORT": "0"})
    one_error_line(code, out, "ROTA_DASHBOARD_PORT='0' is not valid")


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"ROTA_QUEUES": "a b"}, "ROTA_QUEUES"),
        ({"ROTA_METRICS_PORT": "http"}, "ROTA_METRICS_PORT"),
        ({"ROTA_LOG_FORMAT": "xml"}, "ROTA_LOG_FORMAT"),
    ],
)
def test_bad_worker_variables_are_one_line(url: str, env: dict[str, str | None], name: str) -> None:
    code, out = cli("--database-url", url, "worker", BASIC, env=env)
    one_error_line(code, out, f"{name}=")


@pytest.mark.parametrize("flags", [(), ("-c", "4")])
def test_a_bad_variable_stops_the_worker_though_the_app_sets_it_in_code(url: str, flags: tuple[str, ...]) -> None:
    code, out = cli(
        "--database-url", url, "worker", "tests.apps.in_code:app", *flags, env={"ROTA_CONCURRENCY": "seven"}
    )
    one_error_line(code, out, "ROTA_CONCURRENCY='seven' is not valid", "whole number")
    code, out = cli("--database-url", url, "dashboard", BASIC, env={"ROTA_LEASE": "soon"})
    one_error_line(code, out, "ROTA_LEASE='soon' is not valid")


def test_passwords_never_printed() -> None:
    for bad in (
        "postgresq://u:hunter2@localhost/db?password=hunter3",
        "postgresql://u:hunter2@127.0.0.1:1/db?password=hunter3",
    ):
        code, out = cli("--database-url", bad, "runs")
        one_error_line(code, out)
        assert "hunter2" not in out and "hunter3" not in out
    code, out = cli("runs", env={"ROTA_DATABASE_URL": "postgresql://u:hunter2@127.0.0.1:1/db"})
    one_error_line(code, out, "u:***@127.0.0.1")
    assert "hunter2" not in out


def test_markup_and_escapes_from_the_database_are_shown_as_text(db_url: str) -> None:
    app = make_app(db_url)

    @app.task(name="nasty")
    def nasty() -> None:
        raise ValueError("[/] [bold red]not markup[/] \x1b[31mred\x1b[0m \x1b]0;title\x07 bell\x07")

    run = nasty.enqueue()
    rota.testing.run_pending(app)
    for args in (("runs",), ("runs", "--status", "failed"), ("run", run.id)):
        code, out = cli("--database-url", db_url, *args)
        assert code == 0, out
        assert "[/] [bold red]not markup[/]" in out and "\x1b" not in out and "\x07" not in out
        assert "red" in out and "bell" in out
    app.close()


def _corrupt(url: str, sql: str) -> None:
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(sql)
        return
    if url.startswith("mysql"):
        mysql_db.execute(url, sql)
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def test_a_corrupt_row_is_shown_and_the_rest_listed(db_url: str) -> None:
    app = make_app(db_url)
    task = app.task(name="t")(lambda x: x)
    good, bad = task.options(delay=60).enqueue(1), task.options(delay=60).enqueue(2)
    _corrupt(db_url, f"UPDATE rota_runs SET args = '[not json' WHERE id = {bad.id}")
    code, out = cli("--database-url", db_url, "runs")
    assert code == 0 and "corrupt" in out and good.id in out, out
    code, out = cli("--database-url", db_url, "runs", "--json")
    assert code == 0 and not out.startswith("error:"), out  # the reason names "not valid JSON"
    listed = {r["id"]: r for r in json.loads(out)}
    assert set(listed) == {good.id, bad.id} and "corrupt" in listed[bad.id] and "corrupt" not in listed[good.id]
    code, out = cli("--database-url", db_url, "run", bad.id)
    assert code == 0 and "corrupt" in out
    code, out = cli("--database-url", db_url, "cancel", bad.id)
    assert code == 0 and f"run {bad.id} cancelled" in out
    app.close()


def test_a_far_future_row_is_shown_not_a_crash(db_url: str) -> None:
    """A row whose time is past year 9999 (written by an older rota or by hand with SQL) is
    listed as corrupt on both stores: SQLite stores a number, PostgreSQL a timestamptz that
    Python's datetime cannot hold (the store reads it as a marker, not a driver error)."""
    app = make_app(db_url)
    handle = app.task(name="t")(lambda: None).options(delay=60).enqueue()
    far = {"sqlite": "1e12", "mysql": mysql_db.ZERO_DATE}.get(db_url.split(":")[0], "'10000-01-01 00:00:00+00'")
    _corrupt(db_url, f"UPDATE rota_runs SET scheduled_for = {far}, due_at = {far} WHERE id = {handle.id}")
    for args in (("runs",), ("run", handle.id), ("cancel", handle.id), ("runs", "--json")):
        code, out = cli("--database-url", db_url, *args)
        assert code == 0 and "Traceback" not in out and "error:" not in out, out
    code, out = cli("--database-url", db_url, "runs")
    assert "corrupt" in out and handle.id in out, out
    code, out = cli("--database-url", db_url, "runs", "--json")
    assert "scheduled_for" in json.loads(out)[0]["corrupt"], out
    app.close()


def test_the_dashboard_refuses_a_database_that_refuses_it_and_warns_of_one_away(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No such database: one error line before serving. A database that does not answer yet:
    one warning, and it serves (its pages show the error until the database answers)."""
    from urllib.parse import urlsplit, urlunsplit

    from rota import web

    served: list[str] = []
    monkeypatch.setattr(web, "serve", lambda app, **kw: served.append(app.database_label))
    missing = urlunsplit(urlsplit(pg_url)._replace(path="/rota_no_such_database", query=""))
    with socket.socket() as sock:  # a port free now (nothing binds it: serve is replaced)
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    code, out = cli("dashboard", BASIC, "--database-url", missing, "--port", port)
    one_error_line(code, out, 'database "rota_no_such_database" does not exist')
    assert served == []
    with caplog.at_level("WARNING", "rota.cli"):
        code, out = cli("dashboard", BASIC, "--database-url", "postgresql://postgres@127.0.0.1:1/x", "--port", port)
    assert code == 0 and len(served) == 1, out
    assert any(
        "database unavailable" in r.getMessage() and "the dashboard starts" in r.getMessage() for r in caplog.records
    )
