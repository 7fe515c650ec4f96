"""An `async def` handler's calls in threads (asyncio.to_thread, loop.run_in_executor(None, ...))
keep its run as a `def` handler's thread does (rota/worker/offload.py). A cancelled await ends
the coroutine, not the thread: the run was handed back, cancelled or timed out at once, its
limit's slot freed, and the next run of its key started beside the thread still running.
Workers in this process; the process path (SIGTERM to `rota worker`) is in
tests/test_stop_while_running.py."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import rota
from rota.worker.offload import RUN, RunThreads, install

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


async def in_thread(how: str, fn: Callable[[], Any]) -> Any:
    if how == "to_thread":
        return await asyncio.to_thread(fn)
    return await asyncio.get_running_loop().run_in_executor(None, fn)


@pytest.mark.parametrize("how", ["to_thread", "run_in_executor"])
def test_stop_keeps_an_async_run_whose_thread_still_runs_until_it_ends_then_hands_it_back(
    app: rota.App, how: str
) -> None:
    started, release = threading.Event(), threading.Event()

    def blocking() -> None:
        started.set()
        release.wait(30)

    @app.task(name="offloaded")
    async def offloaded() -> None:
        await in_thread(how, blocking)

    worker = start_worker(app, shutdown_timeout=0.3, lease=1.0)
    handle = offloaded.enqueue()
    assert started.wait(10)
    began = time.monotonic()
    assert worker.stop(wait=True, timeout=10)
    assert time.monotonic() - began < 3
    time.sleep(2.5)  # two leases: renewed by the stopped worker, nothing to rescue
    assert app.store.rescue() == []
    run = handle.refresh()
    assert (run.status, run.attempt) == ("running", 1), run  # (it was handed back at the stop)
    release.set()
    wait_for(lambda: handle.refresh().status == "pending", 10, "the run to be handed back")
    run = handle.refresh()
    assert run.attempt == 0 and run.history[-1]["status"] == "handed back", run


def _limited(app: rota.App, ends: dict[str, float], release: threading.Event, **options: Any) -> Any:
    """A limited task: "hold" blocks in a thread until `release`, another key returns at once;
    each records when its handler (and its thread) ended."""

    def blocking(key: str) -> None:
        if key == "hold":
            release.wait(30)
        ends[key] = time.time()

    @app.task(name="limited", limit=rota.Limit(1, by="key"), **options)
    async def limited(key: str, n: int) -> None:
        started = time.time()
        ends.setdefault(f"start{n}", started)
        await asyncio.to_thread(blocking, key if n == 1 else f"second{n}")

    return limited


def test_a_cancelled_async_run_keeps_its_limit_slot_until_its_thread_ends(app: rota.App) -> None:
    ends: dict[str, float] = {}
    release = threading.Event()
    limited = _limited(app, ends, release)
    start_worker(app, concurrency=2, heartbeat_interval=0.2)
    first = limited.enqueue("hold", 1)
    wait_for(lambda: "start1" in ends, what="the first run to start")
    second = limited.enqueue("hold", 2)
    app.cancel(first.id)
    time.sleep(1.0)  # the cancellation reached the worker: the coroutine was cancelled
    assert first.refresh().status == "running" and "start2" not in ends  # the thread still runs
    release.set()
    assert first.wait(10).status == "cancelled"
    assert second.wait(10).status == "succeeded"
    assert ends["start2"] >= ends["hold"]  # the second started once the first one's thread had ended


def test_a_timed_out_async_run_with_a_limit_keeps_its_slot_until_its_thread_ends(app: rota.App) -> None:
    ends: dict[str, float] = {}
    release = threading.Event()
    limited = _limited(app, ends, release, timeout=0.3)
    worker = start_worker(app, concurrency=2)
    first = limited.enqueue("hold", 1)
    wait_for(lambda: "start1" in ends, what="the first run to start")
    second = limited.enqueue("hold", 2)
    time.sleep(1.0)  # past its timeout
    assert first.refresh().status == "running" and "start2" not in ends
    release.set()
    run = first.wait(10)
    assert run.status == "failed" and run.error is not None and run.error["type"] == "Timeout", run
    assert second.wait(10).status == "succeeded"
    assert ends["start2"] >= ends["hold"]
    assert worker.counters.timed_out == 1 and worker.stuck == 0


def test_a_timed_out_async_run_without_a_limit_keeps_its_worker_slot_until_its_thread_ends(app: rota.App) -> None:
    """As a `def` handler past its timeout: decided at once, its slot held (stuck)."""
    release = threading.Event()

    @app.task(name="hang", timeout=0.3)
    async def hang() -> None:
        await asyncio.to_thread(release.wait, 30)

    @app.task(name="quick")
    def quick() -> str:
        return "ok"

    worker = start_worker(app, concurrency=1)
    run = hang.enqueue().wait(10)
    assert run.status == "failed" and run.error is not None and run.error["type"] == "Timeout", run
    waiting = quick.enqueue()
    time.sleep(0.5)
    assert waiting.refresh().status == "pending" and worker.stuck == 1  # the thread keeps the slot
    release.set()
    assert waiting.wait(10).status == "succeeded"
    assert worker.stuck == 0


def test_an_async_run_that_returns_before_its_thread_ends_is_decided_at_once(app: rota.App) -> None:
    """A handler that stops awaiting its thread (a wait_for that timed out) and returns ended
    of its own accord: its outcome is written at once (its timeout cannot hold it running
    forever, a stop cannot hand a success back to run again); the thread keeps its worker
    slot (stuck) until it ends."""
    release, gone = threading.Event(), threading.Event()

    def blocking() -> None:
        release.wait(30)
        gone.set()

    @app.task(name="impatient", timeout=1.0)
    async def impatient() -> str:
        try:
            await asyncio.wait_for(asyncio.to_thread(blocking), 0.1)
        except TimeoutError:
            return "gave up"
        return "done"

    worker = start_worker(app, concurrency=2)
    run = impatient.enqueue().wait(5)
    assert (run.status, run.result, gone.is_set()) == ("succeeded", "gave up", False)
    assert worker.stuck == 1  # the thread still runs: it keeps its worker slot
    release.set()
    wait_for(lambda: worker.stuck == 0, 10, "the thread's end")
    assert gone.is_set()


def test_a_run_that_left_a_call_behind_is_not_handed_back_at_a_stop(app: rota.App) -> None:
    """Fire and forget (run_in_executor(None, f) not awaited): the handler succeeded before
    the stop; the stop does not hand the run back to run again."""
    release = threading.Event()

    @app.task(name="forget")
    async def forget() -> str:
        asyncio.get_running_loop().run_in_executor(None, release.wait, 30)
        return "sent"

    worker = start_worker(app)
    ref = forget.enqueue()
    assert ref.wait(5).status == "succeeded"
    stopper = threading.Thread(target=worker.stop, kwargs={"wait": True, "timeout": 10})
    stopper.start()
    time.sleep(0.3)
    release.set()
    stopper.join(15)
    run = ref.refresh()
    assert (run.status, run.result, run.attempt) == ("succeeded", "sent", 1)


def test_an_async_run_whose_lease_is_lost_keeps_its_worker_slot_until_its_thread_ends(
    app_factory: Callable[..., rota.App],
) -> None:
    """As tests/test_reclaim.py for a `def` handler: the run was rescued and claimed again by
    this worker; the older attempt is lost, its coroutine cancelled, its thread in its slot."""
    app = app_factory(lease=120.0)
    gate = threading.Event()
    calls: list[int] = []

    @app.task(name="slow", retries=2)
    async def slow() -> str:
        calls.append(1)
        if len(calls) == 1:
            await asyncio.to_thread(gate.wait, 60)
            return "old"
        return "new"

    handle = slow.enqueue()
    worker = app.worker(install_signal_handlers=False, concurrency=2, heartbeat_interval=60, poll_interval=0.05)
    worker.start()
    try:
        wait_for(lambda: handle.refresh().status == "running", what="the first attempt")
        store: Any = app.store
        with store._tx() as s:  # what another worker's rescue did
            s.q_text(
                f"UPDATE rota_runs SET status = 'pending', owner = NULL, lease_until = NULL WHERE id = {int(handle.id)}"
            )
        slow.enqueue()  # a wake-up: the worker claims what is due now
        wait_for(lambda: len(calls) >= 2 and handle.refresh().status == "succeeded", what="the new attempt")
        assert worker.counters.lost == 1 and worker.stuck == 1  # the old attempt's thread still runs
    finally:
        gate.set()
    wait_for(lambda: worker.stuck == 0 and not worker.inflight, what="the old attempt's thread to end")
    assert handle.refresh().result == "new" and worker.free_slots == 2
    worker.stop(wait=True, timeout=10)


def test_the_loop_keeps_its_own_default_executor_and_calls_count_against_the_run() -> None:
    from concurrent.futures import ThreadPoolExecutor

    own = ThreadPoolExecutor(1, thread_name_prefix="own")

    async def main() -> tuple[str, str, int]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(own)
        install(loop)
        install(loop)  # (once)
        executor = getattr(loop, "_default_executor", None)
        assert isinstance(executor, RunThreads)
        active: Any = type("A", (), {"threads": None})()
        RUN.set(active)
        release = threading.Event()
        pending = loop.run_in_executor(None, release.wait, 10)
        running = active.threads.running()
        release.set()
        await pending
        name = await asyncio.to_thread(lambda: threading.current_thread().name)
        return name, type(executor).__name__, running

    name, executor, running = asyncio.run(main())
    assert name.startswith("own") and executor == "RunThreads" and running == 1
