"""A limited run whose plain `def` handler outlives its timeout (both stores). A thread
cannot be killed: recorded timed out at once, the run's limit slot freed in the database
while its handler still ran, and the next run of its key (its own retry included) started
beside it: two at once under `Limit(1)`. Now it keeps its slot until its handler returns,
and its timeout is recorded then. A task without a limit is unchanged: its timeout is
recorded at once and its thread is shown stuck."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import rota

from .conftest import WITH_MYSQL, start_worker, store_url
from .procs import wait_until


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


HANDLER = 1.0  # seconds the handler runs, ignoring its timeout
TIMEOUT = 0.3


def _spans(app: rota.App, limit: rota.Limit | None) -> tuple[rota.Task[..., None], list[tuple[float, float]]]:
    spans: list[tuple[float, float]] = []
    lock = threading.Lock()

    @app.task(name="slow", limit=limit, timeout=TIMEOUT, retries=1, backoff=0)
    def slow(k: int) -> None:
        began = time.monotonic()
        time.sleep(HANDLER)  # does not look at its cancellation
        with lock:
            spans.append((began, time.monotonic()))

    return slow, spans


def _overlap(spans: list[tuple[float, float]]) -> int:
    return max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)


def test_a_limited_run_past_its_timeout_keeps_its_slot_until_its_handler_returns(
    app_factory: Callable[..., rota.App],
) -> None:
    app = app_factory(lease=2.0)
    slow, spans = _spans(app, rota.Limit(1, by="k"))
    first, second = slow.enqueue(1), slow.enqueue(1)
    start_worker(app, concurrency=4, poll_interval=0.05)
    wait_until(lambda: app.get_run(second.id).is_final, 30, "both runs and their retries to end")  # type: ignore[union-attr]
    wait_until(lambda: len(spans) == 4, 10, "every handler to return")
    assert _overlap(spans) == 1, f"two handlers of one key ran at once under Limit(1): {spans}"
    for h in (first, second):
        run = h.refresh()
        assert (run.status, run.attempt) == ("failed", 2), run
        assert run.error is not None and run.error["type"] == "Timeout", run.error
        duration = (run.finished_at - run.started_at).total_seconds()  # type: ignore[operator]
        assert duration >= HANDLER - 0.05, f"recorded before its handler returned: {duration:.2f} s"


def test_a_run_without_a_limit_past_its_timeout_is_recorded_at_once(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory(lease=2.0)
    slow, spans = _spans(app, None)
    h = slow.enqueue(1)
    start_worker(app, concurrency=4, poll_interval=0.05)
    wait_until(lambda: h.refresh().is_final, 30, "the run and its retry to end")
    run = h.refresh()
    assert (run.status, run.attempt) == ("failed", 2), run
    assert (run.finished_at - run.started_at).total_seconds() < HANDLER  # type: ignore[operator]
    wait_until(lambda: len(spans) == 2, 10, "both handlers to return")
    assert _overlap(spans) == 2  # the retry ran beside the stuck thread, fenced by its token


def test_a_limited_run_past_its_timeout_at_shutdown_is_recorded_timed_out_once_its_handler_returns(
    app_factory: Callable[..., rota.App],
) -> None:
    """Handed back, its attempt would be given back: a handler that always hangs would never
    use up its retries across restarts. Recorded at the stop (issue 41, item 1), its limit's
    slot was freed while its thread still ran: the stopped worker keeps it until then."""
    app = app_factory(lease=2.0)
    slow, spans = _spans(app, rota.Limit(1))
    h = slow.enqueue(1)
    worker = start_worker(app, concurrency=2, poll_interval=0.05, shutdown_timeout=0.1)
    wait_until(lambda: h.refresh().status == "running", 10, "the run to start")
    time.sleep(TIMEOUT + 0.1)  # past its timeout: its thread still runs, the run keeps its slot
    assert h.refresh().status == "running"
    worker.stop(wait=True, timeout=10)
    if not spans:
        assert h.refresh().status == "running"  # its thread still runs: still held
    wait_until(lambda: h.refresh().status == "pending", 10, "the timeout to be recorded")
    assert len(spans) == 1  # recorded once the handler returned
    run = h.refresh()
    assert (run.status, run.attempt) == ("pending", 1), run
    assert run.error is not None and run.error["type"] == "Timeout", run.error


def test_a_limited_call_whose_timeout_passed_before_it_got_a_thread_never_starts() -> None:
    """The loop decided it timed out (a stalled loop, a tiny timeout) while its call waited
    for a pool thread: the handler does not run at all."""
    from rota.worker.active import Active
    from rota.worker.executors import ThreadExecutor

    called: list[bool] = []
    executor = ThreadExecutor.__new__(ThreadExecutor)
    executor._call = lambda active, task: called.append(True) or ("ok", "null")  # type: ignore[method-assign]
    active = Active.__new__(Active)
    active.timed_out = True
    assert executor._body(active, None) == ("timeout", None)  # type: ignore[arg-type]
    assert called == []
