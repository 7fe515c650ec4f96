"""Schedules across real worker processes (python -m rota worker tests.apps.schedules:app).

One run per tick with several processes racing to materialize every tick; the overlap
policies with slow jobs; schedules added, changed and removed at runtime from this process
while the workers run. "Never two at once" is checked twice: from the runs' recorded
start/finish times (the database's clock) and from the handlers' own start/end log.
"""

from __future__ import annotations

import collections
import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import rota

from .conftest import WITH_MYSQL, make_app, store_url
from .procs import WorkerProcs, wait_until


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


pytestmark = pytest.mark.slow
APP = "tests.apps.schedules:app"
SECOND = timedelta(seconds=1)


@pytest.fixture
def client(db_url: str) -> Iterator[rota.App]:
    """This process's app: adds, changes and inspects schedules while the workers run."""
    app = make_app(db_url)
    yield app
    app.close()


def start_workers(procs: WorkerProcs, client: rota.App, n: int, lease: float = 3.0, **env: str) -> None:
    for _ in range(n):
        procs.start(APP, concurrency=4, lease=lease, env=env)
    wait_until(
        lambda: len([w for w in client.list_workers() if w.alive and w.state == "running"]) >= n,
        30,
        f"{n} workers to start",
    )


@dataclass
class Execution:
    run: str
    schedule: str
    tick: datetime
    pid: int
    start: float
    end: float | None = None
    cancelled: bool = False


def executions(tmp_path: Path) -> dict[str, list[Execution]]:
    """What the handlers logged, per schedule, in start order."""
    path = tmp_path / "executions.log"
    found: dict[str, Execution] = {}
    starts: collections.Counter[str] = collections.Counter()
    for line in path.read_text().splitlines() if path.exists() else []:
        event = json.loads(line)
        if event["event"] == "start":
            starts[event["run"]] += 1
            found[event["run"]] = Execution(
                event["run"],
                event["schedule"],
                datetime.fromisoformat(event["tick"]),
                event["pid"],
                event["t"],
            )
        else:
            found[event["run"]].end = event["t"]
            found[event["run"]].cancelled = bool(event.get("cancelled"))
    assert set(starts.values()) <= {1}, f"runs executed more than once: {starts}"
    per_schedule: dict[str, list[Execution]] = collections.defaultdict(list)
    for e in sorted(found.values(), key=lambda e: e.start):
        per_schedule[e.schedule].append(e)
    return per_schedule


def runs_of(app: rota.App, name: str) -> list[rota.Run]:
    return sorted(app.list_runs(schedule=name, limit=10_000), key=lambda r: r.scheduled_for)


def assert_consecutive(ticks: list[datetime], step: timedelta = SECOND) -> None:
    assert len(ticks) == len(set(ticks)), f"duplicate ticks: {ticks}"
    gaps = [(a, b) for a, b in itertools.pairwise(ticks) if b - a != step]
    assert not gaps, f"ticks not {step} apart: {gaps}"


def overlapping_pairs(intervals: list[tuple[float, float]]) -> list[tuple[int, int]]:
    ordered = sorted(intervals)
    return [(i, i + 1) for i, (a, b) in enumerate(itertools.pairwise(ordered)) if b[0] < a[1]]


def db_intervals(runs: list[rota.Run]) -> list[tuple[float, float]]:
    return [
        (r.started_at.timestamp(), r.finished_at.timestamp())
        for r in runs
        if r.started_at is not None and r.finished_at is not None
    ]


def log_intervals(found: list[Execution]) -> list[tuple[float, float]]:
    assert all(e.end is not None for e in found), "an execution never ended"
    return [(e.start, e.end) for e in found if e.end is not None]


def settle(client: rota.App, names: list[str], timeout: float = 20) -> None:
    """Remove the schedules, cancel what still runs, and wait until nothing is active."""
    for name in names:
        client.remove_schedule(name)

    def quiet() -> bool:
        active = [r for name in names for r in runs_of(client, name) if not r.is_final]
        for r in active:
            if r.status == "running" and not r.cancel_requested:
                client.cancel(r.id)
        return not active

    wait_until(quiet, timeout, "the schedules' runs to end")


def no_tracebacks(procs: WorkerProcs) -> None:
    for output in procs.outputs():
        assert "Traceback" not in output, output[-3000:]


