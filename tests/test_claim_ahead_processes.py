"""Claim ahead with real worker processes, on both stores (see tests/test_claim_ahead.py for
the in-process tests): a worker killed with -9 while it holds a run claimed ahead loses it to
no one (the rescue returns it without an attempt, keeping its due time, and another worker
runs it once, not before it is due); two workers claiming the same ticks ahead start each
exactly once, none before its tick. Checked from the database and the handlers' own log."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from .conftest import WITH_MYSQL, make_app, store_url
from .procs import WorkerProcs, wait_until


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


pytestmark = pytest.mark.slow
APP = "tests.apps.schedules:app"


def starts(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "executions.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, lines) if e["event"] == "start"]


def test_a_run_held_ahead_by_a_killed_worker_runs_once_elsewhere_not_before_it_is_due(
    db_url: str, procs: WorkerProcs, tmp_path: Path
) -> None:
    app = make_app(db_url)
    wide = {"ROTA_TEST_CLAIM_AHEAD": "6"}  # claims 6 s ahead: time to kill it while it holds
    victim = procs.start(APP, concurrency=2, poll=1.0, lease=0.5, env=wide)
    time.sleep(1.0)  # started, idle
    ref = app.task(name="tick")(lambda tag="": tag).options(delay=timedelta(seconds=5)).enqueue("held")
    wait_until(lambda: app.get_run(ref.id).held, 10, "the run claimed ahead by the victim")
    procs.kill9(victim)
    assert starts(tmp_path) == []  # killed before its due time: it never started there
    procs.start(APP, concurrency=2, poll=0.2, lease=0.5)  # rescues it within about a second
    wait_until(lambda: app.get_run(ref.id).is_final, 30, "the run to be rescued and run elsewhere")
    run = app.get_run(ref.id)
    assert (run.status, run.attempt) == ("succeeded", 1), run  # the held spell cost no attempt
    assert run.started_at is not None and run.scheduled_for is not None
    assert run.started_at >= run.scheduled_for, run  # not run early by the rescue
    (start,) = [s for s in starts(tmp_path) if s["run"] == ref.id]
    assert start["t"] >= run.scheduled_for.timestamp() - 0.001
    assert [a["status"] for a in run.attempts] == ["succeeded"]  # the held spell left no history
    app.close()


def test_two_workers_claiming_ticks_ahead_start_each_once_and_none_before_its_tick(
    db_url: str, procs: WorkerProcs, tmp_path: Path
) -> None:
    app = make_app(db_url)
    env = {"ROTA_TEST_SCHEDULES": "every_second", "ROTA_TEST_CLAIM_AHEAD": "0.3"}
    for _ in range(2):
        procs.start(APP, concurrency=2, poll=0.5, lease=2.0, env=env)
    wait_until(lambda: len(starts(tmp_path)) >= 6, 30, "six ticks")
    procs.stop_all()
    runs = {r.id: r for r in app.list_runs(schedule="every_second", limit=100) if r.status == "succeeded"}
    seen = starts(tmp_path)
    assert max(Counter(s["run"] for s in seen).values()) == 1, seen  # each run started once
    ticks = Counter(s["tick"] for s in seen)
    assert max(ticks.values()) == 1, ticks  # one run per tick
    for s in seen:
        run = runs.get(s["run"])
        assert run is not None and run.scheduled_for is not None
        assert s["t"] >= run.scheduled_for.timestamp() - 0.001, (s, run)  # none before its tick
    app.close()
