"""Runs claimed ahead of free slots (rota.worker.prefetch): held under a renewed lease,
started as slots free, never started once stopped, cancelled or lost; rescued after kill -9."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import rota
import rota.worker.prefetch
from rota.worker import Worker
from rota.worker.prefetch import Prefetch, default_limit, prefetch_limit

from .conftest import WITH_MYSQL, start_worker, store_url
from .procs import WorkerProcs, wait_until
from .test_crashes import enqueue, log_lines


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.fixture(autouse=True)
def any_duration_is_short(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefetch on whatever the handlers' durations on a loaded machine (the rule that turns
    it off for long handlers has its own test below)."""
    monkeypatch.setattr(rota.worker.prefetch, "WINDOW", 100.0)


class Held:
    """A task whose run 0 returns at once (so the worker sees short runs and a backlog)
    and whose other runs wait for `release`; `started` lists the runs that started."""

    def __init__(self, app: rota.App) -> None:
        self.started: list[int] = []
        self.release = threading.Event()

        @app.task(name="held", retries=2)
        def held(i: int) -> int:
            self.started.append(i)
            if i:
                self.release.wait(30)
            return i

        self.task = held

    def enqueue(self, n: int) -> list[rota.RunHandle]:
        return [self.task.enqueue(i) for i in range(n)]


def _holding(app: rota.App, worker: rota.Worker, handles: list[rota.RunHandle], n: int) -> list[rota.RunHandle]:
    """Wait until the worker holds `n` runs it has not started; return their handles."""
    wait_until(lambda: len(worker._prefetch.held) >= n, 10, f"{n} runs held ahead")
    held = {str(run_id) for run_id in worker._prefetch.held}
    return [h for h in handles if h.id in held]


def test_held_runs_keep_their_lease_and_are_handed_back_at_shutdown_uncounted(
    app_factory: Callable[..., rota.App],
) -> None:
    app = app_factory(lease=1.0)
    job = Held(app)
    handles = job.enqueue(5)
    worker = start_worker(app, concurrency=1, prefetch=2)
    held = _holding(app, worker, handles, 2)
    assert job.started == [0, 1]  # one slot: run 1 runs, two more are held
    time.sleep(2.5)  # more than two leases: renewed by the heartbeat
    assert app.store.rescue() == []
    for h in held:
        run = h.refresh()
        assert (run.status, run.worker) == ("running", worker.id)
        assert run.held and run.started_at is None and run.attempt == 0  # claimed, not started
    stopping = threading.Thread(target=worker.stop)
    stopping.start()
    time.sleep(0.2)
    job.release.set()  # run 1 ends while draining: no held run may start in its slot
    stopping.join(15)
    assert job.started == [0, 1]
    for h in held:
        run = h.refresh()
        assert (run.status, run.attempt) == ("pending", 0)
        assert run.history == []  # a held run never started: its hand-back is no attempt
    assert handles[1].refresh().status == "succeeded"


