"""Ticks made ahead of their tick (issue 12, target 5), against both stores: the next tick's
run is inserted a short lead before the tick as a pending run due at the tick; one run per
tick with several workers; exclusive schedules with an active run wait for the tick; pause,
update and redeploy withdraw a run made ahead. Wake-ups carrying a due time are at the end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import rota
from rota.worker.wakeups import CLAIM_AHEAD, EARLY, DueTimes, Wakeups

from .conftest import WITH_MYSQL, make_app, store_url
from .test_wakeups import listener as listener_of

START = datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC)
LEAD = 0.3


def minute(m: int, s: float = 0) -> datetime:
    return datetime(2030, 1, 1, 0, m, tzinfo=UTC) + timedelta(seconds=s)


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    yield from store_url(request, tmp_path)


@pytest.fixture
def fake() -> rota.FakeClock:
    return rota.FakeClock(START)


@pytest.fixture
def fapp(app_factory: Callable[..., rota.App], fake: rota.FakeClock) -> rota.App:
    app = app_factory(clock=fake)

    @app.task(name="t")
    def t(*args: Any, **kwargs: Any) -> None: ...

    return app


def tick_pass(app: rota.App, lead: float = LEAD) -> rota.Worker:
    """One pass of a worker's ticker, `lead` seconds ahead (no claims, no handlers)."""
    worker = app.worker(install_signal_handlers=False)
    try:
        asyncio.run(worker._ticker.ticks(lead))
    finally:
        worker._threads.close()
        worker._db_pool.close()
    return worker


def runs_of(app: rota.App, name: str) -> list[rota.Run]:
    return sorted(app.list_runs(schedule=name, limit=1000), key=lambda r: (r.scheduled_for, int(r.id)))


def claim_and_finish(app: rota.App) -> list[int]:
    from rota.stores.base import Outcome

    claimed = app.store.claim("test-worker", 100, None, 30)
    app.store.finish([Outcome(c.id, c.token, "succeeded", result="null") for c in claimed])
    return [c.id for c in claimed]


def test_the_next_tick_is_made_ahead_as_a_pending_run_due_at_the_tick(fapp: rota.App, fake: rota.FakeClock) -> None:
    fapp.add_schedule("s", "t", every=60)
    fake.set(minute(1) - timedelta(seconds=1))  # 1 s before the tick: beyond the lead
    tick_pass(fapp)
    assert runs_of(fapp, "s") == []
    fake.set(minute(1) - timedelta(seconds=0.2))  # within the lead
    assert tick_pass(fapp).counters.ticks == 1
    (run,) = runs_of(fapp, "s")
    assert (run.status, run.scheduled_for) == ("pending", minute(1))
    assert fapp.get_schedule("s").next_run_at == minute(2)
    assert fapp.store.claim("w", 10, None, 30) == []  # not due before its tick
    fake.set(minute(1))
    (claimed,) = fapp.store.claim("w", 10, None, 30)
    assert claimed.id == int(run.id)


def test_a_run_made_ahead_is_not_a_misfire_and_catch_up_is_unchanged(fapp: rota.App, fake: rota.FakeClock) -> None:
    fapp.add_schedule("s", "t", every=60, misfire="skip", misfire_grace=0)
    fake.set(minute(3) - timedelta(seconds=0.1))  # 00:01 and 00:02 missed; 00:03 ahead
    tick_pass(fapp)
    runs = runs_of(fapp, "s")
    assert [(r.scheduled_for, r.status) for r in runs] == [
        (minute(1), "skipped"),
        (minute(2), "skipped"),
        (minute(3), "pending"),
    ]
    assert fapp.get_schedule("s").next_run_at == minute(4)


def test_one_run_per_tick_when_several_workers_make_it_ahead(fapp: rota.App, fake: rota.FakeClock) -> None:
    fapp.add_schedule("s", "t", every=60)
    fake.set(minute(1) - timedelta(seconds=0.2))
    first, second = fapp.worker(install_signal_handlers=False), fapp.worker(install_signal_handlers=False)

    async def both() -> None:
        # both read the same due schedule, then both write: one wins, one is locked out
        batch = fapp.store.due_schedules(10, LEAD)
        now = fapp.store.now()
        for w in (first, second):
            plan = w._ticker._plan(batch[0], now, LEAD)
            assert not isinstance(plan, str) and plan.ahead == minute(1)
            w.counters.locked_out += 0 if fapp.store.materialize(batch[0], plan) else 1

    try:
        asyncio.run(both())
    finally:
        for w in (first, second):
            w._threads.close()
            w._db_pool.close()
    assert first.counters.locked_out + second.counters.locked_out == 1
    assert [r.scheduled_for for r in runs_of(fapp, "s")] == [minute(1)]
    tick_pass(fapp)  # a third worker, later in the lead: nothing more
    assert [r.scheduled_for for r in runs_of(fapp, "s")] == [minute(1)]


