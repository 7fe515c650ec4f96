"""A manual trigger in the lead before a tick (issue 18, item 7), against both stores: the
run made ahead of the tick is not an active run for the overlap policy. The trigger runs
(never refused, never replacing the tick's run), and the tick still happens exactly once,
judged by the policy at the tick with the triggered run as the active one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import rota
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


def triggered_in_the_lead(app: rota.App, fake: rota.FakeClock, overlap: str) -> tuple[rota.Run, rota.RunHandle]:
    app.add_schedule("s", "t", every=60, overlap=overlap)
    fake.set(minute(1) - timedelta(seconds=0.2))
    tick_pass(app)
    (ahead,) = runs_of(app, "s")
    assert (ahead.status, ahead.scheduled_for) == ("pending", minute(1))
    handle = app.trigger("s")  # 0.2 s before the tick
    return ahead, handle


def tick_rows(app: rota.App) -> list[rota.Run]:
    """The rows of the 00:01 tick, without the withdrawn run made ahead."""
    return [
        r
        for r in runs_of(app, "s")
        if r.scheduled_for == minute(1) and not (r.error and r.error.get("type") == "Withdrawn")
    ]


def finish(app: rota.App, claimed: Any, status: str = "succeeded") -> None:
    app.store.finish([Outcome(claimed.id, claimed.token, status, result="null")])


@pytest.mark.parametrize("overlap", ["skip", "queue", "replace"])
def test_a_trigger_in_the_lead_runs_and_withdraws_the_run_made_ahead(
    fapp: rota.App, fake: rota.FakeClock, overlap: str
) -> None:
    ahead, handle = triggered_in_the_lead(fapp, fake, overlap)
    got = fapp.get_run(handle.id)
    assert got.status == "pending" and not got.queued and got.id != ahead.id  # runs now
    withdrawn = fapp.get_run(ahead.id)
    assert withdrawn.status == "cancelled" and withdrawn.error is not None
    assert withdrawn.error["type"] == "Withdrawn" and "was triggered" in withdrawn.error["message"]
    assert fapp.get_schedule("s").next_run_at == minute(1)  # the tick is planned again
    (claimed,) = fapp.store.claim("w", 10, None, 30)
    assert claimed.id == int(handle.id)


@pytest.mark.parametrize(
    ("overlap", "status", "held"),
    [("skip", "skipped", False), ("queue", "pending", True), ("replace", "pending", True)],
)
def test_the_tick_after_a_trigger_meets_the_overlap_policy_once(
    fapp: rota.App, fake: rota.FakeClock, overlap: str, status: str, held: bool
) -> None:
    _, handle = triggered_in_the_lead(fapp, fake, overlap)
    (active,) = fapp.store.claim("w", 10, None, 3600)  # the triggered run is running at the tick
    fake.set(minute(1) - timedelta(seconds=0.1))
    tick_pass(fapp)  # within the lead again: not made ahead while a run is active
    assert tick_rows(fapp) == []
    fake.set(minute(1))
    tick_pass(fapp)
    (row,) = tick_rows(fapp)
    assert (row.status, row.queued) == (status, held)
    if overlap == "replace":
        assert fapp.get_run(handle.id).cancel_requested
    finish(fapp, active, "cancelled" if overlap == "replace" else "succeeded")
    if held:  # handed the slot when the triggered run ended
        assert [c.id for c in fapp.store.claim("w", 10, None, 30)] == [int(row.id)]
    fake.set(minute(1, 30))
    tick_pass(fapp, 0.0)
    assert len(tick_rows(fapp)) == 1  # planned once
    assert fapp.get_schedule("s").next_run_at == minute(2)


@pytest.mark.parametrize("overlap", ["skip", "queue", "replace"])
def test_a_triggered_run_that_ends_before_the_tick_lets_the_tick_run(
    fapp: rota.App, fake: rota.FakeClock, overlap: str
) -> None:
    triggered_in_the_lead(fapp, fake, overlap)
    (active,) = fapp.store.claim("w", 10, None, 30)
    finish(fapp, active)
    fake.set(minute(1))
    tick_pass(fapp)
    (row,) = tick_rows(fapp)
    assert (row.status, row.queued) == ("pending", False)
    assert [c.id for c in fapp.store.claim("w", 10, None, 30)] == [int(row.id)]


def test_a_trigger_while_a_run_really_is_active_is_still_refused_under_skip(
    fapp: rota.App, fake: rota.FakeClock
) -> None:
    fapp.add_schedule("s", "t", every=60, overlap="skip")
    fake.set(minute(1))
    tick_pass(fapp, 0.0)
    fapp.store.claim("w", 10, None, 3600)
    with pytest.raises(rota.TriggerRefused):
        fapp.trigger("s")


def test_a_concurrent_schedule_keeps_its_run_made_ahead_on_trigger(fapp: rota.App, fake: rota.FakeClock) -> None:
    ahead, handle = triggered_in_the_lead(fapp, fake, "concurrent")
    assert fapp.get_run(ahead.id).status == "pending"
    assert fapp.get_run(handle.id).status == "pending"


@pytest.mark.parametrize("overlap", ["queue", "replace"])
def test_a_tick_queued_behind_an_active_run_that_another_worker_made_first_aborts_the_pass(
    app_factory: Callable[..., rota.App], monkeypatch: pytest.MonkeyPatch, overlap: str
) -> None:
    """Between this pass's look (tick_exists: no row) and its insert of the queued run, another
    worker committed the tick's row: the insert does nothing. The pass is rolled back as when
    tick_exists finds the row (it raised IndexError, which ended the worker's ticks role)."""
    clock = rota.FakeClock(datetime(2030, 1, 1, 0, 0, 59, tzinfo=UTC))
    app = app_factory(clock=clock)
    app.task(name="t")(lambda: None)
    app.add_schedule("s", "t", every=60, overlap=overlap)
    active = app.trigger("s")  # the active run the tick meets: running (replace queues behind it)
    store: Any = app.store
    assert [c.id for c in store.claim("w", 1, None, 30.0)] == [int(active.id)]
    clock.set(datetime(2030, 1, 1, 0, 1, 0, 100_000, tzinfo=UTC))
    real = store._insert_run

    def insert(s: Any, run: Any) -> list[Any]:
        return [] if run.held and run.tick is not None else real(s, run)  # as if it met the other's row

    monkeypatch.setattr(store, "_insert_run", insert)
    worker = app.worker(install_signal_handlers=False)
    due = store.due_schedules(10, 0.0)
    plan = worker._ticker._plan(due[0], store.now(), 0.0)
    assert not isinstance(plan, str)
    assert store.materialize(due[0], plan) is False  # locked out, nothing half written
    assert [r.id for r in app.list_runs(schedule="s")] == [active.id]
    assert app.get_run(active.id).status == "running" and not app.get_run(active.id).cancel_requested
