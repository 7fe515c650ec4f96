"""The worker's structured log lines (rota.logs events) and its /metrics endpoint."""

from __future__ import annotations

import io
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

import rota
from rota import logs

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for
from .ports import free_port


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


def events(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]


def test_a_worker_logs_run_transitions_and_poll_summaries_as_json(app: rota.App, captured: io.StringIO) -> None:
    @app.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(name="boom", retries=0)
    def boom() -> None:
        raise ValueError("nope")

    worker = start_worker(app)
    ok, bad = add.enqueue(1, 2), boom.enqueue()
    assert ok.wait(10).status == "succeeded" and bad.wait(10).status == "failed"
    wait_for(lambda: worker.counters.polls >= 2, what="two polls")
    worker.stop(wait=True, timeout=10)
    lines = events(captured)
    by_event = {line["event"]: line for line in lines}
    done = next(line for line in lines if line["event"] == "run_succeeded" and line["run_id"] == ok.id)
    assert done["level"] == "info" and done["logger"] == "rota.worker"
    assert (done["task"], done["attempt"], done["worker"]) == ("add", 1, worker.id)
    assert "schedule" in done and isinstance(done["duration"], float) and done["duration"] >= 0
    failed = next(line for line in lines if line["event"] == "run_failed" and line["run_id"] == bad.id)
    assert failed["task"] == "boom" and "ValueError: nope" in failed["error"]
    assert by_event["run_claimed"]["level"] == "debug"
    summary = by_event["poll_summary"]
    assert summary["level"] == "debug" and summary["worker"] == worker.id
    for key in ("swept", "claimed", "dispatched", "locked_out", "skipped_at_capacity"):
        assert isinstance(summary[key], int), key
    assert sum(line["claimed"] for line in lines if line["event"] == "poll_summary") <= 2
    for name in ("worker_started", "worker_stopping", "worker_stopped"):
        assert by_event[name]["worker"] == worker.id, name


def test_worker_metrics_expose_counters_gauges_and_run_histograms(app: rota.App) -> None:
    pytest.importorskip("prometheus_client")

    @app.task(name="t")
    def t() -> int:
        return 1

    port = free_port()
    worker = start_worker(app, metrics_port=port)
    assert t.enqueue().wait(10).status == "succeeded"
    wait_for(lambda: worker.counters.succeeded == 1, what="the count")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    label = f'worker="{worker.id}"'
    assert f"rota_worker_succeeded_total{{{label}}} 1.0" in text
    assert f"rota_worker_concurrency{{{label}}} {float(worker.concurrency)}" in text
    assert f"rota_worker_stuck{{{label}}} 0.0" in text
    assert 'rota_run_duration_seconds_count{status="succeeded",task="t"} 1.0' in text
    assert 'rota_run_lateness_seconds_count{task="t"} 1.0' in text