@pytest.mark.parametrize("overlap", ["skip", "queue", "replace"])
def test_an_exclusive_schedule_with_an_active_run_is_judged_at_the_tick(
    fapp: rota.App, fake: rota.FakeClock, overlap: str
) -> None:
    fapp.add_schedule("s", "t", every=60, overlap=overlap)
    fake.set(minute(1))
    tick_pass(fapp)
    (active,) = fapp.store.claim("busy", 10, None, 3600)  # the 00:01 run is running
    fake.set(minute(2) - timedelta(seconds=0.2))
    assert tick_pass(fapp).counters.ticks == 0
    assert [r.scheduled_for for r in runs_of(fapp, "s")] == [minute(1)]  # nothing ahead
    assert fapp.get_schedule("s").next_run_at == minute(2)
    # the active run ends just before the tick: the tick runs (not skipped, held or replacing)
    from rota.stores.base import Outcome

    fapp.store.finish([Outcome(active.id, active.token, "succeeded", result="null")])
    fake.set(minute(2))
    tick_pass(fapp)
    last = runs_of(fapp, "s")[-1]
    assert (last.scheduled_for, last.status) == (minute(2), "pending")
    assert claim_and_finish(fapp) == [int(last.id)]


def test_a_concurrent_schedule_is_made_ahead_even_with_a_run_active(fapp: rota.App, fake: rota.FakeClock) -> None:
    fapp.add_schedule("s", "t", every=60, overlap="concurrent")
    fake.set(minute(1))
    tick_pass(fapp)
    fapp.store.claim("busy", 10, None, 3600)
    fake.set(minute(2) - timedelta(seconds=0.2))
    tick_pass(fapp)
    assert [(r.scheduled_for, r.status) for r in runs_of(fapp, "s")] == [(minute(1), "running"), (minute(2), "pending")]


def _made_ahead(app: rota.App, fake: rota.FakeClock, **options: Any) -> rota.Run:
    app.add_schedule("s", "t", every=60, **options)
    fake.set(minute(1) - timedelta(seconds=0.2))
    tick_pass(app)
    (run,) = runs_of(app, "s")
    assert run.status == "pending"
    return run


def _withdrawn(app: rota.App, run: rota.Run, what: str) -> None:
    got = app.get_run(run.id)
    assert got.status == "cancelled"
    assert got.error is not None and got.error["type"] == "Withdrawn", got.error
    assert what in got.error["message"]


def test_pause_withdraws_a_run_made_ahead(fapp: rota.App, fake: rota.FakeClock) -> None:
    run = _made_ahead(fapp, fake)
    fapp.pause("s")
    _withdrawn(fapp, run, "was paused")
    fake.set(minute(1, 1))
    assert fapp.store.claim("w", 10, None, 30) == []  # nothing fires while paused
    fapp.resume("s")
    assert fapp.get_schedule("s").next_run_at == minute(2)


def test_an_update_withdraws_a_run_made_ahead_and_plans_its_tick_again(fapp: rota.App, fake: rota.FakeClock) -> None:
    run = _made_ahead(fapp, fake, args=[1])
    fapp.update_schedule("s", args=[2])  # same timing: the 00:01 tick runs, with the new args
    _withdrawn(fapp, run, "was updated")
    assert fapp.get_schedule("s").next_run_at == minute(1)
    fake.set(minute(1))
    tick_pass(fapp)
    last = runs_of(fapp, "s")[-1]
    assert (last.scheduled_for, last.status, last.args) == (minute(1), "pending", [2])


def test_a_timing_update_withdraws_a_run_made_ahead_and_follows_the_new_timing(
    fapp: rota.App, fake: rota.FakeClock
) -> None:
    run = _made_ahead(fapp, fake)
    fapp.update_schedule("s", every=300)
    _withdrawn(fapp, run, "was updated")
    assert fapp.get_schedule("s").next_run_at == minute(5)


