"""A `by=` that cannot key a call, on both stores: refused in one line where the call is
made (enqueue, a schedule's decorator, add_schedule, update_schedule), and, for arguments
stored where the task is not declared, never allowed to stop a worker's ticks: the tick is
recorded skipped with the error (rota/limit_specs.py, stamp_lenient)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import rota
from rota.events import Event
from rota.limit_specs import UNRESOLVED

from .conftest import WITH_MYSQL, store_url
from .test_flow_declared import _gates
from .test_schedules import poll_once


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


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
    elsewhere = app_factory(clock=clock)
    elsewhere.add_schedule("bad", "by_call", every=60, args=[{}], overlap="concurrent")
    elsewhere.add_schedule("good", "by_call", every=60, args=[{"shop": "a"}], overlap="concurrent")
    clock.set(START + timedelta(seconds=29.8))  # 0.2 s before the 00:01 tick: within the lead
    tick_pass(worker)
    # the keyable schedule's tick is made ahead in this very pass (the ahead path ran), keyed;
    # the other's is not pending ahead under no key: it is planned at its tick
    (ahead,) = worker.list_runs()
    assert (ahead.schedule, ahead.status, ahead.scheduled_for) == ("good", "pending", START + timedelta(seconds=30))
    assert _gates(worker)[ahead.id] == ("by_call", "a", None, None)
    clock.set(START + timedelta(seconds=30))
    tick_pass(worker)
    assert [r.status for r in worker.list_runs(schedule="bad")] == ["skipped"]


def test_a_tick_made_where_the_task_is_not_declared_is_recorded_skipped_when_resolved(
    app_factory: Callable[..., rota.App], caplog: pytest.LogCaptureFixture
) -> None:
    """The tick pass ran in a process that does not declare by_call (a worker of other tasks):
    its ticks wait unresolved (the stored spec says "callable"); the declaring worker that
    resolves them records the one it cannot key skipped, as the tick pass would have, and
    counts it once in the schedule's skip_count. The keyable one is keyed and runs."""
    clock = rota.FakeClock(START)
    worker = _declaring(app_factory, clock=clock)
    worker.prepare()
    other = app_factory(clock=clock)

    @other.task(name="unrelated")
    def unrelated() -> None: ...

    other.prepare()  # a worker that does not declare by_call makes the ticks
    other.add_schedule("bad", "by_call", every=60, args=[{}])  # overlap=skip: exclusive
    other.add_schedule("fine", "by_call", every=60, args=[{"shop": "a"}], overlap="concurrent")
    clock.advance(timedelta(seconds=60))  # 00:01:30: both 00:01 ticks are due
    poll_once(other)
    assert {r.schedule: r.status for r in worker.list_runs()} == {"bad": "pending", "fine": "pending"}
    assert worker.store.resolve_runs(worker.tasks) == 2
    runs = {r.schedule: r for r in worker.list_runs()}
    bad, fine = runs["bad"], runs["fine"]
    assert (bad.status, fine.status) == ("skipped", "pending")
    assert bad.error is not None and bad.error["type"] == "ConfigurationError"
    assert "keys cannot be computed: limit by=_shop of task by_call raised KeyError: 'shop'" in bad.error["message"]
    assert bad.finished_at is not None
    assert _gates(worker)[bad.id] == (None, None, None, None)
    assert _gates(worker)[fine.id] == ("by_call", "a", None, None)
    assert worker.get_schedule("bad").skip_count == 1  # counted once, as a skipped tick inserted
    assert "schedule 'bad': the tick at 2030-01-01T00:01:00+00:00 is recorded skipped" in caplog.text
    assert "takes the empty key" not in caplog.text
    (claimed,) = worker.store.claim("w", 10, None, 30.0)
    assert str(claimed.id) == fine.id


