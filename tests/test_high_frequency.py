"""High-frequency schedules (issue 21 item 19, from the seed's warnAboutHighFrequencyJobs): a
schedule firing more often than a threshold (ROTA_HIGH_FREQUENCY, default 60 s; 0: off)
gets one warning per schedule when a worker starts (event schedule_high_frequency), and is
marked in `rota schedules`, the schedules JSON and /api/schedules."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import rota
from rota.cli import main
from rota.timing.frequency import is_high_frequency, shortest_cron_gap
from rota.web import create_app

from .conftest import WITH_MYSQL, start_worker, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROTA_HIGH_FREQUENCY", raising=False)


def _wait_running(worker: rota.Worker) -> None:
    deadline = time.monotonic() + 15
    while worker.state != "running":
        assert time.monotonic() < deadline, "the worker did not start"
        time.sleep(0.02)


def _events(caplog: pytest.LogCaptureFixture) -> dict[str, logging.LogRecord]:
    found: dict[str, logging.LogRecord] = {}
    for record in caplog.records:
        if getattr(record, "event", None) == "schedule_high_frequency":
            name = record.fields["schedule"]  # type: ignore[attr-defined]
            assert name not in found, f"two warnings for {name}"
            found[name] = record
    return found


def test_the_threshold_rule() -> None:
    assert is_high_frequency(None, 59, "UTC", 60) and not is_high_frequency(None, 60, "UTC", 60)
    assert not is_high_frequency(None, 1, "UTC", 0)  # 0: off
    assert not is_high_frequency("* * * * *", None, "UTC", 60)  # once a minute is not more often than 60 s
    assert is_high_frequency("*/2 * * * *", None, "UTC", 300) and not is_high_frequency("*/5 * * * *", None, "UTC", 300)
    assert is_high_frequency("0,1 3 * * *", None, "Europe/Berlin", 120)  # twice a day, a minute apart
    assert shortest_cron_gap("0,1 3 * * *", "Europe/Berlin") == 60.0
    assert shortest_cron_gap("* * * * *", "Mars/Olympus") is None  # not judged where it cannot be read


def test_one_warning_per_high_frequency_schedule_at_worker_start(
    app_factory: Callable[..., rota.App], caplog: pytest.LogCaptureFixture
) -> None:
    app = app_factory(high_frequency=120)

    @app.schedule(every=10, name="code-fast")
    def fast() -> None: ...

    @app.schedule(cron="*/5 * * * *", name="code-cron")
    def every_five() -> None: ...

    app.task(name="t")(lambda: None)
    app.add_schedule("stored-fast", "t", cron="*/1 * * * *")
    app.add_schedule("stored-slow", "t", every=3600)
    app.add_schedule("paused-fast", "t", every=5)
    app.pause("paused-fast")
    caplog.set_level(logging.WARNING, logger="rota")
    _wait_running(start_worker(app, poll_interval=0.05))
    warned = _events(caplog)
    assert set(warned) == {"code-fast", "stored-fast"}
    assert warned["code-fast"].fields == {"schedule": "code-fast", "interval": 10.0, "threshold": 120.0}  # type: ignore[attr-defined]
    assert "'stored-fast' fires with cron '*/1 * * * *' as often as every 60 s" in warned["stored-fast"].getMessage()
    assert "more often than every 120 s" in warned["code-fast"].getMessage()


def test_the_default_threshold_is_60_s_and_0_turns_it_off(
    app_factory: Callable[..., rota.App], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = app_factory()
    assert app.high_frequency == 60.0
    app.task(name="t")(lambda: None)
    app.add_schedule("fast", "t", every=30)
    app.add_schedule("minutely", "t", every=60)
    caplog.set_level(logging.WARNING, logger="rota")
    worker = start_worker(app)
    _wait_running(worker)
    assert set(_events(caplog)) == {"fast"}
    worker.stop(wait=True, timeout=10)
    caplog.clear()
    monkeypatch.setenv("ROTA_HIGH_FREQUENCY", "0")
    quiet = app_factory()
    assert quiet.high_frequency == 0.0
    _wait_running(start_worker(quiet))
    assert _events(caplog) == {}
    assert [s.high_frequency for s in quiet.list_schedules()] == [False, False]


def test_the_warning_also_says_when_the_worker_polls_too_slowly(
    app_factory: Callable[..., rota.App], caplog: pytest.LogCaptureFixture
) -> None:
    app = app_factory()
    app.task(name="t")(lambda: None)
    app.add_schedule("hummingbird", "t", every=1)
    caplog.set_level(logging.WARNING, logger="rota")
    _wait_running(start_worker(app, poll_interval=1.5))
    (record,) = _events(caplog).values()
    message = record.getMessage()
    assert "'hummingbird' fires every 1 s, more often than this worker polls (every 1.5 s)" in message
    assert "high-frequency schedule (more often than every 60 s)" in message
    assert sum("hummingbird" in r.getMessage() for r in caplog.records) == 1


def test_listings_mark_high_frequency_schedules(app: rota.App) -> None:
    app.task(name="t")(lambda: None)
    app.add_schedule("fast", "t", every=5)
    app.add_schedule("slow", "t", cron="0 3 * * *")
    assert {s.name: s.high_frequency for s in app.list_schedules()} == {"fast": True, "slow": False}
    assert app.get_schedule("fast").to_json()["high_frequency"] is True
    runner = CliRunner(env={"COLUMNS": "200"})
    listed = runner.invoke(main, ["--database-url", app.database_url, "schedules", "--json"])
    assert listed.exit_code == 0, listed.output
    assert {s["name"]: s["high_frequency"] for s in json.loads(listed.output)} == {"fast": True, "slow": False}
    table = runner.invoke(main, ["--database-url", app.database_url, "schedules"])
    rows: dict[str, Any] = {line.split()[0]: line for line in table.output.splitlines()[2:] if line.strip()}
    assert "high frequency" in rows["fast"] and "high frequency" not in rows["slow"]
    with TestClient(create_app(app), base_url="http://127.0.0.1") as client:
        api = client.get("/api/schedules").json()
        assert {s["name"]: s["high_frequency"] for s in api} == {"fast": True, "slow": False}
        assert client.get("/api/schedules/fast").json()["high_frequency"] is True
        assert 's.high_frequency ? [" ", el("span"' in client.get("/static/views.js").text


def test_a_bad_threshold_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROTA_HIGH_FREQUENCY", "soon")
    with pytest.raises(rota.ConfigurationError, match=r"ROTA_HIGH_FREQUENCY='soon' is not valid: expected a number"):
        rota.App("sqlite:///x.db")
