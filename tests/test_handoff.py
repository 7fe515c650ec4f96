"""The lazy run pool (rota.executor.DaemonPool, lazy=True) and the hand-off of `def`
handlers (rota.worker.handoff): few threads for tiny calls, a thread per blocked call."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import rota
from rota import executor
from rota.executor import DaemonPool
from rota.stores.base import Claimed
from rota.worker.active import Active
from rota.worker.handoff import Handoff

from .conftest import WITH_MYSQL, start_worker, store_url
from .conftest import wait_for as _wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def wait_for(condition: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """conftest's, looking every 5 ms: some pool states here last only moments."""
    _wait_for(condition, timeout, what, step=0.005)


def test_a_lazy_pool_runs_a_burst_of_tiny_calls_on_one_thread() -> None:
    pool = DaemonPool(100, "t", lazy=True)
    done: list[int] = []
    for i in range(200):
        pool.submit(lambda i=i: done.append(i))
    wait_for(lambda: len(done) == 200, what="200 calls")
    assert pool.threads == 1 and sorted(done) == list(range(200))
    pool.close()


def test_a_lazy_pool_grows_a_thread_per_blocked_call() -> None:
    pool = DaemonPool(100, "t", lazy=True)
    release = threading.Event()
    started: list[int] = []
    for i in range(20):
        pool.submit(lambda i=i: (started.append(i), release.wait(10)))
    wait_for(lambda: bool(started), what="the first call")
    deadline = time.monotonic() + 5
    while len(started) < 20 and time.monotonic() < deadline:
        time.sleep(0.002)
        pool.grow()  # the owner's sweep: no call ended, so the threads are blocked
    assert len(started) == 20 and pool.threads == 20
    release.set()
    pool.close()


def test_only_idle_threads_end_a_busy_cpu_alone_ends_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executor, "IDLE", 0.3)  # seconds without a call before a thread ends
    pool = DaemonPool(100, "t", lazy=True)
    release = threading.Event()
    for _ in range(8):
        pool.submit(lambda: release.wait(10))
    while pool.threads < 8:
        time.sleep(0.002)
        pool.grow()
    release.set()
    monkeypatch.setattr(executor, "BUSY", 0.0)  # any CPU counts as busy
    pool.submit(lambda: None)
    wait_for(lambda: pool.backlog == 0)
    assert pool.grow() <= 0 and pool.threads == 8  # calls end with the CPU busy: no thread ends
    wait_for(lambda: pool.threads == 1, what="the idle threads ending (the last one stays)")
    done: list[int] = []
    for i in range(20):
        pool.submit(lambda i=i: done.append(i))
    wait_for(lambda: len(done) == 20, what="20 calls on the remaining thread")
    assert pool.threads == 1 and pool.backlog == 0
    pool.close()


def test_a_thread_kept_busy_does_not_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executor, "IDLE", 0.2)
    pool = DaemonPool(100, "t", lazy=False)  # a thread per call while none is idle
    release = threading.Event()
    pool.submit(lambda: release.wait(10))
    pool.submit(lambda: release.wait(10))
    wait_for(lambda: pool.threads == 2)
    time.sleep(0.5)  # longer than IDLE, but both threads are in a call
    assert pool.threads == 2
    release.set()
    wait_for(lambda: pool.threads == 1, what="one idle thread ending")
    pool.close()


def _active(done: bool) -> Active:
    now = datetime.now(UTC)
    active = Active(Claimed(1, "t", "[]", "{}", 1, 1, 7, None, None, None, now, now, now), None)
    active.done = done
    return active


def test_a_run_decided_while_it_waited_for_a_thread_is_not_started() -> None:
    async def scenario() -> tuple[list[str], list[Active]]:
        delivered: list[str] = []
        returned: list[Active] = []
        handoff = Handoff(10, lambda active, outcome: delivered.append(outcome[0]))
        handoff.loop = asyncio.get_running_loop()
        release = threading.Event()
        ran: list[str] = []
        handoff.run(_active(False), lambda: (release.wait(10), ("ok", "first"))[1], returned.append)
        decided = _active(True)  # e.g. it timed out or lost its lease while it waited
        handoff.run(decided, lambda: (ran.append("body"), ("ok", None))[1], returned.append)
        await asyncio.sleep(0.05)
        release.set()
        for _ in range(200):
            if delivered and returned:
                break
            await asyncio.sleep(0.01)
        handoff.pool.close()
        assert ran == []
        return delivered, returned

    delivered, returned = asyncio.run(scenario())
    assert delivered == ["ok"] and len(returned) == 1 and returned[0].done


