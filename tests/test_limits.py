"""The limits a user meets, each refused with one line naming the value and what is valid
(issue 21): the worker's poll interval and lease, dates, JSON depth, names, queue names,
run ids and database paths. docs/reference/limits.md lists them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from click.testing import CliRunner

import rota
from rota import config
from rota.cli import main

from .conftest import WITH_MYSQL, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


BASIC = "tests.apps.basic:app"


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


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for setting in config.SETTINGS.values():
        monkeypatch.delenv(setting.env, raising=False)


# -- poll interval and lease (item 14) -----------------------------------------------------
@pytest.mark.parametrize(
    ("env", "raw", "floor"),
    [
        ("ROTA_POLL_INTERVAL", "1e-300", ">= 0.01"),
        ("ROTA_POLL_INTERVAL", "0.005", ">= 0.01"),
        ("ROTA_LEASE", "1e-300", ">= 0.5"),
        ("ROTA_LEASE", "0.4", ">= 0.5"),
    ],
)
def test_absurdly_small_poll_or_lease_variables_are_refused(
    monkeypatch: pytest.MonkeyPatch, env: str, raw: str, floor: str
) -> None:
    monkeypatch.setenv(env, raw)
    with pytest.raises(rota.ConfigurationError) as info:
        rota.App("sqlite:///:memory:")
    assert str(info.value) == f"{env}={raw!r} is not valid: expected a number of seconds {floor} and at most one year"


def test_the_lower_bounds_themselves_are_accepted(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("ROTA_POLL_INTERVAL", "0.01")
    monkeypatch.setenv("ROTA_LEASE", "1")
    app = rota.App(f"sqlite:///{tmp_path}/rota.db")
    assert (app.poll_interval, app.lease) == (0.01, 1.0)
    worker = app.worker(install_signal_handlers=False)
    assert (worker.poll_interval, worker.lease) == (0.01, 1.0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"poll_interval": 1e-300},
            r"poll_interval must be a number of seconds from 0.01 to a year \(31536000\), got 1e-300",
        ),
        ({"lease": 0.001}, r"lease must be a number of seconds from 0.5 to a year \(31536000\), got 0.001"),
        (
            {"heartbeat_interval": 1e-9},
            r"heartbeat_interval must be a number of seconds from 0.01 to a year \(31536000\), got 1e-09",
        ),
    ],
)
def test_absurd_worker_arguments_are_refused(tmp_path: Any, options: dict[str, Any], message: str) -> None:
    app = rota.App(f"sqlite:///{tmp_path}/rota.db")
    with pytest.raises(rota.ConfigurationError, match=message):
        app.worker(**options)
    option, value = next(iter(options.items()))
    if option != "heartbeat_interval":
        with pytest.raises(rota.ConfigurationError, match=message):
            rota.App(f"sqlite:///{tmp_path}/rota.db", **{option: value})


def _worker_command(tmp_path: Any, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """`rota worker` for an App that leaves its timings to flags and variables, in a child
    process (a bound not enforced would leave it running: the timeout ends the test)."""
    (tmp_path / "timings_app.py").write_text("import rota\napp = rota.App()\n")
    environ = {**os.environ, "ROTA_DATABASE_URL": f"sqlite:///{tmp_path}/rota.db", **(env or {})}
    command = [sys.executable, "-m", "rota", "worker", "timings_app:app", *args]
    done = subprocess.run(command, cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=60)
    return done.returncode, done.stderr


def test_the_worker_command_refuses_a_tiny_lease_or_poll_in_one_line(tmp_path: Any) -> None:
    code, err = _worker_command(tmp_path, "--poll-interval", "1e-300")
    one_error_line(code, err, "--poll-interval", "1e-300", ">= 0.01")
    code, err = _worker_command(tmp_path, env={"ROTA_LEASE": "1e-300"})
    one_error_line(code, err, "ROTA_LEASE='1e-300' is not valid", ">= 0.5")


def test_the_settings_table_states_the_bounds() -> None:
    table = config.markdown_table()
    assert "at least 0.5 " in config.SETTINGS["lease"].help and "at least 0.01" in config.SETTINGS["poll_interval"].help
    assert "at least 0.01" in table


# -- dates (item 5) ------------------------------------------------------------------------
@pytest.fixture
def west_of_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process's local zone is New York (a user west of UTC)."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(
    "run_at",
    [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(1, 1, 1, 12, tzinfo=timezone(timedelta(hours=-5))),
        datetime(1969, 12, 31, 23, 59, tzinfo=UTC),
    ],
)
def test_a_run_at_before_1970_is_refused(app: rota.App, run_at: datetime) -> None:
    t = app.task(name="t")(lambda: None)
    with pytest.raises(rota.ConfigurationError) as info:
        t.options(run_at=run_at).enqueue()
    assert str(info.value) == (
        f"run_at {run_at.isoformat()} is too far in the past: runs must be due from 1970-01-01T00:00:00Z on "
        "(a time in the past is due at once; for now, leave run_at out)"
    )
    assert app.list_runs() == []


def test_a_run_at_in_the_past_since_1970_is_due_at_once(app: rota.App) -> None:
    t = app.task(name="t")(lambda: None)
    handle = t.options(run_at=datetime(1970, 1, 1, tzinfo=UTC)).enqueue()
    assert app.get_run(handle.id).scheduled_for == datetime(1970, 1, 1, tzinfo=UTC)


def test_rota_runs_west_of_utc_shows_a_run_stored_at_year_1(app: rota.App, west_of_utc: None) -> None:
    """A row written before the bound (or by hand) is still listed, in UTC, not a crash."""
    handle = app.task(name="t")(lambda: None).enqueue()
    store: Any = app.store
    year_one = "'0001-01-01 00:00:00+00'" if store.dialect == "postgresql" else "-62135596800"
    if store.dialect == "mysql":  # below DATETIME's supported range (year 1000): a hand edit's
        year_one = "'0001-01-01 00:00:00'"
    with store._tx() as s:
        s.q_text(f"UPDATE rota_runs SET scheduled_for = {year_one}, due_at = {year_one} WHERE id = {int(handle.id)}")
    code, out = cli("--database-url", app.database_url, "runs")
    assert code == 0, out
    assert " 1-01-01 00:00 " in out  # shown in UTC (strftime writes year 1 as "1")


# -- queue names (item 16) -----------------------------------------------------------------
@pytest.mark.parametrize("queue", ["q\n", "mail\n", "\nq", "q\r\n"])
def test_a_queue_name_with_a_newline_fails_the_pattern(app: rota.App, queue: str) -> None:
    t = app.task(name="t")(lambda: None)
    with pytest.raises(rota.ConfigurationError, match=r"invalid queue name"):
        t.options(queue=queue).enqueue()
    with pytest.raises(rota.ConfigurationError, match=r"invalid queue name"):
        app.task(name="u", queue=queue)(lambda: None)
    with pytest.raises(rota.ConfigurationError):
        app.worker(queues=[queue], install_signal_handlers=False)
    assert app.list_runs() == []


def test_a_worker_queue_flag_or_variable_with_a_newline_is_one_line(tmp_path: Any) -> None:
    one_error_line(*_worker_command(tmp_path, "-q", "q\n"), "--queue", "'q\\n'")
    one_error_line(*_worker_command(tmp_path, env={"ROTA_QUEUES": "mail,q\n"}), "ROTA_QUEUES='mail,q\\n'")


# -- JSON depth (item 6) -------------------------------------------------------------------
def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def test_arguments_nested_more_than_100_levels_are_refused_naming_the_argument(app: rota.App) -> None:
    from rota.serialization import MAX_DEPTH

    t = app.task(name="t")(lambda *a, **k: None)
    assert MAX_DEPTH == 100
    assert t.enqueue(_nested(99), data={"k": _nested(98)}).id  # 100 levels, the outer list included
    for args, kwargs in (((_nested(100),), {}), ((), {"data": {"k": _nested(99)}}), ((_nested(100_000),), {})):
        with pytest.raises(rota.SerializationError, match=r"is nested more than 100 levels deep") as info:
            t.enqueue(*args, **kwargs)
        assert len(str(info.value)) < 300
    assert len(app.list_runs()) == 1


def test_a_result_too_deep_to_encode_fails_the_run_with_a_clear_error(app: rota.App) -> None:
    from .conftest import start_worker

    @app.task(name="deep")
    def deep() -> list[Any]:
        return _nested(100_000)

    handle = deep.enqueue()
    start_worker(app)
    run = handle.wait(timeout=15)
    assert run.status == "failed" and run.error is not None
    assert "the result of deep() is nested too deeply to store as JSON" in run.error["message"]


@pytest.mark.parametrize("depth", [900, 100_000])
def test_rota_runs_and_rota_run_survive_deeply_nested_stored_json(app: rota.App, depth: int) -> None:
    """A row written by hand or another client: a depth the decoder cannot read here is shown
    as corrupt; one it can is shown. Never a RecursionError."""
    handle = app.task(name="t")(lambda: None).enqueue()
    store: Any = app.store
    text = "[" * depth + "]" * depth
    with store._tx() as s:
        s.q_text(
            f"UPDATE rota_runs SET args = {store._p('a')}, result = {store._p('a')} WHERE id = {int(handle.id)}", a=text
        )
    for command in (["runs"], ["runs", "--json"], ["run", handle.id], ["run", handle.id, "--json"]):
        code, out = cli("--database-url", app.database_url, *command)
        assert code == 0 and "RecursionError" not in out, out
        if depth > 10_000:
            assert "corrupt" in out


def test_enqueue_args_nested_too_deeply_is_one_line(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/rota.db"
    deep = "[" * 100_000 + "]" * 100_000
    one_error_line(*cli("--database-url", url, "enqueue", BASIC, "noop", "--args", deep), "--args", "nested too deeply")
    over = json.dumps([_nested(100)])
    one_error_line(*cli("--database-url", url, "enqueue", BASIC, "noop", "--args", over), "nested more than 100 levels")


# -- run ids (item 18) ---------------------------------------------------------------------
@pytest.mark.parametrize("raw", ["1_0", "١", "١٠", "+1", " 1", "1 ", "0x1", "１", "1.0", "0", "9223372036854775808"])
def test_cli_run_ids_are_ascii_digits_only(app: rota.App, raw: str) -> None:
    t = app.task(name="t")(lambda: None)
    handles = [t.options(delay=3600).enqueue() for _ in range(10)]  # runs 1 to 10 exist
    assert [h.id for h in handles][:1] == ["1"] and handles[-1].id == "10"
    for command in ("cancel", "run", "retry"):
        code, out = cli("--database-url", app.database_url, command, raw)
        one_error_line(code, out, f"no run with id {raw!r}", "ASCII digits")
    assert all(r.status == "pending" for r in app.list_runs())
    with pytest.raises(rota.RunNotFound, match="written in ASCII digits"):
        app.cancel(raw)


def test_plain_run_ids_still_work(app: rota.App) -> None:
    t = app.task(name="t")(lambda: None)
    handle = t.options(delay=3600).enqueue()
    code, out = cli("--database-url", app.database_url, "cancel", handle.id)
    assert code == 0 and out == f"run {handle.id} cancelled\n", out
    assert app.get_run(int(handle.id)).status == "cancelled"
