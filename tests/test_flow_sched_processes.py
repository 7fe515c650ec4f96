"""Backfill and jitter across real worker processes: two workers and a backfill of an
exclusive schedule (the backfilled runs ran one at a time, oldest first, from the database's
recorded start and finish times, exactly one run per tick); kill -9 of the worker running
one (rescued, the slot passes on in order); a worker starting jittered ticks at their
hashed offset, never before."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import rota
from rota import timing

from .conftest import WITH_MYSQL, make_app, store_url
from .procs import WorkerProcs, wait_until


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


pytestmark = pytest.mark.slow
APP = "tests.apps.schedules:app"


@pytest.fixture
def procs(db_url: str, tmp_path: Path) -> Iterator[WorkerProcs]:
    workers = WorkerProcs(db_url, tmp_path)
    yield workers
    workers.stop_all()


@pytest.fixture
def client(db_url: str) -> Iterator[rota.App]:
    app = make_app(db_url)
    yield app
    app.close()


@pytest.mark.parametrize("overlap", ["skip", "queue"])
def test_two_workers_run_an_exclusive_schedule_s_backfill_one_at_a_time_oldest_first(
    procs: WorkerProcs, client: rota.App, overlap: str
) -> None:
    client.add_schedule("bf", "slow", every=3600, args=[0.15], overlap=overlap)
    for _ in range(2):
        procs.start(APP, concurrency=4)
    wait_until(lambda: len([w for w in client.list_workers() if w.alive]) >= 2, 30, "two workers to start")
    now = datetime.now(UTC)
    refs = client.backfill("bf", start=now - timedelta(hours=8), end=now)
    assert len(refs) == 8
    wait_until(lambda: all(r.refresh().status == "succeeded" for r in refs), 60, "the backfilled runs to finish")
    runs = sorted((r.refresh() for r in refs), key=lambda r: r.started_at or now)
    ticks = [r.scheduled_for for r in runs]
    assert ticks == sorted(ticks) and len(set(ticks)) == 8  # oldest first, one run per tick
    for earlier, later in itertools.pairwise(runs):
        assert earlier.finished_at is not None and later.started_at is not None
        assert earlier.finished_at <= later.started_at  # never two at once
    assert len({r.worker for r in runs}) >= 1 and all(r.backfill for r in runs)
    assert client.backfill("bf", start=now - timedelta(hours=8), end=now) == []


def test_a_worker_process_starts_each_jittered_tick_at_its_offset_not_before(
    procs: WorkerProcs, client: rota.App
) -> None:
    spread = timedelta(seconds=1.5)
    client.add_schedule("j", "tick", every=2, jitter=spread, misfire="all")
    procs.start(APP, concurrency=2)
    trigger = timing.make_trigger(every=timedelta(seconds=2))

    def done() -> list[rota.Run]:
        return [r for r in client.list_runs(schedule="j") if r.status == "succeeded"]

    wait_until(lambda: len(done()) >= 3, 60, "three jittered ticks to run")
    for run in done():
        offset = timing.jitter_offset(trigger, "j", run.scheduled_for, spread)
        assert run.due_at == run.scheduled_for + offset  # every host computes the same offset
        assert run.started_at is not None and run.started_at >= run.due_at  # never before its offset


def test_kill9_of_the_worker_running_a_backfilled_tick_passes_the_slot_on_in_order(
    procs: WorkerProcs, client: rota.App
) -> None:
    client.add_schedule("bf", "slow", every=3600, args=[1.0], overlap="queue")
    victim = procs.start(APP, concurrency=2, lease=1.0)
    wait_until(lambda: len([w for w in client.list_workers() if w.alive]) >= 1, 30, "a worker to start")
    now = datetime.now(UTC)
    refs = client.backfill("bf", start=now - timedelta(hours=4), end=now)
    assert len(refs) == 4
    wait_until(lambda: refs[0].refresh().status == "running", 30, "the oldest tick to start")
    procs.kill9(victim)
    procs.start(APP, concurrency=2, lease=1.0)
    wait_until(lambda: all(r.refresh().is_final for r in refs), 60, "every backfilled run to end")
    runs = [r.refresh() for r in refs]
    assert runs[0].status == "failed" and "lost" in str(runs[0].error)  # rescued (max_attempts=1)
    assert [r.status for r in runs[1:]] == ["succeeded"] * 3
    for earlier, later in itertools.pairwise(runs):
        assert earlier.finished_at is not None and later.started_at is not None
        assert earlier.finished_at <= later.started_at  # still one at a time, oldest first