def test_concurrency_n_runs_n_blocking_def_handlers_at_once(app: rota.App) -> None:
    """The lazy pool still gives every slot a thread when handlers block."""
    n = 20
    barrier = threading.Barrier(n, timeout=10)

    @app.task(name="meet")
    def meet() -> int:
        return barrier.wait()  # raises BrokenBarrierError unless all n run at once

    worker = start_worker(app, concurrency=n)
    ids = meet.enqueue_many([((), {})] * n)
    wait_for(lambda: worker.counters.succeeded + worker.counters.failed == n, 30, what=f"{n} runs")
    wait_for(lambda: all(app.get_run(i).status not in ("pending", "running") for i in ids), what="the outcomes")
    assert {app.get_run(i).status for i in ids} == {"succeeded"}


def test_a_burst_of_tiny_def_handlers_does_not_start_a_thread_per_slot(app: rota.App) -> None:
    @app.task(name="tiny")
    def tiny() -> None:
        pass

    worker = start_worker(app, concurrency=100)
    tiny.enqueue_many([((), {})] * 300)
    wait_for(lambda: worker.counters.succeeded == 300, what="300 tiny runs")
    assert worker._threads.threads < 50  # not one thread per slot (a hundred would fight for the GIL)


def _look_while(pool: DaemonPool, busy: Callable[[], bool], seconds: float) -> None:
    """The owner's sweep: grow() every 2 ms while `busy()` and for at most `seconds`."""
    deadline = time.monotonic() + seconds
    while busy() and time.monotonic() < deadline:
        time.sleep(0.002)
        pool.grow()


def _blocked_to(pool: DaemonPool, n: int) -> threading.Event:
    """Raise the pool's target to n with n calls that block until the returned event is set."""
    release = threading.Event()
    for _ in range(n):
        pool.submit(lambda: release.wait(10))
    _look_while(pool, lambda: pool.target < n, 5)
    assert pool.target == n
    return release


def _keep_in_flight(pool: DaemonPool, call: Callable[[], None], n: int, until: Callable[[], bool]) -> None:
    """The worker's way: n calls in flight, the next submitted only once one ended, and
    grow() every 2 ms, until `until()` or 3 seconds."""
    ended: queue.SimpleQueue[int] = queue.SimpleQueue()

    def one() -> None:
        call()
        ended.put(1)

    for _ in range(n):
        pool.submit(one)
    deadline, look = time.monotonic() + 3, time.monotonic()
    while not until() and time.monotonic() < deadline:
        with contextlib.suppress(queue.Empty):
            ended.get(timeout=0.001)
            pool.submit(one)
        if time.monotonic() - look >= 0.002:
            pool.grow()
            look = time.monotonic()


def test_short_calls_that_keep_the_cpu_busy_lower_the_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny I/O calls on many threads mostly hand the GIL around: with the CPU busy and every
    running thread ending calls, the pool runs fewer at once, down to FEWEST."""
    pool = DaemonPool(100, "t", lazy=True)
    _blocked_to(pool, 8).set()
    monkeypatch.setattr(executor, "BUSY", 0.0)  # any CPU counts as busy
    done: list[int] = []
    for i in range(4000):
        pool.submit(lambda i=i: (time.sleep(0.0001), done.append(i)))
    _look_while(pool, lambda: len(done) < 4000, 20)
    assert len(done) == 4000
    assert pool.target == executor.FEWEST
    pool.close()


def test_a_target_raised_by_blocked_calls_comes_down_when_no_call_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's slots keep at most `concurrency` calls in flight, so once blocked calls
    raised the target to that, no call ever waits: short calls that keep the CPU busy still
    lower it (the owner submits the next call only after one ended, as the worker does)."""
    pool = DaemonPool(100, "t", lazy=True)
    _blocked_to(pool, 5).set()
    monkeypatch.setattr(executor, "BUSY", 0.0)  # any CPU counts as busy
    _keep_in_flight(pool, lambda: None, 5, lambda: pool.target == executor.FEWEST)
    assert pool.target == executor.FEWEST
    pool.close()


def test_calls_that_block_a_millisecond_get_a_thread_per_call_in_flight() -> None:
    """Calls that sleep 1 ms end often (two threads end four per look), yet each waits on
    nothing but its sleep: with the CPU idle, the pool runs all 5 in flight at once (it
    stayed at 2 when growth also needed fewer calls to end than waited)."""
    pool = DaemonPool(100, "t", lazy=True)
    _keep_in_flight(pool, lambda: time.sleep(0.001), 5, lambda: pool.target == 5)
    assert pool.target == 5
    pool.close()