def test_one_run_per_tick_with_several_worker_processes(
    db_url: str, procs: WorkerProcs, client: rota.App, tmp_path: Path
) -> None:
    """3 processes on SQLite, 4 on PostgreSQL, all declaring the same every-1-second
    schedule in code and racing to materialize each tick for ~10 s."""
    n = 3 if db_url.startswith("sqlite") else 4
    start_workers(procs, client, n, ROTA_TEST_SCHEDULES="every_second")
    wait_until(lambda: len(runs_of(client, "every_second")) >= 10, 30, "ten ticks")
    time.sleep(0.5)
    for proc in procs.procs:
        procs.terminate(proc)
    # A worker stopped inside a tick's lead withdraws the run it made ahead (cancelled,
    # error Withdrawn, its tick released): a live worker makes that tick again, and the
    # last worker's withdrawn tick is simply not run. Those are not runs of their tick.
    every = runs_of(client, "every_second")
    withdrawn = [r for r in every if r.status == "cancelled" and (r.error or {}).get("type") == "Withdrawn"]
    runs = [r for r in every if r not in withdrawn]
    assert len(runs) >= 10
    assert_consecutive([r.scheduled_for for r in runs])
    last = runs[-1].scheduled_for
    assert all(w.started_at is None and w.attempt == 0 for w in withdrawn), withdrawn  # never ran
    assert all(w.scheduled_for in {r.scheduled_for for r in runs} or w.scheduled_for > last for w in withdrawn)
    # The last tick may still wait, never started: due (or handed back at the stop) after the
    # last worker's last claim (a loaded machine stretches that window).
    waiting = [r for r in runs if r.status == "pending"]
    assert all(r.started_at is None and r.attempt == 0 for r in waiting), waiting
    assert {r.status for r in runs} <= {"succeeded", "skipped", "pending"}
    succeeded = [r for r in runs if r.status == "succeeded"]
    assert all(w.scheduled_for > r.scheduled_for for w in waiting for r in succeeded), waiting
    assert len(succeeded) >= len(runs) - 2  # a 1 s tick of a no-op job rarely meets the last
    found = executions(tmp_path)["every_second"]  # (and each executed exactly once)
    assert sorted(e.run for e in found) == sorted(r.id for r in succeeded)
    info = client.get_schedule("every_second")
    assert info.run_count == len(succeeded) and info.success_count == len(succeeded)
    assert info.skip_count == len([r for r in runs if r.status == "skipped"])
    no_tracebacks(procs)