def test_a_redeploy_with_a_new_definition_withdraws_a_run_made_ahead(
    app_factory: Callable[..., rota.App], fake: rota.FakeClock
) -> None:
    v1 = app_factory(clock=fake)

    @v1.schedule(every=60, name="s")
    def s1() -> None: ...

    v1.prepare()
    fake.set(minute(1) - timedelta(seconds=0.2))
    tick_pass(v1)
    (run,) = runs_of(v1, "s")
    v1.prepare()  # a restart with the same definition keeps it
    assert v1.get_run(run.id).status == "pending"

    v2 = app_factory(clock=fake)

    @v2.schedule(every=120, name="s")
    def s2() -> None: ...

    v2.prepare()
    _withdrawn(v2, run, "was redeployed")
    assert v2.get_schedule("s").next_run_at == minute(2)


def test_removing_a_schedule_cancels_a_run_made_ahead(fapp: rota.App, fake: rota.FakeClock) -> None:
    run = _made_ahead(fapp, fake)
    fapp.remove_schedule("s")
    assert fapp.get_run(run.id).status == "cancelled"


def test_a_retry_waiting_for_its_backoff_is_not_withdrawn_by_pause(fapp: rota.App, fake: rota.FakeClock) -> None:
    from rota.stores.base import Outcome

    fapp.add_schedule("s", "t", every=60, retries=2)
    fake.set(minute(1))
    tick_pass(fapp, 0.0)
    (claimed,) = fapp.store.claim("w", 10, None, 30)
    fapp.store.finish([Outcome(claimed.id, claimed.token, "pending", error='{"type": "E"}', retry_in=30.0)])
    assert fapp.get_run(claimed.id).status == "pending"
    fapp.pause("s")
    assert fapp.get_run(claimed.id).status == "pending"


# -- wake-ups carrying a due time ----------------------------------------------------------


def test_a_wakeup_with_a_due_time_lowers_the_sleep_and_never_raises_it() -> None:
    async def body() -> None:
        due = DueTimes()
        wakeups = Wakeups(lambda: None, due, lambda: 1)  # type: ignore[arg-type,return-value]
        due.learn_clock(time.time(), time.monotonic())
        wakeups.on_wakeup(f"run:{time.time() + 5:.6f}")
        assert due.run_due is not None and 4.9 < due.run_due - time.monotonic() <= 5.0
        assert due.wake.is_set()
        due.wake.clear()
        wakeups.on_wakeup(f"run:{time.time() + 9:.6f}")  # later: the sooner time stays
        assert due.run_due - time.monotonic() <= 5.0 and not due.wake.is_set()
        wakeups.on_wakeup("run")
        assert due.run_due <= time.monotonic() and due.wake.is_set()

    asyncio.run(body())


def test_the_clock_estimate_keeps_the_fastest_reply() -> None:
    due = DueTimes()
    mono = time.monotonic()
    assert due.learn_clock(1000.0, mono + 0.0001) == pytest.approx(1000.0 - mono - 0.0001)
    # a slow reply (read 20 ms after the database's now) does not make the next due time late
    assert due.learn_clock(1001.0, mono + 1.0201) == pytest.approx(1000.0 - mono - 0.0001)
    # a clock that stepped back by more than a second is taken at once
    assert due.learn_clock(900.0, mono + 2.0) == pytest.approx(900.0 - mono - 2.0)


def test_a_due_run_is_waited_for_a_little_early_then_stepped_to() -> None:
    due = DueTimes()
    due.claim_ahead = 0.0  # claimed at its due time only
    due.run_due = time.monotonic() + 1.0
    assert 1.0 - EARLY - 0.01 < due.until(time.monotonic() + 5, due.run_due) <= 1.0 - EARLY
    assert due.until(time.monotonic() + 1.0) > 1.0 - EARLY  # a poll deadline: no stepping
    assert not due.ahead_due()


def test_a_due_run_is_claimed_ahead_first_then_waited_for_to_its_time() -> None:
    due = DueTimes()
    due.run_due = time.monotonic() + 1.0
    ahead = 1.0 - CLAIM_AHEAD
    assert ahead - 0.01 < due.until(time.monotonic() + 5, due.run_due) <= ahead  # wake to claim it ahead
    assert not due.ahead_due()
    due.run_due = time.monotonic() + CLAIM_AHEAD / 2
    assert due.ahead_due()
    due.ahead_upto = due.run_due  # claimed ahead (or tried): wait for its time, then step to it
    assert not due.ahead_due()
    assert CLAIM_AHEAD / 2 - EARLY - 0.01 < due.until(time.monotonic() + 5, due.run_due) <= CLAIM_AHEAD / 2 - EARLY


