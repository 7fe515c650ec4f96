"""A tick made ahead survives `kill -9` of its maker and still meets the misfire policy
(issue 18, item 6), with real worker processes on both stores: the maker is killed inside
the lead (its run pending, due at a tick to come), a new worker starts after tick + grace."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
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
EVERY, GRACE = 6.0, 0.5


def started(tmp_path: Path) -> set[str]:
    path = tmp_path / "executions.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return {str(json.loads(line)["run"]) for line in lines if json.loads(line)["event"] == "start"}


def ahead_of_tick(app: rota.App, name: str) -> list[rota.Run]:
    now = app.store.now()
    return [r for r in app.list_runs(schedule=name, status="pending") if r.scheduled_for > now]


def kill_inside_the_lead(app: rota.App, procs: WorkerProcs, name: str) -> rota.Run:
    """Start a worker, kill it -9 once it made a tick ahead, before that tick. Tries a few
    ticks: on a loaded machine the kill may land after the tick."""
    for _ in range(4):
        victim = procs.start(APP, concurrency=2, poll=1.0)  # lead: 0.3 s
        deadline = time.monotonic() + 30
        while not (ahead := ahead_of_tick(app, name)):
            assert time.monotonic() < deadline, "no run was made ahead of its tick"
            time.sleep(0.005)
        procs.kill9(victim)
        run = app.get_run(ahead[0].id)
        if run.status == "pending" and run.scheduled_for > datetime.now(UTC):
            return run
        # too late (claimed already): the next worker rescues it; try the next tick
    pytest.skip("the kill never landed inside the lead (machine too loaded)")


@pytest.mark.parametrize("misfire", ["skip", "coalesce"])
def test_a_tick_made_ahead_by_a_killed_worker_meets_the_misfire_policy(
    db_url: str, procs: WorkerProcs, tmp_path: Path, misfire: str
) -> None:
    app = make_app(db_url)
    name = f"k9_{uuid.uuid4().hex[:6]}"
    app.add_schedule(name, "tick", every=EVERY, misfire=misfire, misfire_grace=GRACE)
    run = kill_inside_the_lead(app, procs, name)
    tick = run.scheduled_for.timestamp()
    time.sleep(max(0.0, tick + 1.5 - time.time()))  # back 1.5 s after the tick: past the grace
    assert time.time() < tick + 2.5, "restarted too late: too slow a machine"
    procs.start(APP, concurrency=2, poll=0.2)
    wait_until(lambda: app.get_run(run.id).is_final, 30, "the run made ahead to be judged")
    got = app.get_run(run.id)
    if misfire == "skip":
        assert got.status == "skipped" and str(run.id) not in started(tmp_path), got
        assert got.error is not None and got.error["type"] == "Misfire", got.error
        assert "misfire=skip, grace 0.5s" in got.error["message"]
    else:  # the newest missed tick (the next one has not come): it runs, late
        assert got.status == "succeeded" and str(run.id) in started(tmp_path), got
        assert got.started_at is not None and got.started_at.timestamp() - tick > GRACE
    # the next tick runs on time, once
    following = run.scheduled_for.timestamp() + EVERY
    wait_until(
        lambda: any(r.status == "succeeded" and r.scheduled_for.timestamp() == following
                    for r in app.list_runs(schedule=name)),
        30, "the next tick to run",
    )  # fmt: skip
    ticks = [r.scheduled_for for r in app.list_runs(schedule=name, limit=1000) if r.status != "cancelled"]
    assert len(ticks) == len(set(ticks)), ticks
    app.close()