@pytest.mark.parametrize(
    ("files", "share"),
    [
        ({}, 1.0),  # no cgroup files: the affinity (at least one core here), at most 1
        ({"cpu.max": "max 100000\n"}, 1.0),
        ({"cpu.max": "50000 100000\n"}, 0.5),  # a container limited to half a core
        ({"cpu.max": "25000 100000\n"}, 0.25),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1.0),
        ({"cpu/cpu.cfs_quota_us": "30000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 0.3),
        ({"cpu.max": "garbage\n"}, 1.0),  # unreadable: ignored
    ],
)
def test_the_busy_test_counts_the_cpu_the_process_may_use(tmp_path: Path, files: dict[str, str], share: float) -> None:
    """Waiting calls get a thread while the process uses under BUSY of the CPU it may use:
    in a container capped at half a core, half a core is never reached, so busy is half of
    its quota (else tiny calls would take a thread each and none would ever be given back)."""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert executor.cpu_share(tmp_path) == pytest.approx(share)


def test_a_long_call_hogging_the_cpu_does_not_hold_up_a_waiting_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the CPU busy, waiting calls that see none end get a thread after STALL seconds,
    not when the long call ends."""
    monkeypatch.setattr(executor, "BUSY", 0.0)  # any CPU counts as busy: only STALL adds threads
    pool = DaemonPool(100, "t", lazy=True)
    started: list[float] = []
    spun = threading.Event()

    def spin() -> None:
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            pass
        spun.set()

    pool.submit(spin)
    submitted = time.monotonic()
    pool.submit(lambda: started.append(time.monotonic()))
    _look_while(pool, lambda: not started, 5)
    assert started and started[0] - submitted < 0.5  # not after the 1 s call
    assert pool.target == 2
    assert spun.wait(5)  # (the next test does not share the CPU with it)
    pool.close()


def test_runs_delivered_by_a_sweep_do_not_arm_a_second_sweep() -> None:
    """The worker starts the next run from `deliver`, often inside a sweep: the sweep must
    not arm another timer beside the one the new run armed (chains of sweeps multiplied,
    each looking at the pool every few microseconds, and cost the loop its CPU)."""

    async def scenario() -> tuple[int, int]:
        looks = 0
        finished = 0
        handoff: Handoff

        def deliver(active: Active, outcome: object) -> None:
            nonlocal finished
            finished += 1
            if time.monotonic() < until:
                handoff.run(_active(False), lambda: (time.sleep(0.0005), ("ok", None))[1], lambda _: None)

        handoff = Handoff(4, deliver)
        handoff.loop = asyncio.get_running_loop()
        grow = handoff.pool.grow

        def counted() -> int:
            nonlocal looks
            looks += 1
            return grow()

        handoff.pool.grow = counted  # type: ignore[method-assign]
        until = time.monotonic() + 0.3
        for _ in range(20):  # more calls than the pool runs at once: they wait, sweeps collect
            handoff.run(_active(False), lambda: (time.sleep(0.0005), ("ok", None))[1], lambda _: None)
        while time.monotonic() < until + 0.1:
            await asyncio.sleep(0.01)
        handoff.pool.close()
        return looks, finished

    looks, finished = asyncio.run(scenario())
    assert finished > 100  # the runs flowed
    assert looks <= 0.4 / 0.002 * 1.5, f"{looks} looks in 0.4 s: more than one sweep armed at a time"


def test_close_hands_queued_calls_to_idle_threads_before_ending_them() -> None:
    """Closing must not end idle threads while calls wait behind a busy one (the target
    does not hold them back any more)."""
    pool = DaemonPool(10, "t", lazy=True)
    release = threading.Event()
    done: list[str] = []
    pool.submit(lambda: release.wait(10))
    pool.submit(lambda: done.append("b"))
    _look_while(pool, lambda: not done, 5)  # b waited behind a blocked call: a second thread
    assert done == ["b"] and pool.threads == 2
    pool._target = 1  # as a lowered target leaves it: one call at once, one thread idle
    pool.submit(lambda: done.append("c"))
    time.sleep(0.05)
    assert done == ["b"]  # c waits for the target
    pool.close()
    wait_for(lambda: done == ["b", "c"], 2, "the queued call to run on the idle thread")
    assert not release.is_set()  # while the first call still runs
    release.set()


def test_a_thread_that_cannot_start_leaves_nothing_queued_and_the_pool_usable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = DaemonPool(10, "t", lazy=True)

    def no_thread(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as patched:
        patched.setattr(threading.Thread, "start", no_thread)
        with pytest.raises(RuntimeError, match="can't start new thread"):
            pool.submit(lambda: None)
    assert (pool.backlog, pool.threads) == (0, 0)
    done: list[int] = []
    pool.submit(lambda: done.append(1))
    wait_for(lambda: done == [1], what="a call once threads start again")
    assert pool.threads == 1
    pool.close()
