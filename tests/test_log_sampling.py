"""Sampling of the per-run success lines: the first 20 a second one by one, the rest in one
runs_succeeded line per second; failures never sampled; ROTA_LOG_EVERY_RUN=1 logs all."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest

import rota
from rota.worker.sampling import SuccessSampler, emitter

from .conftest import WITH_MYSQL, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def sampler(first: int = 3) -> tuple[SuccessSampler, Clock, list[tuple[str, dict[str, Any]]]]:
    clock, lines = Clock(), []
    return SuccessSampler(lambda m, f: lines.append((m, f)), first=first, clock=clock), clock, lines


def test_the_first_n_are_logged_the_rest_counted_once_per_window() -> None:
    s, clock, lines = sampler(first=3)
    assert [s.admit("a") for _ in range(3)] == [True, True, True]
    assert [s.admit(t) for t in ("a", "b", "a", "a")] == [False] * 4
    clock.now += 0.999
    assert not s.admit("b") and lines == []  # same window: still counted
    clock.now += 0.002
    assert s.admit("a")  # a new window logs one by one again
    assert len(lines) == 1
    message, fields = lines[0]
    assert fields == {"count": 5, "window": 1.0, "by_task": {"a": 3, "b": 2}}
    assert message.startswith("5 more runs succeeded in the last 1.0 s") and "ROTA_LOG_EVERY_RUN=1" in message
    clock.now += 5
    s.flush()
    assert len(lines) == 1  # nothing counted since: no line


def test_flush_logs_the_partial_window_and_thousands_are_grouped() -> None:
    s, clock, lines = sampler(first=0)
    for _ in range(1234):
        s.admit("t")
    clock.now += 0.25
    s.flush()
    assert lines[0][1]["count"] == 1234 and lines[0][1]["window"] == 0.25
    assert lines[0][0].startswith("1,234 more runs succeeded in the last 0.2 s")


def test_by_task_names_only_the_top_tasks() -> None:
    s, _clock, lines = sampler(first=0)
    for i in range(8):
        for _ in range(i + 1):
            s.admit(f"t{i}")
    s.flush()
    assert lines[0][1]["by_task"] == {"t7": 8, "t6": 7, "t5": 6, "t4": 5, "t3": 4}


def test_a_timer_ends_the_window_without_a_later_success() -> None:
    clock, lines, timers = Clock(), [], []
    s = SuccessSampler(
        lambda m, f: lines.append((m, f)), first=1, clock=clock, later=lambda d, fn: timers.append((d, fn))
    )
    s.admit("a")
    s.admit("a")
    s.admit("a")
    assert len(timers) == 1 and 0.99 < timers[0][0] < 1.01  # one timer per window
    timers[0][1]()
    assert lines == []  # fired early (clock not advanced): nothing yet
    clock.now += 1.0
    timers[0][1]()
    assert [f["count"] for _, f in lines] == [2]


def test_the_summary_line_carries_its_event_and_fields(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("rota.worker")
    with caplog.at_level(logging.INFO, logger="rota"):
        emitter(log, "w1")("2 more", {"count": 2, "window": 1.0, "by_task": {"a": 2}})
    record = caplog.records[-1]
    assert record.levelno == logging.INFO and record.event == "runs_succeeded"  # type: ignore[attr-defined]
    assert record.fields["worker"] == "w1" and record.fields["count"] == 2  # type: ignore[attr-defined]


def _run_all(app: rota.App, n_ok: int, n_bad: int, clock: Clock | None) -> rota.Worker:
    @app.task(name="ok")
    def ok() -> None:
        return None

    @app.task(name="bad", retries=0)
    def bad() -> None:
        raise ValueError("nope")

    for _ in range(n_ok):
        ok.enqueue()
    for _ in range(n_bad):
        bad.enqueue()
    worker = app.worker()
    if clock is not None and worker._decider.sampler is not None:
        sampler = worker._decider.sampler
        sampler.clock, sampler._start = clock, clock()  # a frozen second: one window
    asyncio.run(worker.run_until_idle())
    return worker


def _events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == event]


def test_a_worker_samples_successes_never_failures(app: rota.App, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="rota"):
        _run_all(app, 30, 25, Clock())
    assert len(_events(caplog, "run_succeeded")) == 20
    assert len(_events(caplog, "run_failed")) == 25
    (summary,) = _events(caplog, "runs_succeeded")  # flushed when the worker finished
    assert summary.fields["count"] == 10 and summary.fields["by_task"] == {"ok": 10}  # type: ignore[attr-defined]


def test_log_every_run_logs_all(
    app: rota.App, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROTA_LOG_EVERY_RUN", "1")
    with caplog.at_level(logging.INFO, logger="rota"):
        worker = _run_all(app, 30, 0, None)
    assert worker._decider.sampler is None
    assert len(_events(caplog, "run_succeeded")) == 30 and not _events(caplog, "runs_succeeded")


def test_a_stopping_worker_logs_the_last_summary(app: rota.App, caplog: pytest.LogCaptureFixture) -> None:
    from .conftest import wait_for

    @app.task(name="ok")
    def ok() -> None:
        return None

    with caplog.at_level(logging.INFO, logger="rota"):
        worker = app.worker(install_signal_handlers=False)
        assert worker._decider.sampler is not None
        worker._decider.sampler.later = None  # no timer: only the stop can end the window
        worker._decider.sampler.window = 3600.0
        worker.start()
        for _ in range(25):
            ok.enqueue()
        wait_for(lambda: worker.counters.succeeded == 25, what="25 runs")
        assert not _events(caplog, "runs_succeeded")
        worker.stop(wait=True, timeout=10)
    stopped = [getattr(r, "event", None) for r in caplog.records]
    (summary,) = _events(caplog, "runs_succeeded")
    assert summary.fields["count"] == 5  # type: ignore[attr-defined]
    assert stopped.index("runs_succeeded") < stopped.index("worker_stopped")
