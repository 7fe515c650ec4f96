"""A `by=` that cannot key a call, on both stores: refused in one line where the call is
made (enqueue, a schedule's decorator, add_schedule, update_schedule), and, for arguments
stored where the task is not declared, never allowed to stop a worker's ticks: the tick is
recorded skipped with the error (rota/limit_specs.py, stamp_lenient)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import rota

from .test_flow_declared import _gates
from .test_schedules import poll_once

START = datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC)


def _shop(order: dict[str, str], **_: Any) -> str:
    return order["shop"]


def _declaring(app_factory: Callable[..., rota.App], **options: Any) -> rota.App:
    app = app_factory(**options)

    @app.task(limit=rota.Limit(1, by=_shop), name="by_call")
    def by_call(order: dict[str, str]) -> None: ...

    @app.task(name="plain")
    def plain() -> None: ...

    app.migrate()
    return app


def test_a_by_callable_that_raises_is_refused_at_enqueue_and_stores_nothing(
    app_factory: Callable[..., rota.App],
) -> None:
    app = _declaring(app_factory)
    task = app.tasks["by_call"]
    with pytest.raises(
        rota.ConfigurationError, match=r"^limit by=_shop of task by_call raised KeyError: 'shop' .*\{'nope'"
    ):
        task.enqueue({"nope": 1})
    with pytest.raises(rota.ConfigurationError, match="raised KeyError"):
        task.enqueue_many([(({"shop": "a"},), {}), (({},), {})])
    assert app.list_runs() == []  # nothing of the batch either
    task.enqueue({"shop": "a"})
    assert [r.task for r in app.list_runs()] == ["by_call"]


def test_schedule_arguments_the_by_callable_cannot_key_are_refused_where_declared(
    app_factory: Callable[..., rota.App],
) -> None:
    app = _declaring(app_factory)
    with pytest.raises(rota.ConfigurationError, match="schedule 'bad'|raised KeyError"):
        app.schedule(every=60, name="bad", args=[{}])(app.tasks["by_call"])
    assert "bad" not in app.schedules
    with pytest.raises(rota.ConfigurationError, match="raised KeyError"):
        app.add_schedule("stored", "by_call", every=60, args=[{}])
    with pytest.raises(rota.ConfigurationError, match="cannot take 2 positional"):
        app.add_schedule("stored", "by_call", every=60, args=[{"shop": "a"}, 2])
    assert app.list_schedules() == []
    app.add_schedule("stored", "by_call", every=60, args=[{"shop": "a"}])
    with pytest.raises(rota.ConfigurationError, match="raised KeyError"):
        app.update_schedule("stored", args=[{}])
    assert app.get_schedule("stored").args == [{"shop": "a"}]


def test_a_stored_schedules_tick_that_cannot_be_keyed_is_recorded_skipped_and_the_others_tick(
    app_factory: Callable[..., rota.App], caplog: pytest.LogCaptureFixture
) -> None:
    clock = rota.FakeClock(START)
    worker = _declaring(app_factory, clock=clock)
    worker.prepare()
    elsewhere = app_factory(clock=clock)  # does not declare by_call: cannot check the arguments
    elsewhere.add_schedule("bad", "by_call", every=60, args=[{}])  # overlap=skip: exclusive
    elsewhere.add_schedule("good", "plain", every=60, overlap="concurrent")
    for _ in range(2):
        clock.advance(timedelta(seconds=60))  # 00:01:30, then 00:02:30: each schedule's tick is due
        poll_once(worker)  # a KeyError here stopped every schedule's ticks on every worker
    runs = sorted(worker.list_runs(), key=lambda r: (r.schedule or "", r.scheduled_for))
    assert [(r.schedule, r.status) for r in runs] == [("bad", "skipped")] * 2 + [("good", "pending")] * 2
    assert all(_gates(worker)[r.id] == (None, None, None, None) for r in runs if r.schedule == "bad")
    assert runs[0].error is not None and runs[0].error["type"] == "ConfigurationError"
    assert "keys cannot be computed: limit by=_shop of task by_call raised KeyError: 'shop'" in runs[0].error["message"]
    bad = worker.get_schedule("bad")
    assert (bad.skip_count, bad.plan_error) == (2, None)  # as a misfire skip: counted, in its history
    assert bad.next_run_at == START + timedelta(minutes=2, seconds=30)  # it goes on: a fixed deploy keys it
    assert "schedule 'bad': the tick at 2030-01-01T00:01:00+00:00 is recorded skipped" in caplog.text


def test_a_tick_that_cannot_be_keyed_is_not_made_ahead(app_factory: Callable[..., rota.App]) -> None:
    from .test_ticks_ahead import tick_pass

    clock = rota.FakeClock(START)
    worker = _declaring(app_factory, clock=clock)
    worker.prepare()
    app_factory(clock=clock).add_schedule("bad", "by_call", every=60, args=[{}], overlap="concurrent")
    clock.set(START + timedelta(seconds=29.8))  # 0.2 s before the 00:01 tick: within the lead
    tick_pass(worker)
    assert worker.list_runs() == []  # not pending ahead under no key: planned at its tick
    clock.set(START + timedelta(seconds=30))
    tick_pass(worker)
    assert [r.status for r in worker.list_runs()] == ["skipped"]
