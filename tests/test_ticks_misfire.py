"""Ticks made ahead meet the misfire policy (issue 18, item 6), against both stores: a run
made ahead of its tick that no worker claims by tick + misfire_grace (its maker was killed,
no worker ran) is judged by the policy as a tick made that late would be. A real worker
killed with -9 inside the lead is in test_ticks_kill9.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

import rota
import rota.testing
from rota.stores.base import Outcome

from .conftest import WITH_MYSQL, store_url
from .test_ticks_ahead import fake, minute, runs_of, tick_pass


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


__all__ = ["fake"]  # the fixture, used by name


@pytest.fixture
def fapp(app_factory: Callable[..., rota.App], fake: rota.FakeClock) -> rota.App:
    app = app_factory(clock=fake)

    @app.task(name="t")
    def t(*args: Any, **kwargs: Any) -> None: ...

    return app


def made_ahead(app: rota.App, fake: rota.FakeClock, task: str = "t", **options: Any) -> rota.Run:
    """The 00:01 tick of a one-minute schedule, made ahead by one tick pass."""
    app.add_schedule("s", task, every=60, **options)
    fake.set(minute(1) - timedelta(seconds=0.2))
    assert tick_pass(app).counters.ticks == 1
    (run,) = runs_of(app, "s")
    assert (run.status, run.scheduled_for) == ("pending", minute(1))
    return run


def claim(app: rota.App) -> list[int]:
    return [c.id for c in app.store.claim("w", 10, None, 30)]


def test_a_run_made_ahead_and_claimed_within_the_grace_runs(fapp: rota.App, fake: rota.FakeClock) -> None:
    run = made_ahead(fapp, fake, misfire="skip", misfire_grace=0.5)
    fake.set(minute(1, 0.5))  # exactly the grace late: on time, as for a tick made late
    assert claim(fapp) == [int(run.id)]


@pytest.mark.parametrize("misfire", ["skip", "coalesce"])
def test_a_run_made_ahead_past_its_grace_is_not_claimed_and_the_ticker_is_due(
    fapp: rota.App, fake: rota.FakeClock, misfire: str
) -> None:
    made_ahead(fapp, fake, misfire=misfire, misfire_grace=0.5)
    fake.set(minute(1, 3))  # the worker that made it was killed; another starts 3 s later
    assert claim(fapp) == []
    state = fapp.store.poll_state(None)
    assert state.next_run_due is None  # nothing to claim: no claimer spinning on it
    assert state.next_schedule_due is not None and state.next_schedule_due <= state.now  # the ticker judges


def test_under_skip_a_run_made_ahead_past_its_grace_is_recorded_skipped(fapp: rota.App, fake: rota.FakeClock) -> None:
    run = made_ahead(fapp, fake, misfire="skip", misfire_grace=0.5)
    fake.set(minute(1, 2.94))
    tick_pass(fapp, 0.0)
    got = fapp.get_run(run.id)
    assert got.status == "skipped" and got.started_at is None
    assert got.error is not None and got.error["type"] == "Misfire", got.error
    assert got.error["message"] == "missed by 2.94s (misfire=skip, grace 0.5s)"
    assert claim(fapp) == []
    assert fapp.get_schedule("s").skip_count == 1
    fake.set(minute(2))  # the next tick is on time again
    tick_pass(fapp, 0.0)
    assert [(r.scheduled_for, r.status) for r in runs_of(fapp, "s")] == [(minute(1), "skipped"), (minute(2), "pending")]


def test_a_skipped_run_made_ahead_gives_the_same_rows_as_a_tick_made_late(fapp: rota.App, fake: rota.FakeClock) -> None:
    made_ahead(fapp, fake, misfire="skip", misfire_grace=0.5)
    fapp.add_schedule("ref", "t", every=60, misfire="skip", misfire_grace=0.5)  # never made ahead
    fake.set(minute(3, 10))  # back after 00:01, 00:02 and 00:03 were missed
    tick_pass(fapp, 0.0)
    for name in ("s", "ref"):
        assert [r.status for r in runs_of(fapp, name)] == ["skipped"] * 3, name
    assert [r.error for r in runs_of(fapp, "s")][1:] == [r.error for r in runs_of(fapp, "ref")][1:]
    assert fapp.get_schedule("s").next_run_at == fapp.get_schedule("ref").next_run_at == minute(4)


def test_under_coalesce_a_run_made_ahead_past_its_grace_runs_when_no_later_tick_is_due(
    fapp: rota.App, fake: rota.FakeClock
) -> None:
    run = made_ahead(fapp, fake, misfire="coalesce", misfire_grace=0.5)
    fake.set(minute(1, 3))
    tick_pass(fapp, 0.0)
    assert fapp.get_run(run.id).status == "pending"  # the newest missed tick: it runs
    assert claim(fapp) == [int(run.id)]


def test_under_coalesce_a_run_made_ahead_is_skipped_when_a_later_tick_is_due(
    fapp: rota.App, fake: rota.FakeClock
) -> None:
    run = made_ahead(fapp, fake, misfire="coalesce", misfire_grace=0.5)
    fake.set(minute(2, 30))  # 00:02 missed too: it is the newest, 00:01 is coalesced into it
    tick_pass(fapp, 0.0)
    got = fapp.get_run(run.id)
    assert got.status == "skipped" and got.error is not None
    assert got.error["message"] == "coalesced (misfire=coalesce): a later tick runs"
    assert [(r.scheduled_for, r.status) for r in runs_of(fapp, "s")] == [(minute(1), "skipped"), (minute(2), "pending")]


def test_under_all_a_run_made_ahead_runs_however_late(fapp: rota.App, fake: rota.FakeClock) -> None:
    run = made_ahead(fapp, fake, misfire="all", misfire_grace=0.5)
    fake.set(minute(1, 30))
    assert claim(fapp) == [int(run.id)]


def test_a_run_made_ahead_and_claimed_in_time_then_handed_back_runs_later(fapp: rota.App, fake: rota.FakeClock) -> None:
    run = made_ahead(fapp, fake, misfire="skip", misfire_grace=0.5)
    fake.set(minute(1, 0.1))
    (claimed,) = fapp.store.claim("w", 10, None, 30)
    assert fapp.store.hand_back([(claimed.id, claimed.token)], "shutdown") == {claimed.id}
    fake.set(minute(1, 20))  # taken in time: the tick was made on time, whatever comes later
    assert claim(fapp) == [int(run.id)]


def test_a_longer_grace_set_since_lets_a_late_run_made_ahead_run(fapp: rota.App, fake: rota.FakeClock) -> None:
    run = made_ahead(fapp, fake, misfire="skip", misfire_grace=0.5)
    fake.set(minute(1, 3))
    fapp.update_schedule("s", misfire_grace=10)  # the run is due already: not withdrawn
    tick_pass(fapp, 0.0)
    assert fapp.get_run(run.id).status == "pending"
    assert claim(fapp) == [int(run.id)]


def test_a_skipped_run_made_ahead_fires_the_misfire_hooks(fapp: rota.App, fake: rota.FakeClock) -> None:
    seen: list[tuple[str, Any]] = []
    fapp.on("run_skipped")(lambda event: seen.append(("run_skipped", event)))
    fapp.on("schedule_misfired")(lambda event: seen.append(("schedule_misfired", event)))
    made_ahead(fapp, fake, misfire="skip", misfire_grace=0.5)
    fake.set(minute(1, 3))
    tick_pass(fapp, 0.0)
    assert fapp.events.drain(5)
    assert sorted(name for name, _ in seen) == ["run_skipped", "schedule_misfired"]
    skipped = next(event for name, event in seen if name == "run_skipped")
    assert skipped.run is not None and skipped.run.status == "skipped" and skipped.run.scheduled_for == minute(1)


# -- the bound on skipped rows per catch-up ----------------------------------------------


def all_runs(app: rota.App) -> list[rota.Run]:
    return sorted(app.list_runs(schedule="s", limit=5000), key=lambda r: (r.scheduled_for, int(r.id)))


@pytest.mark.parametrize("misfire", ["coalesce", "skip"])
def test_a_catch_up_writes_at_most_1000_skipped_rows_and_counts_the_rest(
    fapp: rota.App, fake: rota.FakeClock, misfire: str
) -> None:
    """3,600 one-second ticks missed (an hour away). The 60 within the default 60 s grace
    are on time, and under overlap=skip all but the first find it active: before, those 59
    overlap skips came on top of the 1,000 misfire skips listed (1,060 rows)."""
    fapp.add_schedule("s", "t", every=1, misfire=misfire)
    first = fapp.get_schedule("s").next_run_at
    assert first is not None
    fake.set(first + timedelta(seconds=3599.5))
    tick_pass(fapp, 0.0)
    runs = all_runs(fapp)
    skipped = [r for r in runs if r.status == "skipped"]
    assert len(skipped) == 1000
    assert [r.scheduled_for for r in skipped] == [first + timedelta(seconds=i) for i in range(1000)]  # the oldest
    assert [r.status for r in runs if r.status != "skipped"] == ["pending"]  # the first on-time tick
    info = fapp.get_schedule("s")
    assert info.skip_count == 3599  # every tick but the one that runs, listed or not
    assert info.next_run_at == first + timedelta(seconds=3600)


def test_a_catch_up_under_overlap_queue_holds_its_on_time_ticks_with_no_bound(
    fapp: rota.App, fake: rota.FakeClock
) -> None:
    fapp.add_schedule("s", "t", every=1, overlap="queue", misfire_grace=5)
    first = fapp.get_schedule("s").next_run_at
    assert first is not None
    fake.set(first + timedelta(seconds=1999.5))
    tick_pass(fapp, 0.0)
    runs = all_runs(fapp)
    assert len([r for r in runs if r.status == "skipped"]) == 1000  # coalesced, listed
    waiting = [r for r in runs if r.status == "pending"]
    assert len(waiting) == 5 and [r.queued for r in waiting] == [False] + [True] * 4  # each runs in turn
    assert fapp.get_schedule("s").skip_count == 1995


@pytest.mark.parametrize("flow", ["limit", "rate"])
def test_a_retry_of_a_limited_or_rated_tick_made_ahead_is_no_misfire(
    app_factory: Callable[..., rota.App], fake: rota.FakeClock, flow: str
) -> None:
    """A flow claim takes a tick made ahead as the plain claim does: its misfire deadline
    goes, so the retry after its first attempt failed runs. (The flow claims kept the
    deadline: the retry, due after the grace, was skipped as "missed by 45s".)"""
    app = app_factory(clock=fake)
    attempts: list[int] = []
    gate: dict[str, Any] = {"limit": 1} if flow == "limit" else {"rate": rota.Rate(5, per=1)}

    @app.task(name="lt", retries=1, backoff=30, **gate)
    def lt() -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("first attempt fails")

    rota.testing.run_pending(app)  # a worker declares the task's limit or rate
    made_ahead(app, fake, "lt", misfire="skip", misfire_grace=10)
    fake.set(minute(1))
    assert rota.testing.run_pending(app) == 1
    fake.set(minute(1, 45))  # the retry is due (30 s backoff), past the tick's grace
    tick_pass(app, 0.0)  # the ticker judges runs made ahead past their deadline
    assert rota.testing.run_pending(app) == 1
    (run,) = runs_of(app, "s")
    assert (run.status, run.attempt, len(attempts)) == ("succeeded", 2, 2), run.error


@pytest.mark.parametrize("flow", ["limit", "rate"])
@pytest.mark.parametrize("late", [False, True], ids=["in-grace", "late"])
def test_a_limited_or_rated_tick_made_ahead_that_waits_past_its_grace_meets_the_misfire_policy(
    app_factory: Callable[..., rota.App], fake: rota.FakeClock, flow: str, late: bool
) -> None:
    """A tick made ahead that waits for a slot (or its rate's window) past its misfire
    deadline is left to the tick pass, as a plain one is: under misfire="skip" it is recorded
    skipped, not run late when the slot frees. Within its grace it runs. (The flow claims did
    not test the deadline: a late one ran when its slot freed before the tick pass came.)"""
    app = app_factory(clock=fake)
    gate: dict[str, Any] = {"limit": 1} if flow == "limit" else {"rate": rota.Rate(1, per=5)}

    @app.task(name="lt", **gate)
    def lt() -> None: ...

    app.migrate()
    app.prepare()  # as a worker does: its limit or rate is stored
    assert app.store.flow_active
    fake.set(minute(1) - timedelta(seconds=1))
    lt.enqueue()
    (blocker,) = app.store.claim("w", 10, None, 600)  # the slot taken, or the window's one start
    made_ahead(app, fake, "lt", misfire="skip", misfire_grace=10)
    fake.set(minute(1, 15 if late else 5))  # the window opened at 00:01:04; the deadline is 00:01:10
    app.store.finish([Outcome(blocker.id, blocker.token, "succeeded", result="null")])  # the slot frees
    (tick,) = runs_of(app, "s")
    assert claim(app) == ([] if late else [int(tick.id)])
    tick_pass(app, 0.0)  # the ticker judges the runs made ahead past their deadline
    (run,) = runs_of(app, "s")
    if late:
        assert run.status == "skipped" and run.error is not None and run.error["type"] == "Misfire", run
    else:
        assert run.status == "running"