def test_a_delayed_enqueue_notifies_its_due_time_on_the_database_clock(pg_url: str) -> None:
    app = make_app(pg_url)
    task = app.task(name="t")(lambda: None)
    with listener_of(pg_url, app) as conn:  # the channel of the test's schema
        ref = task.options(delay=timedelta(seconds=30)).enqueue()
        payloads = [note.payload for note in conn.notifies(timeout=1.0, stop_after=1)]
    scheduled = app.get_run(ref.id).scheduled_for
    assert scheduled is not None and len(payloads) == 1 and payloads[0].startswith("run:")
    assert abs(float(payloads[0][4:]) - scheduled.timestamp()) < 0.001
    app.close()


def test_an_idle_worker_with_a_long_poll_runs_a_delayed_run_on_time(app: rota.App) -> None:
    from .conftest import start_worker

    task = app.task(name="stamp", pass_context=True)(lambda ctx: time.time() - ctx.scheduled_for.timestamp())
    start_worker(app, poll_interval=30.0)
    time.sleep(0.5)  # idle, sleeping up to 30 s
    run = task.options(delay=timedelta(seconds=3)).enqueue().wait(10)  # not due within 2 s
    assert run.status == "succeeded" and 0 <= run.result < 0.1, run.result


# -- a clean shutdown withdraws the runs it made ahead ---------------------------------------


