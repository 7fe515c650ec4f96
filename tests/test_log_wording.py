"""Log lines that say what they mean (issue 22, item 6): a retry gives its backoff apart
from the attempt's duration, a hand-back is an event with run_id and worker, and the demo
prints each run's end once, in one format, without newlines inside a line."""

from __future__ import annotations

import asyncio
import io
import json
import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import rota
from rota import demo, logs

from .conftest import WITH_MYSQL, start_worker, store_url
from .procs import wait_until


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    logs.configure("debug", "json", stream=stream)
    yield stream
    logs.configure("warning", "text")


def events(stream: io.StringIO, name: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]
    return [e for e in lines if e["event"] == name]


def test_a_retry_line_gives_the_backoff_and_the_attempts_duration(app: rota.App, captured: io.StringIO) -> None:
    @app.task(name="flaky", retries=1, backoff=45)
    def flaky() -> None:
        raise ConnectionError("upstream hiccup")

    handle = flaky.enqueue()
    asyncio.run(app.worker(install_signal_handlers=False, flush_interval=0).run_until_idle())
    [line] = events(captured, "run_retrying")
    assert line["retry_in"] == 45 and line["duration"] < 5 and line["run_id"] == handle.id
    assert line["message"].startswith(f"run {handle.id} flaky failed after ")
    assert line["message"].endswith("s (attempt 1/2); retrying in 45 s"), line["message"]
    assert line["error"] == "ConnectionError: upstream hiccup"


def test_a_jittered_backoff_is_given_to_the_millisecond(app: rota.App, captured: io.StringIO) -> None:
    @app.task(name="flaky", retries=1, backoff=rota.Backoff(base=2, jitter=0.5))
    def flaky() -> None:
        raise ConnectionError("upstream hiccup")

    flaky.enqueue()
    asyncio.run(app.worker(install_signal_handlers=False, flush_interval=0).run_until_idle())
    [line] = events(captured, "run_retrying")
    shown = line["message"].rsplit("retrying in ", 1)[1].removesuffix(" s")
    assert len(shown.partition(".")[2]) <= 3 and float(shown) == line["retry_in"], line["message"]  # 2.174, not 2.17393


def test_a_hand_back_is_an_event_with_run_id_and_worker(app: rota.App, captured: io.StringIO) -> None:
    release = threading.Event()

    @app.task(name="slow")
    def slow() -> None:
        release.wait(20)

    worker = start_worker(app, shutdown_timeout=0.2)
    try:
        handle = slow.enqueue()
        wait_until(lambda: handle.refresh().status == "running", 10, "the run to start")
        worker.stop(wait=True, timeout=10)
    finally:
        release.set()  # its thread ran on past the stop: handed back once it returns (issue 41)
    [still] = events(captured, "run_still_running")
    assert still["run_id"] == handle.id and still["worker"] == worker.id and still["level"] == "warning"
    assert still["message"].startswith(f"run {handle.id} slow still running at shutdown: worker {worker.id}")
    wait_until(lambda: handle.refresh().status == "pending", 10, "the hand-back")
    [line] = events(captured, "run_handed_back")
    assert line["run_id"] == handle.id and line["worker"] == worker.id and line["level"] == "warning"
    assert line["message"].startswith(f"run {handle.id} slow handed back: worker {worker.id} shut down")
    assert not [e for e in events(captured, "log") if e["logger"] == "rota.worker"], "every worker line has an event"
    assert "run_handed_back" in logs.EVENTS and "hand_back_failed" in logs.EVENTS


def test_the_demo_prints_each_end_once_and_never_breaks_a_line(tmp_path: Path, monkeypatch: Any) -> None:
    out, log = io.StringIO(), io.StringIO()
    monkeypatch.setattr(demo, "console", Console(file=out, width=50, force_terminal=False))
    monkeypatch.setattr(random, "random", lambda: 0.0)  # demo.flaky fails every attempt
    logs.configure("warning", "text", stream=log)
    try:
        demo.run_demo(f"sqlite:///{tmp_path}/demo.db", seconds=6, dashboard_port=None)
    finally:
        logs.configure("warning", "text")
    lines = out.getvalue().splitlines()
    hint = next(line for line in lines if line.startswith("Try in another terminal: "))
    assert hint.endswith(f"--database-url sqlite:///{tmp_path}/demo.db runs"), lines[:4]
    assert lines[0].endswith("Ctrl-C stops (drains first)."), lines[:4]
    retries = [line for line in lines if " retry run " in line]
    assert retries and all("ConnectionError: upstream hiccup" in line and "; retry in 1 s" in line for line in retries)
    keys = [line.split("run ", 1)[1] for line in lines if " retry run " in line or " failed run " in line]
    assert len(keys) == len(set(keys)), keys  # each failed attempt printed once
    assert "flaky" not in log.getvalue(), log.getvalue()  # not a second time by the log handler
