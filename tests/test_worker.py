"""Workers in this process (a thread each), against both stores."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

import rota

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def test_runs_sync_and_async_tasks_and_records_the_attempt(app: rota.App) -> None:
    @app.task(name="add")
    def add(a: int, b: int) -> dict[str, int]:
        return {"sum": a + b}

    @app.task(name="double")
    async def double(x: int) -> int:
        await asyncio.sleep(0.01)
        return x * 2

    worker = start_worker(app)
    one = add.enqueue(1, 2).wait(10)
    two = double.enqueue(21).wait(10)
    assert (one.status, one.result, two.status, two.result) == (
        "succeeded",
        {"sum": 3},
        "succeeded",
        42,
    )
    assert one.worker == worker.id and worker.id.startswith(f"{socket.gethostname()}:")
    assert one.started_at is not None and one.finished_at is not None and one.started_at <= one.finished_at
    assert one.attempts == [
        {
            "attempt": 1,
            "worker": worker.id,
            "started_at": rota.models.iso(one.started_at),
            "finished_at": rota.models.iso(one.finished_at),
            "status": "succeeded",
            "error": None,
        }
    ]


def test_failures_retry_with_backoff_and_keep_every_attempts_error(app: rota.App) -> None:
    calls: list[int] = []

    @app.task(name="flaky", retries=2, backoff=rota.Backoff(base=0.05, factor=2, jitter=0))
    def flaky(n: int) -> int:
        calls.append(n)
        if len(calls) < 3:
            raise ConnectionError(f"attempt {len(calls)} failed")
        return n

    start_worker(app)
    run = flaky.enqueue(7).wait(10)
    assert (run.status, run.result, run.attempt) == ("succeeded", 7, 3)
    statuses = [a["status"] for a in run.attempts]
    assert statuses == ["failed", "failed", "succeeded"]
    first = run.attempts[0]["error"]
    assert first["type"] == "ConnectionError" and first["message"] == "attempt 1 failed"
    assert "Traceback" in first["traceback"] and "in flaky" in first["traceback"]


def test_retries_exhausted_ends_failed_with_the_last_error(app: rota.App) -> None:
    @app.task(name="boom", retries=1, backoff=0)
    def boom() -> None:
        raise ValueError("no good")

    start_worker(app)
    run = boom.enqueue().wait(10)
    assert (run.status, run.attempt) == ("failed", 2)
    assert run.error is not None and run.error["message"] == "no good"
    assert [a["status"] for a in run.attempts] == ["failed", "failed"]


def test_retry_on_limits_which_exceptions_retry(app: rota.App) -> None:
    @app.task(name="picky", retries=3, backoff=0, retry_on=[TimeoutError])
    def picky() -> None:
        raise KeyError("not retryable")

    start_worker(app)
    run = picky.enqueue().wait(10)
    assert (run.status, run.attempt) == ("failed", 1)


def test_pass_context_gives_the_run_context(app: rota.App) -> None:
    seen: list[rota.RunContext] = []

    @app.task(name="ctx", pass_context=True)
    def ctx_task(ctx: rota.RunContext, x: int) -> int:
        seen.append(ctx)
        return x

    start_worker(app)
    run = ctx_task.enqueue(5).wait(10)
    (ctx,) = seen
    assert (ctx.run_id, ctx.attempt, ctx.token, ctx.task) == (run.id, 1, run.token, "ctx")
    assert ctx.scheduled_for == run.scheduled_for and ctx.cancelled is False


def test_concurrency_bounds_simultaneous_runs(app: rota.App) -> None:
    lock = threading.Lock()
    active = [0]
    peak = [0]

    @app.task(name="busy")
    def busy() -> None:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1

    ids = busy.enqueue_many([((), {})] * 20)
    start_worker(app, concurrency=3)
    for run_id in ids:
        assert rota.RunHandle(app, run_id).wait(20).status == "succeeded"
    assert peak[0] == 3


def test_a_hung_sync_job_times_out_keeps_its_slot_until_it_returns_and_its_late_result_is_discarded(
    app: rota.App,
) -> None:
    release = threading.Event()

    @app.task(name="hang", timeout=0.3)
    def hang() -> str:
        release.wait(30)
        return "late"

    @app.task(name="quick")
    def quick() -> str:
        return "ok"

    worker = start_worker(app, concurrency=1)
    hung = hang.enqueue()
    run = hung.wait(10)
    assert run.status == "failed" and run.error is not None and run.error["type"] == "Timeout"
    assert "exceeded its timeout of 0.3 s" in run.error["message"]
    assert [a["status"] for a in run.attempts] == ["timed out"]  # as in history before a retry
    waiting = quick.enqueue()
    time.sleep(0.5)
    assert waiting.refresh().status == "pending"  # the body still runs: its slot is held
    assert worker.stuck == 1
    release.set()
    assert waiting.wait(10).status == "succeeded"
    assert hung.refresh().status == "failed" and hung.refresh().result is None
    assert worker.counters.timed_out == 1 and worker.stuck == 0


def test_an_async_job_times_out_and_is_retried(app: rota.App) -> None:
    attempts: list[int] = []

    @app.task(name="slow", timeout=0.2, retries=1, backoff=0, pass_context=True)
    async def slow(ctx: rota.RunContext) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            await asyncio.sleep(30)
        return "second time lucky"

    start_worker(app)
    run = slow.enqueue().wait(10)
    assert (run.status, run.result, attempts) == ("succeeded", "second time lucky", [1, 2])
    assert run.attempts[0]["status"] == "timed out"


def test_a_hung_job_does_not_stop_the_poll_loop(app: rota.App) -> None:
    @app.task(name="hang", timeout=5)
    def hang() -> None:
        time.sleep(3)

    @app.task(name="quick")
    def quick() -> int:
        return 1

    start_worker(app, concurrency=2)
    hang.enqueue()
    started = time.monotonic()
    assert quick.enqueue().wait(10).status == "succeeded"
    assert time.monotonic() - started < 2.5


def test_cancel_a_running_async_run(app: rota.App) -> None:
    started = threading.Event()

    @app.task(name="forever")
    async def forever() -> None:
        started.set()
        await asyncio.sleep(60)

    start_worker(app)
    handle = forever.enqueue()
    assert started.wait(10)
    app.cancel(handle.id)
    run = handle.wait(10)
    assert run.status == "cancelled" and run.error is not None and run.error["type"] == "Cancelled"


def test_cancel_a_running_sync_run_that_polls_ctx_cancelled(app: rota.App) -> None:
    @app.task(name="cooperative", pass_context=True)
    def cooperative(ctx: rota.RunContext) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if ctx.cancelled:
                raise RuntimeError("stopping as asked")
            time.sleep(0.01)
        return "finished"

    start_worker(app, heartbeat_interval=0.2)
    handle = cooperative.enqueue()
    wait_for(lambda: handle.refresh().status == "running", what="the run to start")
    app.cancel(handle.id)
    assert handle.wait(10).status == "cancelled"


def test_delayed_runs_start_when_due_not_at_the_next_poll(app: rota.App) -> None:
    @app.task(name="stamp")
    def stamp() -> float:
        return time.time()

    start_worker(app, poll_interval=5.0)
    time.sleep(0.3)  # the worker is idle, sleeping up to 5 s
    handle = stamp.options(delay=0.5).enqueue()
    run = handle.wait(10)
    assert run.started_at is not None
    late = (run.started_at - run.scheduled_for).total_seconds()
    assert 0 <= late < 1.0


def test_stop_keeps_a_run_whose_handler_still_runs_until_it_returns_then_hands_it_back(app: rota.App) -> None:
    """Issue 41 item 1, in a process that goes on: handed back at stop(), the run was claimed
    and run again elsewhere while its thread still ran. It stays held by the stopped worker,
    its lease renewed (no rescue takes it), until the handler returns; then it is handed back."""
    started, release = threading.Event(), threading.Event()

    @app.task(name="long")
    def long_job() -> None:
        started.set()
        release.wait(30)

    worker = start_worker(app, shutdown_timeout=0.3, lease=1.0)
    handle = long_job.enqueue()
    assert started.wait(10)
    began = time.monotonic()
    assert worker.stop(wait=True, timeout=10)
    assert time.monotonic() - began < 3
    time.sleep(2.5)  # two leases: renewed by the stopped worker, nothing to rescue
    assert app.store.rescue() == []
    run = handle.refresh()
    assert (run.status, run.attempt) == ("running", 1), run
    release.set()
    wait_for(lambda: handle.refresh().status == "pending", 10, "the run to be handed back")
    run = handle.refresh()
    assert run.attempt == 0 and run.history[-1]["status"] == "handed back", run


def test_stop_hands_back_a_run_whose_handler_ended_at_the_stop(app: rota.App) -> None:
    """A handler that ends when asked (ctx.cancelled) is handed back at once, as before."""
    started = threading.Event()

    @app.task(name="polite", pass_context=True)
    def polite(ctx: rota.RunContext) -> None:
        started.set()
        while not ctx.cancelled:
            time.sleep(0.01)

    worker = start_worker(app, shutdown_timeout=0.3)
    handle = polite.enqueue()
    assert started.wait(10)
    assert worker.stop(wait=True, timeout=10)
    wait_for(lambda: handle.refresh().status == "pending", 10, "the run to be handed back")
    run = handle.refresh()
    assert run.attempt == 0 and run.history[-1]["status"] == "handed back", run


def test_stop_waits_for_short_runs_to_finish(app: rota.App) -> None:
    started = threading.Event()

    @app.task(name="short")
    def short() -> str:
        started.set()
        time.sleep(0.5)
        return "done"

    worker = start_worker(app, shutdown_timeout=10)
    handle = short.enqueue()
    assert started.wait(10)
    assert worker.stop(wait=True, timeout=10)
    assert handle.refresh().status == "succeeded"


def test_stats_report_counts_workers_and_capacity(app: rota.App) -> None:
    @app.task(name="t")
    def t() -> None: ...

    worker = start_worker(app, concurrency=4)
    t.enqueue().wait(10)
    stats = app.stats()
    assert stats["runs"]["succeeded"] == 1 and stats["workers"] == 1 and stats["capacity"] == 4
    assert stats["worker_id"] == worker.id


def test_worker_options_are_validated(app: rota.App) -> None:
    with pytest.raises(rota.ConfigurationError, match="concurrency must be a positive integer, got 0"):
        app.worker(concurrency=0)
    with pytest.raises(
        rota.ConfigurationError, match=r"lease must be a number of seconds from 0.5 to a year \(31536000\), got -1"
    ):
        app.worker(lease=-1)
    with pytest.raises(rota.ConfigurationError, match="heartbeat_interval .* must be shorter than the lease"):
        app.worker(lease=1, heartbeat_interval=2)


def test_retention_prunes_old_finished_runs(app_factory: Callable[..., rota.App], clock: rota.FakeClock) -> None:
    app = app_factory(clock=clock, retention={"succeeded": timedelta(days=7), "failed": timedelta(days=30)})

    @app.task(name="t")
    def t() -> None: ...

    from rota.stores.base import Outcome

    t.enqueue_many([((), {})] * 5)
    for c in app.store.claim("w", 5, None, 30):
        app.store.finish(
            [
                Outcome(
                    c.id,
                    c.token,
                    "succeeded" if c.id % 2 else "failed",
                    result="null",
                    error='{"type":"X"}',
                )
            ]
        )
    clock.advance(timedelta(days=8))
    worker = app.worker()
    asyncio.run(worker._prune(app.retention))
    remaining = {r.status for r in app.list_runs()}
    assert remaining == {"failed"}
    assert worker.counters.pruned == 3


def test_threads_stuck_in_timed_out_handlers_hold_their_slots_without_spinning(app: rota.App) -> None:
    release = threading.Event()
    started: list[int] = []

    @app.task(name="stuck", timeout=0.05)
    def stuck() -> None:
        started.append(1)
        release.wait(30)

    @app.task(name="quick")
    def quick() -> str:
        return "ok"

    worker = start_worker(app, concurrency=2)
    stuck.enqueue_many([((), {})] * 6)
    wait_for(lambda: worker.counters.timed_out == 2, what="two timeouts")
    handle = quick.enqueue()
    cpu = time.process_time()
    time.sleep(1.0)
    assert handle.refresh().status == "pending"  # both slots are held by running bodies
    assert len(started) == 2 and worker.stuck == 2  # concurrency is a hard cap
    assert time.process_time() - cpu < 0.5  # the poll loop waited; it did not spin
    release.set()
    assert handle.wait(10).status == "succeeded"
    wait_for(lambda: worker.counters.succeeded == 5, what="the other four and the quick one")
    assert worker.stuck == 0 and len(started) == 6


def test_wait_async_awaits_the_final_run(app: rota.App) -> None:
    @app.task(name="t")
    def t() -> int:
        return 7

    start_worker(app)
    handle = t.enqueue()
    assert asyncio.run(handle.wait_async(10)).result == 7
    with pytest.raises(rota.WaitTimeout):
        asyncio.run(t.options(delay=3600).enqueue().wait_async(0.1))


def test_a_running_retry_shows_no_error_of_its_own(app: rota.App) -> None:
    """`rota run ID` printed the first attempt's error under the second one while it ran (the
    row keeps the last error until the run ends): the running attempt has no outcome yet."""
    release = threading.Event()

    @app.task(name="flaky", retries=1, backoff=0, pass_context=True)
    def flaky(ctx: rota.RunContext) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")
        release.wait(30)

    start_worker(app)
    handle = flaky.enqueue()
    try:
        wait_for(lambda: handle.refresh().attempt == 2 and handle.refresh().started_at is not None, 20, "attempt 2")
        first, current = handle.refresh().attempts
        assert first["error"]["type"] == "RuntimeError", first
        assert (current["status"], current["error"]) == ("running", None), current
    finally:
        release.set()
    run = handle.wait(20)
    assert run.status == "succeeded" and run.attempts[-1]["error"] is None, run


def test_a_stopping_worker_reads_draining_at_once(app: rota.App) -> None:
    """After SIGTERM `rota workers` read `running` until the next heartbeat (up to a third of
    the lease, 10 s by default) although the worker was draining."""
    started, release = threading.Event(), threading.Event()

    @app.task(name="long")
    def long_job() -> None:
        started.set()
        release.wait(30)

    worker = start_worker(app, lease=30.0, shutdown_timeout=20)
    long_job.enqueue()
    try:
        assert started.wait(10)
        time.sleep(0.2)  # past the start's registry write
        worker.stop(wait=False)
        wait_for(lambda: [w.state for w in app.list_workers()] == ["draining"], 3, "the draining state")
    finally:
        release.set()
    assert worker.stop(wait=True, timeout=20)
