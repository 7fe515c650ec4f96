"""Prefetch stays fair across workers (rota.worker.prefetch): after a stretch of short runs,
a backlog of slow runs is shared by two real worker processes on one database; no worker
sits on slow runs it has not started while the other has free slots (both stores)."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import rota
import rota.worker.prefetch
from rota.errors import DatabaseUnavailable
from rota.worker.prefetch import Prefetch

from .conftest import WITH_MYSQL, make_app, start_worker, store_url
from .procs import WorkerProcs, wait_until
from .test_crashes import enqueue, log_lines


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


SLOTS, SLOW, SECONDS = 4, 24, 0.8


def _executing(tmp_path: Path) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """Per pid: slow runs started, and slow runs started and not ended (from the handlers' log)."""
    started: collections.Counter[str] = collections.Counter()
    running: collections.Counter[str] = collections.Counter()
    for fields in log_lines(tmp_path):
        if fields[0] == "start":
            started[fields[4]] += 1
            running[fields[4]] += 1
        elif fields[0] == "end":
            running[fields[4]] -= 1
    return started, running


def _unfair(app: rota.App, tmp_path: Path, pids: list[str]) -> bool:
    """A worker holds slow runs it has not started while the other has a free slot."""
    owned = collections.Counter(
        (run.worker or "").rsplit(":", 1)[-1] for run in app.list_runs(status="running", task="record")
    )
    _, running = _executing(tmp_path)
    held = {pid: owned[pid] - running[pid] for pid in pids}
    free = {pid: SLOTS - running[pid] for pid in pids}
    a, b = pids
    return (held[a] > 0 and free[b] > 0) or (held[b] > 0 and free[a] > 0)


@pytest.mark.slow
def test_after_short_runs_a_backlog_of_slow_runs_is_shared_fairly(
    db_url: str, procs: WorkerProcs, tmp_path: Path
) -> None:
    app = make_app(db_url)
    for _ in range(2):
        procs.start(concurrency=SLOTS, poll=0.05, lease=5.0)
    wait_until(lambda: len([w for w in app.list_workers() if w.alive]) == 2, 30, "two workers")
    pids = [str(p.pid) for p in procs.procs]
    # one backlog: a stretch of instant runs (prefetch turns on), then slow ones of another task
    short = [((i,), {}) for i in range(1500)]
    enqueue(app, "noop", short)  # type: ignore[arg-type]
    began = time.monotonic()
    ids = enqueue(app, "record", [((i, SECONDS), {}) for i in range(SLOW)])
    unfair = 0.0
    last = time.monotonic()
    while app.store.count_by_status().get("succeeded", 0) < len(short) + SLOW:
        assert time.monotonic() - began < 60, "the backlog did not drain"
        time.sleep(0.05)
        now = time.monotonic()
        if _unfair(app, tmp_path, pids):
            unfair += now - last
        last = now
    makespan = time.monotonic() - began
    started, _ = _executing(tmp_path)
    counts = [started[pid] for pid in pids]
    assert sum(counts) == SLOW and all(app.get_run(i).status == "succeeded" for i in ids)
    # ideal: 12 and 12 in three rounds (2.4 s); hoarding gave 24 and 0 in six rounds (4.8 s).
    # A process the loaded machine runs less claims less (MySQL, load 14 on 2 cores: 16 and 8
    # with nothing held unfairly): the split only rules hoarding out; `unfair` judges the rest
    assert min(counts) >= SLOW // 4, counts
    # each check is two reads apart (a claim may start between them): a short slack only
    assert unfair <= 0.5, f"{unfair:.2f} s with slow runs held while the other worker had free slots"
    slow = [app.get_run(i) for i in ids]
    began_at = min(r.started_at for r in slow if r.started_at is not None)
    phase = (max(r.finished_at for r in slow if r.finished_at is not None) - began_at).total_seconds()
    rounds = phase / SECONDS  # 3 when shared (the first claim of them to the last end)
    assert rounds < 4.5, f"{phase:.2f} s for {SLOW} runs of {SECONDS} s on 2 x {SLOTS} slots"
    assert makespan < 20, makespan  # the whole backlog, short runs and start-up included
    app.close()


def test_the_pace_counts_a_handler_at_its_age_once_it_runs_longer_than_the_mean(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Re-estimated while handlers run, not only when they end: after a stretch of 1 ms runs,
    slots busy with handlers 200 ms old hold nothing more, and the excess is handed back."""
    monkeypatch.setattr(rota.worker.prefetch, "WINDOW", 0.02)

    class Running:
        def __init__(self, age: float) -> None:
            self.started = time.monotonic() - age

    p = Prefetch(50, slots=5)
    p.backlog = True
    for _ in range(50):
        p.ran(0.001)
    assert p.size() == 50  # 5 slots * 20 ms / 1 ms = 100, at most the limit
    from datetime import UTC, datetime

    from rota.stores.base import Claimed

    now = datetime.now(UTC)
    for i in range(20):
        p.hold(Claimed(i, "t", "[]", "{}", 1, 1, i, None, None, None, now, now, now, 0, float(i)), 1e12)
    running = {i: Running(0.2) for i in range(100, 105)}
    p.running = running
    assert p.size() == 0 and p.room() == 0  # 5 slots, each busy for at least 200 ms
    extra = p.take_excess()
    assert [c.id for c, _ in extra] == list(range(20)) and not p.held
    running.update({i: Running(0.0) for i in range(105, 110)})  # mixed: one slow slot
    p.running = {100: running[100], **{i: running[i] for i in range(105, 109)}}
    assert p.size() == 50  # four slots still free every millisecond


def _blocker_and_held(
    app: rota.App, backs: list[Any] | None = None
) -> tuple[Any, list[rota.RunHandle], threading.Event]:
    """One slot busy with a blocking run, quick runs claimed behind it (held). On a loaded
    machine the blocker may outlast the hold horizon before the worker's next claim, which
    then rightly holds nothing: that round is released and the scenario made again (and
    `backs`, the hand-backs seen, emptied of the released round's)."""
    gates = [threading.Event()]

    @app.task(name="job")
    def job(i: int) -> int:
        if i < 0:
            gates[-1].wait(30)
        return i

    for _ in range(5):
        job.enqueue(0).wait(10)  # a handler ended: the pace is known (instant)
        if backs is not None:
            backs.clear()  # every run of an earlier round has ended: none is handed back later
        blocker = job.options(priority=9).enqueue(-1)
        quick = [rota.RunHandle(app, run_id) for run_id in job.enqueue_many([((i,), {}) for i in range(1, 11)])]
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            if any(h.refresh().token is not None for h in quick):  # claimed (held: the slot is busy)
                return blocker, quick, gates[-1]
            time.sleep(0.01)
        gates[-1].set()  # never held: let this round finish, then make it again
        assert all(h.wait(10).status == "succeeded" for h in [blocker, *quick])
        gates.append(threading.Event())
    raise AssertionError("the worker never held the quick runs behind the blocker in 5 rounds")


def test_held_runs_are_handed_back_once_the_running_handler_outlasts_the_horizon(
    app_factory: Callable[..., rota.App], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One slot, instant handlers so far; then a handler that blocks: the runs held behind it
    go back to pending at once (for any other worker), not when it ends. A held run's
    hand-back leaves no history entry (it never started), so the real store's hand_back is
    watched to see it happen."""
    app = app_factory()
    backs: list[tuple[list[tuple[int, int]], str]] = []
    real = app.store.hand_back

    def watched(held: list[tuple[int, int]], reason: str) -> set[int]:
        back = real(held, reason)
        backs.append((held, reason))
        return back

    monkeypatch.setattr(app.store, "hand_back", watched)
    worker = start_worker(app, concurrency=1)
    blocker, quick, gate = _blocker_and_held(app, backs)
    try:
        # A held run is handed back as it was (rota/lifecycle.py): pending, no attempt and no
        # history entry; its token shows it was claimed.
        def handed_back() -> bool:  # all pending; those claimed (held behind the blocker) handed back
            runs = [h.refresh() for h in quick]
            return bool(backs) and not worker._prefetch.held and all(r.status == "pending" for r in runs)

        wait_until(handed_back, 5, "the held runs handed back while the blocker runs")
        assert blocker.refresh().status == "running"
        ids = {run_id for held, _ in backs for run_id, _ in held}
        assert ids and ids <= {int(h.id) for h in quick}
        assert all(h.refresh().attempt == 0 and not h.refresh().history for h in quick if int(h.id) in ids)
        assert all("handlers ran slower" in reason for _, reason in backs)
    finally:
        gate.set()
    assert all(h.wait(10).status == "succeeded" for h in quick)


def test_held_runs_whose_hand_back_fails_stay_held_and_run(
    app_factory: Callable[..., rota.App], monkeypatch: pytest.MonkeyPatch
) -> None:
    app = app_factory()

    def away(*args: Any) -> set[int]:
        raise DatabaseUnavailable("simulated outage")

    monkeypatch.setattr(app.store, "hand_back", away)
    worker = start_worker(app, concurrency=1)
    blocker, quick, gate = _blocker_and_held(app)
    try:
        wait_until(lambda: blocker.refresh().status == "running" and len(worker._prefetch.held) > 0, 10, "held runs")
        time.sleep(0.3)  # the pace says hand back; the database says no: kept (and renewed)
        held = len(worker._prefetch.held)
        assert held > 0 and all(h.refresh().status == "running" for h in quick if int(h.id) in worker._prefetch.held)
    finally:
        gate.set()
    assert all(h.wait(10).status == "succeeded" for h in quick)
    assert all(h.refresh().attempt == 1 for h in quick)