def test_an_unkeyable_tick_is_logged_only_by_the_pass_that_recorded_it(
    app_factory: Callable[..., rota.App], caplog: pytest.LogCaptureFixture
) -> None:
    """Two workers read the same due schedule; the second's pass is rolled back (the first
    made the tick): only the first logs the tick recorded skipped."""
    clock = rota.FakeClock(START)
    app = _declaring(app_factory, clock=clock)
    app.prepare()
    app_factory(clock=clock).add_schedule("bad", "by_call", every=60, args=[{}], overlap="concurrent")
    clock.advance(timedelta(seconds=60))  # 00:01:30: the 00:01 tick is due
    first, second = app.worker(install_signal_handlers=False), app.worker(install_signal_handlers=False)
    try:
        (due,) = app.store.due_schedules(10, 0.0)
        made = []
        for w in (first, second):
            plan = w._ticker._plan(due, app.store.now(), 0.0)
            assert not isinstance(plan, str)
            made.append(app.store.materialize(due, plan))
    finally:
        for w in (first, second):
            w._threads.close()
            w._db_pool.close()
    assert made == [True, False]
    assert [r.status for r in app.list_runs()] == ["skipped"]
    assert caplog.text.count("schedule 'bad': the tick at 2030-01-01T00:01:00+00:00 is recorded skipped") == 1


def test_a_tick_made_ahead_where_the_task_is_not_declared_is_recorded_skipped_when_resolved(
    app_factory: Callable[..., rota.App],
) -> None:
    from .test_ticks_ahead import tick_pass

    clock = rota.FakeClock(START)
    worker = _declaring(app_factory, clock=clock)
    worker.prepare()
    other = app_factory(clock=clock)
    other.task(name="unrelated")(lambda: None)
    other.prepare()
    other.add_schedule("bad", "by_call", every=60, args=[{}], overlap="concurrent")
    clock.set(START + timedelta(seconds=29.8))  # within the lead of the 00:01 tick
    tick_pass(other)
    (ahead,) = worker.list_runs()
    assert (ahead.status, _gates(worker)[ahead.id][0]) == ("pending", UNRESOLVED)  # made ahead, unresolved
    assert worker.store.resolve_runs(worker.tasks) == 1
    (run,) = worker.list_runs()
    assert run.status == "skipped" and run.error is not None and run.error["type"] == "ConfigurationError"
    assert worker.get_schedule("bad").skip_count == 1
    clock.set(START + timedelta(seconds=31))
    tick_pass(worker)  # nothing left to judge at its tick
    assert [r.status for r in worker.list_runs()] == ["skipped"]


def test_an_unkeyable_tick_sends_run_skipped_whoever_records_it(app_factory: Callable[..., rota.App]) -> None:
    """As a misfire skip does: a tick recorded skipped because its by= cannot key it sends
    run_skipped with that run and the error's message, both when a declaring worker keys a
    tick made elsewhere (skip_unkeyed: sent by its next poll) and when its own tick pass
    records one. Neither sent any event."""
    clock = rota.FakeClock(START)
    worker = _declaring(app_factory, clock=clock)
    worker.prepare()
    seen: list[Event] = []
    worker.on("run_skipped")(seen.append)
    other = app_factory(clock=clock)
    other.task(name="unrelated")(lambda: None)
    other.prepare()
    other.add_schedule("bad", "by_call", every=60, args=[{}], overlap="concurrent")
    clock.advance(timedelta(seconds=60))  # 00:01:30: the 00:01 tick is due
    poll_once(other)  # made where by_call is not declared: it waits unresolved
    assert worker.store.resolve_runs(worker.tasks) == 1  # as the declaring worker's flow claim does
    poll_once(worker)  # its next poll; no tick of its own is due (00:02)
    clock.advance(timedelta(seconds=60))  # 00:02:30
    poll_once(worker)  # its tick pass records the 00:02 tick skipped
    assert worker.events.drain(5)
    skipped = sorted(worker.list_runs(status="skipped"), key=lambda r: r.scheduled_for)
    assert [r.scheduled_for for r in skipped] == [START + timedelta(seconds=30), START + timedelta(seconds=90)]
    assert [(e.schedule_name, e.run.id if e.run else None) for e in seen] == [("bad", r.id) for r in skipped]
    assert all(e.detail and "keys cannot be computed: limit by=_shop" in e.detail for e in seen), seen
    poll_once(worker)  # nothing new: nothing is sent twice
    assert worker.events.drain(5) and len(seen) == 2
