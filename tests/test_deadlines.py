"""Thread handlers' timeouts share one event-loop timer (rota/worker/deadlines.py, issue 41's
performance item): every run has a timeout since the default one, and a timer per run cost
the loop a few microseconds a run. Each run still times out at its own deadline."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable

import rota
from rota.worker.deadlines import Deadlines

from .conftest import start_worker, wait_for


def test_each_run_times_out_at_its_own_deadline_and_an_ended_one_never() -> None:
    async def scenario() -> tuple[list[tuple[str, float, float]], int]:
        loop = asyncio.get_running_loop()
        fired: list[tuple[str, float, float]] = []  # (run, deadline, when it expired)
        deadlines_of: dict[str, float] = {}
        deadlines = Deadlines(lambda run: fired.append((run, deadlines_of[run], loop.time())))
        for run, seconds in (("a", 0.25), ("b", 0.05), ("c", 0.1), ("d", 0.15), ("e", 0.2)):
            deadlines_of[run] = loop.time() + seconds
            deadlines.add(run, seconds)
        deadlines.discard("c")  # ended before its timeout
        await asyncio.sleep(0.12)
        deadlines.discard("e")
        deadlines_of["f"] = loop.time() + 0.01  # a later run with an earlier deadline
        deadlines.add("f", 0.01)
        await asyncio.sleep(0.3)
        return fired, len(deadlines)

    fired, left = asyncio.run(scenario())
    assert [run for run, _, _ in fired] == ["b", "f", "d", "a"], fired
    for run, deadline, at in fired:
        assert deadline - 0.002 <= at < deadline + 0.1, (run, deadline, at)  # (the loop's clock resolution)
    assert left == 0


def test_a_failing_expiry_does_not_keep_the_others_from_theirs() -> None:
    async def scenario() -> list[str]:
        fired: list[str] = []

        def expire(run: str) -> None:
            fired.append(run)
            if run == "a":
                raise RuntimeError("boom")

        deadlines = Deadlines(expire)
        deadlines.add("a", 0.01)
        deadlines.add("b", 0.01)
        await asyncio.sleep(0.1)
        return fired

    assert sorted(asyncio.run(scenario())) == ["a", "b"]


def _timeout_timers(loop: asyncio.AbstractEventLoop, beyond: float) -> int:
    """Live timers of `loop` due more than `beyond` seconds from now (read on the loop)."""

    async def count() -> int:
        now = loop.time()
        scheduled = loop._scheduled  # type: ignore[attr-defined]  # (CPython's timer heap)
        return sum(1 for h in scheduled if not h.cancelled() and h.when() > now + beyond)

    future: concurrent.futures.Future[int] = asyncio.run_coroutine_threadsafe(count(), loop)
    return future.result(timeout=10)


def test_forty_running_thread_handlers_arm_one_timer_for_their_timeouts(
    app_factory: Callable[..., rota.App],
) -> None:
    app = app_factory(default_timeout=300)
    release = threading.Event()

    @app.task(name="waits", retries=0)
    def waits() -> None:
        release.wait(30)

    @app.task(name="own_timeout", timeout=200, retries=0)
    def own_timeout() -> None:
        release.wait(30)

    handles = [waits.enqueue() for _ in range(30)] + [own_timeout.enqueue() for _ in range(10)]
    worker = start_worker(app, concurrency=40)
    try:
        wait_for(lambda: len(worker._executors.inflight) == 40, 20, "40 runs to be running")
        assert worker._loop is not None
        assert _timeout_timers(worker._loop, 100) == 1  # (a timer per run: 40)
    finally:
        release.set()
    wait_for(lambda: all(h.refresh().status == "succeeded" for h in handles), 30, "every run to succeed")