def test_overlap_policies_with_slow_jobs_across_processes(
    db_url: str, procs: WorkerProcs, client: rota.App, tmp_path: Path
) -> None:
    # A lease well above the handlers' times: a worker starved of CPU for longer than its lease
    # is presumed dead and its run handed on while the handler may still be in it (CI saw a
    # 1.5 s sleep take 3.8 s under load with a 3 s lease). That case is the crash suite's.
    start_workers(procs, client, 3, lease=10.0)
    added = client.store.now()
    client.add_schedule("skip", "slow", every=1, args=[2.5], overlap="skip")
    client.add_schedule("queue", "slow", every=1, args=[1.5], overlap="queue")
    client.add_schedule("concurrent", "slow", every=1, args=[2.5], overlap="concurrent")
    client.add_schedule("replace_async", "slow_async", every=2, args=[30], overlap="replace")
    client.add_schedule("replace_sync", "slow_cooperative", every=2, args=[30], overlap="replace")
    names = ["skip", "queue", "concurrent", "replace_async", "replace_sync"]

    def enough() -> bool:
        replaced = [
            r for name in ("replace_async", "replace_sync") for r in runs_of(client, name) if r.status == "cancelled"
        ]
        return len(replaced) >= 4 and len(runs_of(client, "skip")) >= 7

    wait_until(enough, 25, "ticks of every policy")
    settle(client, names)
    found = executions(tmp_path)

    # The workers were running before the schedules existed, and picked them up.
    first = min(r.started_at for name in names for r in runs_of(client, name) if r.started_at)
    assert first - added < timedelta(seconds=10)

    # skip: ticks that came while one ran are recorded as skipped; never two at once.
    runs = runs_of(client, "skip")
    assert_consecutive([r.scheduled_for for r in runs])
    skipped = [r for r in runs if r.status == "skipped"]
    assert len(skipped) >= 2
    assert all(r.error is not None and r.error["type"] == "Overlap" for r in skipped)
    assert len([r for r in runs if r.status == "succeeded"]) >= 2
    assert not overlapping_pairs(db_intervals(runs))
    assert not overlapping_pairs(log_intervals(found["skip"]))
    assert client.get_schedule("skip").skip_count == len(skipped)

    # queue: every tick waits its turn and runs in tick order; never two at once.
    runs = runs_of(client, "queue")
    assert_consecutive([r.scheduled_for for r in runs])
    assert not [r for r in runs if r.status == "skipped"]
    ran = sorted((r for r in runs if r.started_at is not None), key=lambda r: r.started_at)
    assert len(ran) >= 3
    assert [r.scheduled_for for r in ran] == sorted(r.scheduled_for for r in ran)
    assert [r.scheduled_for for r in ran] == [r.scheduled_for for r in runs[: len(ran)]]
    assert not overlapping_pairs(db_intervals(runs))
    assert not overlapping_pairs(log_intervals(found["queue"]))
    assert [e.tick for e in found["queue"]] == [r.scheduled_for for r in ran]

    # concurrent: ticks run regardless, overlapping.
    runs = runs_of(client, "concurrent")
    assert_consecutive([r.scheduled_for for r in runs])
    assert not [r for r in runs if r.status == "skipped"]
    assert overlapping_pairs(db_intervals(runs))
    assert overlapping_pairs(log_intervals(found["concurrent"]))

    # replace: the running one is cancelled (async: cancelled on its loop; sync: it sees
    # ctx.cancelled) and the new one runs after it; never two at once.
    for name in ("replace_async", "replace_sync"):
        runs = runs_of(client, name)
        assert_consecutive([r.scheduled_for for r in runs], 2 * SECOND)
        replaced = [r for r in runs if r.status == "cancelled" and r.started_at is not None]
        assert len(replaced) >= 2, [(r.status, r.error) for r in runs]
        assert not overlapping_pairs(db_intervals(runs))
        assert not overlapping_pairs(log_intervals(found[name]))
        ended = [e for e in found[name] if e.cancelled]
        assert len(ended) >= 2
        for run in replaced[:-1]:  # the next tick's run started once this one stopped
            assert run.finished_at is not None
            later = [r for r in runs if r.scheduled_for > run.scheduled_for and r.started_at]
            assert later and later[0].started_at is not None
            assert later[0].started_at >= run.finished_at
    no_tracebacks(procs)


def test_schedules_added_changed_and_removed_at_runtime_reach_running_workers(
    db_url: str, procs: WorkerProcs, client: rota.App
) -> None:
    start_workers(procs, client, 3)

    def done(tag: str) -> list[rota.Run]:
        return [r for r in runs_of(client, "data") if r.status == "succeeded" and r.result == tag]

    client.add_schedule("data", "tick", every=1, kwargs={"tag": "v1"})
    wait_until(lambda: len(done("v1")) >= 2, 15, "the added schedule to fire")

    changed = client.store.now()
    client.update_schedule("data", every=1.5, kwargs={"tag": "v2"})
    wait_until(lambda: len(done("v2")) >= 2, 15, "the updated schedule to fire")
    runs = runs_of(client, "data")
    before = [r for r in runs if r.scheduled_for <= changed]
    after = [r for r in runs if r.scheduled_for > changed]
    assert {r.kwargs["tag"] for r in before} == {"v1"}
    assert_consecutive([r.scheduled_for for r in before])
    assert {r.kwargs["tag"] for r in after} == {"v2"}
    assert_consecutive([r.scheduled_for for r in after], timedelta(seconds=1.5))
    assert all(r.scheduled_for.timestamp() * 2 % 3 == 0 for r in after)  # the 1.5 s grid

    client.remove_schedule("data")
    removed = client.store.now()
    kept = len(runs_of(client, "data"))
    time.sleep(2.5)
    runs = runs_of(client, "data")
    assert len(runs) == kept and all(r.scheduled_for <= removed for r in runs)
    assert all(r.is_final for r in runs)  # pending ones were cancelled, the rest ran
    info = client.get_schedule("data")
    assert not info.active and info.success_count >= 4
    assert [s.name for s in client.list_schedules(include_inactive=True)] == ["data"]
    no_tracebacks(procs)