def test_a_held_run_whose_cancellation_is_requested_never_starts(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory(lease=1.0)
    job = Held(app)
    handles = job.enqueue(4)
    worker = start_worker(app, concurrency=1, prefetch=2)
    first, second = _holding(app, worker, handles, 2)
    app.cancel(first.id)
    run = first.wait(10)
    assert run.status == "cancelled" and run.error is not None and run.error["type"] == "Cancelled"
    job.release.set()
    assert second.wait(10).status == "succeeded"
    assert int(first.id) not in worker._prefetch.held
    assert first.id not in {handles[i].id for i in job.started}


def test_a_cancel_wake_up_its_database_does_not_confirm_cancels_nothing(
    app_factory: Callable[..., rota.App],
) -> None:
    """NOTIFY names a run id, not a schema: another app's cancellation of its run 2 must
    not cancel ours."""
    app = app_factory(lease=1.0)
    job = Held(app)
    handles = job.enqueue(4)
    worker = start_worker(app, concurrency=1, prefetch=2)
    first, second = _holding(app, worker, handles, 2)
    assert worker._loop is not None
    worker._loop.call_soon_threadsafe(worker._leases.request_cancel, int(first.id))
    time.sleep(0.5)
    assert first.refresh().status == "running" and worker.counters.cancelled == 0
    job.release.set()
    assert first.wait(10).status == "succeeded" and second.wait(10).status == "succeeded"


def test_a_held_run_whose_lease_is_lost_never_starts(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory(lease=1.0)
    job = Held(app)
    handles = job.enqueue(4)
    worker = start_worker(app, concurrency=1, prefetch=2)
    first, _ = _holding(app, worker, handles, 2)
    real = app.store.heartbeat

    def rescued_meanwhile(held: Any, lease: float) -> tuple[set[int], set[int]]:
        alive, cancel = real(held, lease)
        return alive - {int(first.id)}, cancel  # as if another worker had taken it

    app.store.heartbeat = rescued_meanwhile  # type: ignore[method-assign]
    wait_until(lambda: int(first.id) not in worker._prefetch.held, 5, "the lost run to be dropped")
    assert worker.counters.lost >= 1
    job.release.set()
    wait_until(lambda: handles[3].refresh().status == "succeeded" or len(job.started) >= 3, 10, "the others to run")
    assert first.id not in {handles[i].id for i in job.started}


def test_about_a_window_of_work_is_held_and_long_runs_never(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rota.worker.prefetch, "WINDOW", 0.02)
    p = Prefetch(50, slots=5)
    assert p.room() == 0  # no handler has ended yet
    p.backlog = True
    p.ran(0.2)
    assert p.room() == 0  # long handlers: another idle worker could run them
    for _ in range(60):
        p.ran(0.008)
    assert p.size() == 12 and p.room() == 12  # 5 slots * 20 ms / 8 ms
    for _ in range(60):
        p.ran(0.0001)
    assert p.room() == 50  # the limit
    p.backlog = False
    assert p.room() == 0
    p.backlog, p.claiming = True, lambda: False
    assert p.room() == 0 and p.next() is None
    assert Prefetch(0, slots=5).room() == 0
    assert default_limit(5) == 200 and default_limit(500) == 500


def test_the_prefetch_setting_is_validated() -> None:
    assert prefetch_limit(0) == 0
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(rota.ConfigurationError, match="prefetch must be an integer >= 0"):
            prefetch_limit(bad)  # type: ignore[arg-type]


def test_rota_prefetch_reaches_the_worker_and_an_argument_beats_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ROTA_PREFETCH (and `rota worker --prefetch`, which passes it the same way) sets the
    worker's bound; run_worker(prefetch=) wins over the variable."""
    app = rota.App(f"sqlite:///{tmp_path}/p.db")
    built: list[int] = []

    class Built(Exception):
        pass

    def worker(**options: Any) -> None:
        built.append(Worker(app, **options)._prefetch.limit)
        raise Built

    monkeypatch.setattr(app, "worker", worker)
    monkeypatch.setenv("ROTA_PREFETCH", "0")
    with pytest.raises(Built):
        app.run_worker(concurrency=3)
    with pytest.raises(Built):
        app.run_worker(concurrency=3, prefetch=9)
    monkeypatch.delenv("ROTA_PREFETCH")
    with pytest.raises(Built):
        app.run_worker(concurrency=3)
    assert built == [0, 9, 200]
    app.close()


@pytest.mark.slow
def test_kill9_of_a_worker_holding_runs_ahead_gets_them_rescued(
    db_url: str, procs: WorkerProcs, tmp_path: Path
) -> None:
    from .conftest import make_app

    app = make_app(db_url)
    lease, poll = 2.0, 0.1
    victim = procs.start("tests.apps.prefetch_app:app", concurrency=2, lease=lease, poll=poll)
    ids = enqueue(app, "chaos", [((0, 0.0), {})] + [((i, 30.0), {}) for i in range(1, 5)])
    # run 0 ends at once: two long runs take the slots, the other two are held ahead
    # (a run the victim holds shows as running before its handler logs its start: wait for both)
    wait_until(
        lambda: (
            app.store.count_by_status().get("running", 0) == 4
            and len([f for f in log_lines(tmp_path) if f[0] == "start"]) >= 3
        ),
        30,
        "four runs held by the victim, two of them started",
    )
    assert len([f for f in log_lines(tmp_path) if f[0] == "start"]) == 3
    procs.start(concurrency=4, lease=lease, poll=poll)
    wait_until(lambda: len([w for w in app.list_workers() if w.alive]) == 2, 30, "the rescuer to register")
    procs.kill9(victim)
    started = {int(f[1]) for f in log_lines(tmp_path) if f[0] == "start"} - {ids[0]}
    assert len(started) == 2  # the two in the slots; the other two were held, never started
    wait_until(
        lambda: (
            {
                int(f[1])
                for f in log_lines(tmp_path)
                if f[0] == "start" and f[2] == ("2" if int(f[1]) in started else "1")
            }
            - {ids[0]}
            == set(ids[1:])
        ),
        30,
        "every long run to restart on the rescuer",
    )
    for run_id in ids[1:]:
        run = app.get_run(run_id)
        if run_id in started:
            assert run.attempt == 2 and run.history[0]["status"] == "lost"
        else:  # held by the victim, never started: no attempt lost, its loss marked held
            assert run.attempt == 1 and [(h["status"], h.get("held")) for h in run.history] == [("lost", True)]
    app.close()


def test_a_held_run_whose_lease_may_have_run_out_waits_for_a_renewal() -> None:
    from datetime import UTC, datetime

    from rota.stores.base import Claimed

    now = datetime.now(UTC)
    claim = Claimed(7, "t", "[]", "{}", 0, 1, 3, None, None, None, now, None, now)
    p = Prefetch(2)
    p.hold(claim, time.monotonic() - 1)  # no renewal came through for a lease (an outage)
    assert p.next() is None and p.get(7) is claim  # kept, not started
    p.renewed({7}, time.monotonic() + 30)
    assert p.next() is claim and p.get(7) is None
