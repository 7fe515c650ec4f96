"""An idle worker sleeps (issue 20, W12: an idle worker under 1 % of a core): with nothing to
run, its event loop wakes for its own timers (poll, heartbeat), not for the SQLite
`data_version` watch (a thread looks at the file, and wakes the loop only when it changed)
nor for the loop watchdog (it beats only while an `async def` handler runs). A commit by
another connection still wakes it at once."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import rota
from rota.worker.wakeups import DueTimes, Wakeups, _Seen

from .conftest import MYSQL, WITH_MYSQL, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def _loop_wakeups(worker: rota.Worker, seconds: float) -> int:
    """How many times the worker's event loop slept in its selector (and woke) in `seconds`
    (a select with a zero timeout only looks, between callbacks ready to run)."""
    loop: Any = worker._loop
    selector = loop._selector
    calls = 0
    select = selector.select

    def counted(timeout: float | None = None) -> Any:
        nonlocal calls
        calls += timeout is None or timeout > 0
        return select(timeout)

    selector.select = counted
    try:
        time.sleep(seconds)
    finally:
        selector.select = select
    return calls


def test_an_idle_worker_sleeps_and_a_commit_still_wakes_it(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory(lease=30.0)

    @app.task(name="greet")
    def greet(name: str) -> str:
        return f"hello {name}"

    app.migrate()
    worker = start_worker(app, poll_interval=30.0, concurrency=2)
    wait_for(lambda: worker._loop is not None and app.list_workers(), what="the worker")
    time.sleep(0.5)  # started: its first poll and heartbeat are done
    wakeups = _loop_wakeups(worker, 2.0)
    # Its poll and heartbeat timers only: 60 before on SQLite (20 watch looks and 10
    # watchdog beats a second), 40 on PostgreSQL (psycopg's LISTEN wait woke every 0.1 s).
    assert wakeups <= 5, f"{wakeups} loop wake-ups in 2 s of idling"

    other = app_factory(lease=30.0)  # its own store: its commit reaches the worker through the database

    @other.task(name="greet")
    def greet_elsewhere(name: str) -> str:
        return f"hello {name}"

    started = time.monotonic()
    handle = greet_elsewhere.enqueue("ada")
    assert handle.wait(5).status == "succeeded"
    assert time.monotonic() - started < 2.0  # woken, not polled (poll interval 30 s)

    watchers = [t for t in threading.enumerate() if t.name == "rota-data-version"]
    assert len(watchers) == (not app.database_url.startswith("postgres"))  # MySQL: its change probe
    worker.stop(wait=True, timeout=10)
    assert not any(t.is_alive() for t in watchers)  # ended with the worker, before the store closes


@pytest.mark.parametrize("db_url", [MYSQL], indirect=True)
def test_a_run_another_process_enqueues_is_claimed_at_the_quick_probe_s_look(
    app_factory: Callable[..., rota.App],
) -> None:
    """MySQL has no NOTIFY: an idle worker looks at the quick probe (the newest run id and
    the token counter) every 10-20 ms and claims at once when a new run appears,
    without reading what is due first (poll_state) and long before its poll (30 s)."""
    app = app_factory(lease=30.0)
    looks, seen = [0], []  # the quick probe's looks; the reads and claims since the enqueue
    store: Any = app.store
    for name in ("change_probe", "poll_state", "claim", "finish_and_claim"):
        method = getattr(store, name)

        def counted(*args: Any, _name: str = name, _method: Any = method) -> Any:
            if _name == "change_probe":
                looks[0] += 1
            else:
                seen.append(_name)
            return _method(*args)

        setattr(store, name, counted)

    @app.task(name="greet")
    def greet() -> None:
        pass

    app.migrate()
    worker = start_worker(app, poll_interval=30.0, concurrency=2)
    wait_for(lambda: worker._loop is not None and app.list_workers(), what="the worker")
    time.sleep(0.5)  # started: its first poll is done, it looks at the probe
    assert looks[0] >= 10, looks  # every 10-20 ms: at least 10 looks in 0.5 s

    other = app_factory(lease=30.0)  # its own store and connections: as another process's
    greet_elsewhere = other.task(name="greet")(lambda: None)
    seen.clear()
    started = time.monotonic()
    assert greet_elsewhere.enqueue().wait(5).status == "succeeded"
    assert time.monotonic() - started < 2.0  # woken by the probe, not polled (poll interval 30 s)
    claims = [i for i, name in enumerate(seen) if name != "poll_state"]
    assert claims and "poll_state" not in seen[: claims[0]], seen  # claimed at once, no read first


class _File:
    """A SQLite file's data_version, moved by hand (another process committing)."""

    version = 1

    def data_version(self) -> int:
        return self.version


def test_a_commit_seen_while_every_slot_is_busy_wakes_the_worker_once_one_frees() -> None:
    file, free = _File(), [0]
    wakeups = Wakeups(lambda: file, DueTimes(), lambda: free[0])  # type: ignore[arg-type,return-value]

    async def scenario() -> tuple[bool, bool]:
        changed, stop = asyncio.Event(), threading.Event()
        look = threading.Thread(target=wakeups._look, args=(file, asyncio.get_running_loop(), changed, stop))
        look.start()
        try:
            await asyncio.sleep(0.5)  # looked at least once (every 0.2 s while no slot is free)
            file.version = 2  # committed while the worker is full
            await asyncio.sleep(0.6)
            woken_while_full = changed.is_set()
            free[0] = 1
            await asyncio.wait_for(changed.wait(), 5.0)
            return woken_while_full, changed.is_set()
        finally:
            stop.set()
            look.join(5)

    assert asyncio.run(scenario()) == (False, True)


@pytest.mark.parametrize(
    ("before", "after", "told"),
    [
        ((7, None, 3, 0, 0), (8, None, 3, 0, 1), {"run"}),  # a new due run: claimed at once, nothing read
        ((7, None, 3, 0, 0), (8, None, 4, 0, 1), {"run", "change"}),  # and a claim elsewhere
        ((7, None, 3, 0, 0), (7, None, 3, 0, 1), {"change"}),  # a run became due
        ((7, None, 3, 0, 0), (7, None, 3, 1, 0), {"change"}),  # a cancellation asked
        (1, 2, {"change"}),  # SQLite's data_version: a commit of any kind
    ],
)
def test_a_whole_look_tells_a_new_run_without_a_read_of_what_is_due(before: Any, after: Any, told: set[str]) -> None:
    """MySQL's whole probe ends with the due runs, which a new run moves too: the claim told
    at once takes it, so the loop is not also sent to read what is due first (a flaky CI
    run saw that read land before the claim)."""
    file = _File()
    wakeups = Wakeups(lambda: file, DueTimes(), lambda: 1)  # type: ignore[arg-type,return-value]
    seen = _Seen()
    seen.version = seen.looked = before
    file.version = after  # type: ignore[assignment]
    kinds: list[str] = []
    wakeups._tell = lambda loop, changed, kind: kinds.append(kind)  # type: ignore[method-assign]
    wakeups._whole_look(file, seen, None, None)  # type: ignore[arg-type]
    assert set(kinds) == told