def _until(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
    return found


def _stopped_inside_the_lead(app: rota.App, fake: rota.FakeClock, **options: Any) -> rota.Run:
    """A worker makes the 00:01 tick ahead (the clock held inside the lead), then stops."""
    from .conftest import start_worker

    app.add_schedule("s", "t", every=60, **options)
    fake.set(minute(1) - timedelta(seconds=0.2))
    worker = start_worker(app, poll_interval=1.0)  # lead 0.3 s
    (run,) = _until(lambda: runs_of(app, "s"))
    assert run.status == "pending" and run.scheduled_for == minute(1)
    assert worker.stop(wait=True, timeout=10)
    return run


def test_a_worker_stopped_inside_the_lead_withdraws_its_run_made_ahead(fapp: rota.App, fake: rota.FakeClock) -> None:
    run = _stopped_inside_the_lead(fapp, fake)
    _withdrawn(fapp, run, "which stopped before this tick came")
    assert fapp.get_run(run.id).scheduled_for == minute(1)
    assert [r.status for r in runs_of(fapp, "s")] == ["cancelled"]  # nothing pending left
    assert fapp.get_schedule("s").next_run_at == minute(1)  # the tick is planned again


@pytest.mark.parametrize("misfire", ["coalesce", "skip"])
def test_after_a_restart_past_the_grace_the_misfire_policy_applies_as_without_ticks_ahead(
    fapp: rota.App, fake: rota.FakeClock, misfire: str
) -> None:
    withdrawn = _stopped_inside_the_lead(fapp, fake, misfire=misfire, misfire_grace=10)
    fapp.add_schedule("ref", "t", every=60, misfire=misfire, misfire_grace=10)  # never made ahead
    assert fapp.get_schedule("ref").next_run_at == fapp.get_schedule("s").next_run_at == minute(1)
    fake.set(minute(5, 30))  # workers come back minutes later, past the grace of every tick missed
    tick_pass(fapp, 0.0)
    kept = [(r.scheduled_for, r.status) for r in runs_of(fapp, "s") if r.id != withdrawn.id]
    assert kept == [(r.scheduled_for, r.status) for r in runs_of(fapp, "ref")]
    pending = [tick for tick, status in kept if status == "pending"]
    assert pending == ([minute(5)] if misfire == "coalesce" else [])
    assert fapp.get_schedule("s").next_run_at == fapp.get_schedule("ref").next_run_at == minute(6)


def test_stopping_one_of_two_workers_inside_the_lead_still_runs_the_tick_once_on_time(
    app_factory: Callable[..., rota.App],
) -> None:
    from .conftest import start_worker

    apps = [app_factory(), app_factory()]
    for app in apps:
        app.task(name="stamp", pass_context=True)(lambda ctx: time.time() - ctx.scheduled_for.timestamp())
    apps[0].add_schedule("s", "stamp", every=2)
    workers = [start_worker(app, poll_interval=1.0) for app in apps]  # lead 0.3 s

    def made_ahead() -> list[tuple[Any, datetime]]:  # a tick made ahead that is still > 0.1 s away
        ticks = [(w, w._ticker.made_ahead.get("s")) for w in workers]
        return [(w, t) for w, t in ticks if t is not None and t.timestamp() - time.time() > 0.1]

    ((maker, tick),) = _until(made_ahead)
    (ahead,) = [r for r in runs_of(apps[0], "s") if r.scheduled_for == tick]
    assert maker.stop(wait=True, timeout=10)
    assert time.time() < ahead.scheduled_for.timestamp(), "stopped after the tick: too slow a machine"
    _withdrawn(apps[0], ahead, "which stopped before this tick came")
    (run,) = _until(lambda: [r for r in runs_of(apps[0], "s") if r.scheduled_for == tick and r.id != ahead.id])
    run = _until(lambda: (got := apps[0].get_run(run.id)).finished_at and got)
    assert run.status == "succeeded" and 0 <= run.result < 0.25, run.result  # on time (usual lateness: ms)


def test_a_tick_rewound_sooner_wakes_the_ticker_of_a_worker_that_learns_it_by_a_claim(
    app_factory: Callable[..., rota.App], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle worker knows the next tick is a period away (made ahead); another process
    withdraws it (its tick is next again) and enqueues a run. On MySQL the quick probe sees
    only the new run (the whole probe, here once a minute, may miss the rewind: the tick
    made ahead and withdrawn between two of its looks, as a stopping worker does): the claim
    at once reads what is due, and the sooner tick must wake the ticker, asleep until the
    later tick or its poll (the tick ran up to that late)."""
    from rota.worker import wakeups

    from .conftest import start_worker

    monkeypatch.setattr(wakeups, "WHOLE", 60.0)
    worker_app, admin = app_factory(), app_factory()
    worker_app.task(name="stamp", pass_context=True)(lambda ctx: time.time() - ctx.scheduled_for.timestamp())
    worker_app.task(name="warm")(lambda: None)
    warm = admin.task(name="warm")(lambda: None)
    start_worker(worker_app, poll_interval=30.0)  # (started before the 3 s: 1-2 s on a loaded MySQL)
    assert warm.enqueue().wait(timeout=10).status == "succeeded"  # it has started
    _until(lambda: time.time() % 3 < 0.2)  # just after a tick of every 3 s
    admin.add_schedule("s", "stamp", every=3)
    tick_pass(admin, lead=3.0)  # the next tick made ahead: the schedule's next is the one after
    (ahead,) = runs_of(admin, "s")
    assert warm.enqueue().wait(timeout=10).status == "succeeded"  # it has learned
    time.sleep(0.2)
    assert admin.store.withdraw_ahead(["s"], "was withdrawn by the test") == {"s": ahead.scheduled_for}
    warm.enqueue()
    assert time.time() < ahead.scheduled_for.timestamp() - 0.5, "too slow a machine"
    (run,) = _until(lambda: [r for r in runs_of(admin, "s") if r.id != ahead.id and r.finished_at], timeout=8)
    assert run.scheduled_for == ahead.scheduled_for, (run.scheduled_for, ahead.scheduled_for)
    assert run.status == "succeeded" and 0 <= run.result < 0.25, run.result


def test_a_schedule_added_by_another_process_is_ticked_on_time_by_an_idle_worker(
    app_factory: Callable[..., rota.App],
) -> None:
    """Another App (its own store: as another process) adds a schedule: the idle worker,
    polling every 30 s, hears of it: NOTIFY, the SQLite file's data_version, MySQL's change
    probe (which did not look at the schedules: the first tick waited for the poll; a run
    made ahead and withdrawn by a stopping worker fired up to a poll interval late)."""
    from .conftest import start_worker

    worker_app, admin = app_factory(), app_factory()
    worker_app.task(name="stamp", pass_context=True)(lambda ctx: time.time() - ctx.scheduled_for.timestamp())
    worker_app.task(name="warm")(lambda: None)
    warm = admin.task(name="warm")(lambda: None)
    start_worker(worker_app, poll_interval=30.0)
    assert warm.enqueue().wait(timeout=10).status == "succeeded"  # it has started
    time.sleep(0.3)  # idle, its change watch looking
    admin.add_schedule("s", "stamp", every=2)
    (run,) = _until(lambda: [r for r in runs_of(admin, "s") if r.finished_at], timeout=8)
    assert run.status == "succeeded" and 0 <= run.result < 0.25, run.result


def test_a_database_error_while_withdrawing_does_not_block_shutdown(
    fapp: rota.App, fake: rota.FakeClock, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from rota.errors import DatabaseUnavailable

    def unavailable(names: Any, why: str) -> dict[str, datetime]:
        raise DatabaseUnavailable("the database went away")

    monkeypatch.setattr(fapp.store, "withdraw_ahead", unavailable)
    with caplog.at_level("WARNING", logger="rota.worker"):
        run = _stopped_inside_the_lead(fapp, fake)  # stops (within 10 s) all the same
    assert fapp.get_run(run.id).status == "pending"  # left as documented: it fires at its tick
    assert "could not withdraw the runs made ahead" in caplog.text
