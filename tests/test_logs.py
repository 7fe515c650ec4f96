"""Structured logs: the JSON formatter, log_event, and a real worker's JSON log lines."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from rota import logs
from rota.cli import main

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    logs.configure("debug", "json", stream=stream)
    yield stream
    logs.configure("warning", "text")


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_log_event_writes_event_and_fields(captured: io.StringIO) -> None:
    log = logging.getLogger("rota.worker")
    logs.log_event(
        log, logging.INFO, "run_succeeded", "run 42 succeeded", run_id="42", task="t", attempt=1, duration=0.5
    )
    log.debug("plain %s", "line", extra={"worker": "w1"})
    first, second = lines(captured)
    assert first["event"] == "run_succeeded" and first["message"] == "run 42 succeeded"
    assert (first["run_id"], first["task"], first["attempt"], first["duration"]) == ("42", "t", 1, 0.5)
    assert first["level"] == "info" and first["logger"] == "rota.worker" and first["ts"].endswith("Z")
    assert second == {**second, "event": "log", "message": "plain line", "worker": "w1", "level": "debug"}


def test_json_lines_redact_passwords_and_carry_the_traceback(captured: io.StringIO) -> None:
    log = logging.getLogger("rota")
    try:
        raise ConnectionError("cannot reach postgresql://u:s3cret@db/x?password=other")
    except ConnectionError:
        log.exception("database unavailable: postgresql://u:s3cret@db/x", extra={"event": "database_unavailable"})
    (line,) = lines(captured)
    assert line["event"] == "database_unavailable" and "ConnectionError" in line["error"]
    assert "s3cret" not in json.dumps(line) and "other" not in json.dumps(line)


def test_an_apps_password_is_redacted_wherever_a_driver_echoes_it(captured: io.StringIO, tmp_path: Path) -> None:
    from rota import App

    App("postgresql://u:Zq7-secret@127.0.0.1:1/db")  # remembers its password; connects on first use
    logging.getLogger("rota").warning('invalid dsn: missing "=" after "Zq7-secret" in connection info')
    assert "Zq7-secret" not in captured.getvalue() and "***" in captured.getvalue()


def test_text_format_redacts_too() -> None:
    stream = io.StringIO()
    logs.configure("info", "text", stream=stream)
    try:
        logging.getLogger("rota").info("on postgresql://u:s3cret@db/x")
    finally:
        logs.configure("warning", "text")
    assert "u:***@db" in stream.getvalue() and "s3cret" not in stream.getvalue()


def test_a_flag_that_loses_to_an_argument_is_logged(captured: io.StringIO, tmp_path: Path) -> None:
    from rota import App
    from rota.cli.running import _flag_or_app

    assert _flag_or_app(App(f"sqlite:///{tmp_path}/x.db", concurrency=2), "concurrency", 9) is None
    (line,) = lines(captured)
    assert line["event"] == "flag_ignored" and line["message"].startswith("--concurrency 9 ignored")


def test_every_documented_event_is_in_the_module_doc() -> None:
    assert logs.__doc__ is not None
    assert all(event in logs.__doc__ for event in logs.EVENTS)


def test_log_flags_and_variables_are_checked() -> None:
    result = CliRunner(env={"ROTA_LOG_LEVEL": "loud"}).invoke(main, ["explain", "* * * * *"])
    assert (
        result.exit_code == 1
        and result.output == "error: ROTA_LOG_LEVEL='loud' is not valid: expected one of debug, info, warning, error\n"
    )
    result = CliRunner().invoke(main, ["--log-format", "xml", "explain", "* * * * *"])
    assert (
        result.exit_code == 2
        and result.output.count("\n") == 1
        and "'xml' is not one of 'text', 'json'" in result.output
    )


def test_worker_json_logs_and_settings_from_the_environment(tmp_path: Path) -> None:
    """A real `rota worker`: ROTA_CONCURRENCY/ROTA_QUEUES apply, -c beats ROTA_CONCURRENCY,
    and with ROTA_LOG_FORMAT=json every stderr line is a JSON object."""
    url = f"sqlite:///{tmp_path}/rota.db"
    env = {**os.environ, "ROTA_CONCURRENCY": "7", "ROTA_QUEUES": "mail,reports", "ROTA_DATABASE_URL": url}
    env |= {"PYTHONUNBUFFERED": "1", "ROTA_TEST_POLL": "0.05"}
    env.pop("ROTA_LOG_FORMAT", None)
    worker = ["worker", "tests.apps.basic:app", "--shutdown-timeout", "1"]
    runs = [
        (["-m", "rota", *worker], {**env, "ROTA_LOG_FORMAT": "json"}),  # the variable
        (["-m", "rota", "--log-format", "json", *worker, "-c", "3"], env),  # the group's flag; -c over variable
    ]
    procs = [subprocess.Popen([sys.executable, *a], cwd=ROOT, env=e, stderr=subprocess.PIPE) for a, e in runs]
    try:
        workers = _wait_for_workers(url, 2)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        outputs = [proc.communicate(timeout=20)[1].decode() for proc in procs]
    assert sorted(w["concurrency"] for w in workers) == [3, 7]
    assert all(w["queues"] == ["mail", "reports"] for w in workers)
    for output in outputs:
        records = [json.loads(line) for line in output.splitlines()]
        assert records and all({"ts", "level", "logger", "event", "message"} <= set(r) for r in records)
        assert any("started" in r["message"] for r in records), output


def _wait_for_workers(url: str, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        result = CliRunner().invoke(main, ["--database-url", url, "workers", "--json"])
        if result.exit_code == 0:
            found = [w for w in json.loads(result.output) if w["state"] == "running"]
            if len(found) >= count:
                return found
        time.sleep(0.2)
    raise AssertionError("workers did not start")
