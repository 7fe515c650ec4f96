"""Schedules in one process, against both stores: misfire after downtime (with a FakeClock),
overlap and manual triggers, schedules as data, code schedules synced at start, pause and
resume, counters, many idle schedules, the too-frequent warning, bad input, and the CLI.

Fire times themselves (cron, zones, DST, misfire arithmetic) are tested in test_timing.py;
several processes racing over the same ticks are in test_schedules_processes.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner

import rota
from rota.cli import main as cli
from rota.stores.base import Outcome

from .conftest import STORES, WITH_MYSQL, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


START = datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC)  # a Tuesday, 30 s past midnight UTC
SECOND = timedelta(seconds=1)


def minute(m: int, s: int = 0) -> datetime:
    return datetime(2030, 1, 1, 0, m, s, tzinfo=UTC)


@pytest.fixture
def fake() -> rota.FakeClock:
    return rota.FakeClock(START)


@pytest.fixture
def fapp(app_factory: Callable[..., rota.App], fake: rota.FakeClock) -> rota.App:
    """An app whose store takes "now" from the fake clock (no worker runs unless started)."""
    app = app_factory(clock=fake)

    @app.task(name="t")
    def t(*args: Any, **kwargs: Any) -> None: ...

    return app


def poll_once(app: rota.App) -> rota.Worker:
    """One housekeeping pass of a worker (rescue, poll state, materialize due ticks), as the
    poll loop does it, without claiming or running anything."""
    worker = app.worker(install_signal_handlers=False)
    try:
        asyncio.run(worker._housekeeping())
    finally:
        worker._threads.close()
        worker._db_pool.close()
    return worker


def runs_of(app: rota.App, name: str) -> list[rota.Run]:
    """A schedule's runs, oldest tick first."""
    return sorted(app.list_runs(schedule=name, limit=10_000), key=lambda r: (r.scheduled_for, int(r.id)))


def by_status(runs: list[rota.Run], status: str) -> list[rota.Run]:
    return [r for r in runs if r.status == status]


def ticks(runs: list[rota.Run]) -> list[datetime]:
    return [r.scheduled_for for r in runs]


def finish(app: rota.App, status: str = "succeeded") -> list[int]:
    """Claim what is due and finish it, as a worker would (no handler runs)."""
    claimed = app.store.claim("test-worker", 100, None, 30)
    app.store.finish([Outcome(c.id, c.token, status, result="null") for c in claimed])
    return [c.id for c in claimed]


# -- bad input ---------------------------------------------------------------------------

BAD_SCHEDULES = [
    ({"cron": "61 * * * *"}, r"invalid cron expression '61 \* \* \* \*'.*minute"),
    ({"cron": "every day"}, r"invalid cron expression 'every day'"),
    ({"cron": "@fortnightly"}, r"unknown cron alias '@fortnightly'"),
    ({"cron": "0 3 * * *", "tz": "Europe/Berln"}, r"unknown time zone 'Europe/Berln'.*Berlin"),
    ({"every": 60, "tz": "Mars/Olympus"}, r"unknown time zone 'Mars/Olympus'"),
    ({"every": 60, "overlap": "sometimes"}, r"unknown overlap policy 'sometimes'.*'queue'"),
    ({"every": 60, "misfire": "later"}, r"unknown misfire policy 'later'.*'coalesce'"),
    ({"every": 0}, r"every=0 seconds is not positive"),
    ({"every": -5}, r"every=-5 seconds is not positive"),
    ({"every": timedelta(0)}, r"every=0 seconds is not positive"),
    ({"every": "5m"}, r"every must be a timedelta or a number of seconds, got '5m'"),
    ({"cron": "0 3 * * *", "every": 60}, r"exactly one of cron= .* or every="),
    ({}, r"exactly one of cron="),
    ({"every": 60, "misfire_grace": -1}, r"misfire_grace must be >= 0, got -1"),
    ({"every": 60, "args": [datetime(2030, 1, 1)]}, r"datetime"),
]


@pytest.mark.parametrize(("options", "message"), BAD_SCHEDULES)
def test_bad_schedule_fails_at_decoration_naming_the_value_and_registers_nothing(
    app: rota.App, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(rota.ConfigurationError, match=message):

        @app.schedule(name="bad", **options)
        def job() -> None: ...

    # Nothing half-registered: fixing the decorator and trying again works.
    assert app.tasks == {} and app.schedules == {}

    @app.schedule(name="bad", every=60)
    def job2() -> None: ...

    assert list(app.schedules) == ["bad"]


@pytest.mark.parametrize(("options", "message"), BAD_SCHEDULES)
def test_bad_add_schedule_fails_naming_the_value_and_writes_nothing(
    app: rota.App, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(rota.ConfigurationError, match=message):
        app.add_schedule("bad", "some.task", **options)
    assert app.list_schedules(include_inactive=True) == []


def test_bad_updates_are_refused_and_change_nothing(fapp: rota.App) -> None:
    before = fapp.add_schedule("s", "t", every=60)
    with pytest.raises(rota.ConfigurationError, match="invalid cron expression '0 25 \\* \\* \\*'"):
        fapp.update_schedule("s", cron="0 25 * * *")
    with pytest.raises(rota.ConfigurationError, match="unknown overlap policy 'never'"):
        fapp.update_schedule("s", overlap="never")
    with pytest.raises(rota.ConfigurationError, match="cannot update \\['colour'\\]"):
        fapp.update_schedule("s", colour="red")
    with pytest.raises(rota.ScheduleNotFound, match="no active schedule named 'nope'"):
        fapp.update_schedule("nope", every=5)
    with pytest.raises(rota.ConfigurationError, match="a schedule named 's' already exists"):
        fapp.add_schedule("s", "t", every=30)
    assert fapp.get_schedule("s") == before


# -- code schedules, synced at worker start ------------------------------------------------


def test_code_schedules_are_upserted_at_start_and_a_changed_definition_recomputes_next_run(
    app_factory: Callable[..., rota.App], fake: rota.FakeClock
) -> None:
    v1 = app_factory(clock=fake)

    @v1.schedule(cron="0 3 * * *", name="nightly")
    def nightly() -> None: ...

    v1.prepare()
    (info,) = v1.list_schedules()
    assert (info.name, info.task, info.cron, info.every, info.tz, info.source, info.active) == (
        "nightly",
        nightly.name,
        "0 3 * * *",
        None,
        "UTC",
        "code",
        True,
    )
    assert info.next_run_at == datetime(2030, 1, 1, 3, tzinfo=UTC)
    assert (info.overlap, info.misfire, info.misfire_grace) == (
        "skip",
        "coalesce",
        timedelta(seconds=60),
    )

    # A restart with the same definition keeps next_run_at, even when it is overdue (the
    # misfire policy decides about it at the next poll).
    fake.set(datetime(2030, 1, 1, 5, tzinfo=UTC))
    v1.prepare()
    assert v1.get_schedule("nightly").next_run_at == datetime(2030, 1, 1, 3, tzinfo=UTC)

    # A deploy that changes the timing keeps the missed 03:00 tick due (the misfire policy
    # decides about it; issue 10); with nothing missed, it recomputes from now.
    v2 = app_factory(clock=fake)

    @v2.schedule(cron="30 4 * * *", tz="Europe/Berlin", name="nightly")
    def nightly_v2() -> None: ...

    v2.prepare()
    info = v2.get_schedule("nightly")
    assert (info.cron, info.tz) == ("30 4 * * *", "Europe/Berlin")
    assert info.next_run_at == datetime(2030, 1, 1, 3, tzinfo=UTC)
    v2.store.set_paused("nightly", False, datetime(2030, 1, 1, 6, tzinfo=UTC))  # as if run
    v3 = app_factory(clock=fake)

    @v3.schedule(cron="45 4 * * *", tz="Europe/Berlin", name="nightly")
    def nightly_v3() -> None: ...

    v3.prepare()
    assert v3.get_schedule("nightly").next_run_at == datetime(2030, 1, 2, 3, 45, tzinfo=UTC)  # 04:45 CET


def test_a_schedule_removed_from_code_becomes_inactive_and_keeps_its_history(
    app_factory: Callable[..., rota.App], fake: rota.FakeClock
) -> None:
    v1 = app_factory(clock=fake)

    @v1.task(name="job")
    def job() -> None: ...

    v1.schedule(every=60, name="kept")(job)
    v1.schedule(every=60, name="dropped")(job)
    v1.prepare()
    fake.set(minute(1))
    poll_once(v1)
    assert len(runs_of(v1, "dropped")) == 1
    finish(v1)

    v2 = app_factory(clock=fake)
    v2.task(name="job")(lambda: None)
    v2.schedule(every=60, name="kept")(v2.tasks["job"])
    v2.prepare()
    assert [s.name for s in v2.list_schedules()] == ["kept"]
    dropped = v2.get_schedule("dropped")
    assert not dropped.active and dropped.run_count == 1 and dropped.success_count == 1
    assert [r.status for r in runs_of(v2, "dropped")] == ["succeeded"]  # history kept
    fake.set(minute(5))
    poll_once(v2)
    assert len(runs_of(v2, "dropped")) == 1  # inactive: no new ticks
    assert runs_of(v2, "kept")[-1].scheduled_for == minute(5)

    with pytest.raises(rota.ScheduleNotFound):
        v2.trigger("dropped")
    v1.prepare()  # the old code comes back: active again, from now
    again = v1.get_schedule("dropped")
    assert again.active and again.next_run_at == minute(6)


def test_an_api_schedule_is_not_deactivated_by_code_sync_and_code_ones_refuse_update(
    app_factory: Callable[..., rota.App], fake: rota.FakeClock
) -> None:
    app = app_factory(clock=fake)

    @app.schedule(every=60, name="in_code")
    def in_code() -> None: ...

    app.add_schedule("from_api", in_code, every=60)
    app.prepare()
    assert [(s.name, s.source) for s in app.list_schedules()] == [
        ("from_api", "api"),
        ("in_code", "code"),
    ]
    with pytest.raises(rota.ConfigurationError, match="declared in code"):
        app.update_schedule("in_code", every=30)


# -- misfire after downtime ----------------------------------------------------------------


@pytest.mark.parametrize("grace", [0, 60])
def test_misfire_coalesce_runs_once_for_all_missed_ticks(fapp: rota.App, fake: rota.FakeClock, grace: int) -> None:
    fapp.add_schedule("s", "t", every=60, misfire="coalesce", misfire_grace=grace)
    fake.set(minute(10, 30))  # ticks 00:01 .. 00:10 came while no worker ran
    poll_once(fapp)
    runs = runs_of(fapp, "s")
    (pending,) = by_status(runs, "pending")
    assert pending.scheduled_for == minute(10)  # the newest
    skipped = by_status(runs, "skipped")
    assert ticks(skipped) == [minute(m) for m in range(1, 10)]
    assert all(r.error is not None and "coalesce" in r.error["message"] for r in skipped)
    info = fapp.get_schedule("s")
    assert info.next_run_at == minute(11) and info.skip_count == 9
    poll_once(fapp)  # nothing more until the next tick
    assert len(runs_of(fapp, "s")) == 10


def test_misfire_coalesce_executes_the_handler_once(fapp: rota.App, fake: rota.FakeClock) -> None:
    calls: list[str] = []

    @fapp.task(name="count", pass_context=True)
    def count(ctx: rota.RunContext) -> None:
        calls.append(ctx.scheduled_for.isoformat())

    fapp.add_schedule("s", count, every=60, misfire_grace=0)
    fake.set(minute(10, 30))
    worker = start_worker(fapp)
    wait_for(lambda: fapp.get_schedule("s").run_count == 1, what="the coalesced run")
    polls = worker.counters.polls
    wait_for(lambda: worker.counters.polls >= polls + 3, what="a few more polls")
    assert calls == [minute(10).isoformat()]
    assert len(runs_of(fapp, "s")) == 10


def test_misfire_skip_records_every_missed_tick_as_skipped(fapp: rota.App, fake: rota.FakeClock) -> None:
    fapp.add_schedule("s", "t", every=60, misfire="skip", misfire_grace=0)
    fake.set(minute(10, 30))
    poll_once(fapp)
    runs = runs_of(fapp, "s")
    assert [r.status for r in runs] == ["skipped"] * 10
    assert ticks(runs) == [minute(m) for m in range(1, 11)]
    assert all(r.error is not None and "misfire=skip" in r.error["message"] for r in runs)
    info = fapp.get_schedule("s")
    assert (info.skip_count, info.run_count, info.next_run_at) == (10, 0, minute(11))
    fake.set(minute(11))  # the next tick runs normally
    poll_once(fapp)
    assert [(r.scheduled_for, r.status) for r in runs_of(fapp, "s")][-1] == (minute(11), "pending")


def test_misfire_all_runs_each_missed_tick_oldest_first_one_at_a_time(fapp: rota.App, fake: rota.FakeClock) -> None:
    order: list[datetime] = []
    active = [0, 0]  # now, most ever
    lock = threading.Lock()

    @fapp.task(name="each", pass_context=True)
    def each(ctx: rota.RunContext) -> None:
        with lock:
            active[0] += 1
            active[1] = max(active)
        time.sleep(0.01)
        with lock:
            order.append(ctx.scheduled_for)
            active[0] -= 1

    fapp.add_schedule("s", each, every=60, misfire="all", overlap="queue")
    fake.set(minute(10, 30))
    poll_once(fapp)
    runs = runs_of(fapp, "s")
    assert ticks(runs) == [minute(m) for m in range(1, 11)]
    assert [r.queued for r in runs] == [False] + [True] * 9  # queued behind the first
    start_worker(fapp, concurrency=4)
    wait_for(lambda: fapp.get_schedule("s").run_count == 10, what="all ten runs")
    assert order == [minute(m) for m in range(1, 11)]
    assert active[1] == 1
    info = fapp.get_schedule("s")
    assert (info.run_count, info.success_count, info.skip_count) == (10, 10, 0)


def test_misfire_all_with_concurrent_overlap_makes_every_missed_tick_due_at_once(
    fapp: rota.App, fake: rota.FakeClock
) -> None:
    fapp.add_schedule("s", "t", every=60, misfire="all", overlap="concurrent")
    fake.set(minute(10, 30))
    poll_once(fapp)
    runs = runs_of(fapp, "s")
    assert ticks(runs) == [minute(m) for m in range(1, 11)]
    assert {(r.status, r.queued) for r in runs} == {("pending", False)}


@pytest.mark.parametrize("misfire", ["skip", "coalesce"])
def test_misfire_grace_lets_recent_ticks_run(fapp: rota.App, fake: rota.FakeClock, misfire: str) -> None:
    fapp.add_schedule("s", "t", every=60, misfire=misfire, misfire_grace=150, overlap="concurrent")
    fake.set(minute(10, 30))  # 00:08 is exactly 150 s late: on time
    poll_once(fapp)
    runs = runs_of(fapp, "s")
    assert ticks(by_status(runs, "pending")) == [minute(8), minute(9), minute(10)]
    assert ticks(by_status(runs, "skipped")) == [minute(m) for m in range(1, 8)]


def test_misfire_after_a_long_outage_is_bounded_and_counted_exactly(fapp: rota.App, fake: rota.FakeClock) -> None:
    fapp.add_schedule("s", "t", every=1, misfire="skip", misfire_grace=0)
    now = fake.advance(timedelta(days=1))  # 86,400 ticks; the one at `now` is on time
    poll_once(fapp)
    runs = runs_of(fapp, "s")
    assert len(runs) <= 1001  # only the oldest missed ticks are listed, the rest counted
    assert [(r.scheduled_for, r.status) for r in runs][-1] == (now, "pending")
    info = fapp.get_schedule("s")
    assert info.skip_count == 86_399
    assert info.next_run_at == now + timedelta(seconds=1)


def test_misfire_all_catches_up_past_the_per_pass_limit_without_waiting_a_poll_interval(
    fapp: rota.App, fake: rota.FakeClock
) -> None:
    """A plan stops at 1,000 ticks; the worker carries on at once, not a poll interval later."""
    fapp.add_schedule("s", "t", every=1, misfire="all", overlap="concurrent", queue="elsewhere")
    now = fake.advance(2500)
    start_worker(fapp, poll_interval=30, queues=["default"])  # claims none of them
    wait_for(lambda: fapp.get_schedule("s").next_run_at == now + SECOND, 15, "the catch-up")
    runs = runs_of(fapp, "s")
    assert len(runs) == 2500 and runs[-1].scheduled_for == now


def test_a_fixed_time_job_in_the_skipped_hour_fires_once_at_the_jump_through_a_poll(
    app_factory: Callable[..., rota.App],
) -> None:
    """End to end (timing's own tests cover the arithmetic): 02:30 Europe/Berlin on the
    spring-forward day runs once, at 03:00 CEST, and again at 02:30 CEST the next day."""
    clock = rota.FakeClock(datetime(2030, 3, 30, 12, tzinfo=UTC))
    app = app_factory(clock=clock)
    info = app.add_schedule("berlin", "t", cron="30 2 * * *", tz="Europe/Berlin")
    jump = datetime(2030, 3, 31, 1, tzinfo=UTC)  # 03:00 CEST
    assert info.next_run_at == jump
    clock.set(jump)
    poll_once(app)
    finish(app)
    clock.set(datetime(2030, 4, 1, 0, 30, tzinfo=UTC))  # 02:30 CEST
    poll_once(app)
    runs = runs_of(app, "berlin")
    assert [(r.scheduled_for, r.status) for r in runs] == [
        (jump, "succeeded"),
        (datetime(2030, 4, 1, 0, 30, tzinfo=UTC), "pending"),
    ]


def test_run_immediately_fires_on_the_first_poll_and_only_once(
    app_factory: Callable[..., rota.App], fake: rota.FakeClock
) -> None:
    app = app_factory(clock=fake)

    @app.schedule(every=3600, run_immediately=True, name="warm")
    def warm() -> None: ...

    @app.schedule(every=3600, name="cold")
    def cold() -> None: ...

    app.add_schedule("api_warm", warm, every=3600, run_immediately=True)
    app.prepare()
    assert app.get_schedule("warm").next_run_at == START
    poll_once(app)
    assert [(r.scheduled_for, r.status) for r in runs_of(app, "warm")] == [(START, "pending")]
    assert [(r.scheduled_for, r.status) for r in runs_of(app, "api_warm")] == [(START, "pending")]
    assert runs_of(app, "cold") == []
    assert app.get_schedule("warm").next_run_at == datetime(2030, 1, 1, 1, tzinfo=UTC)
    finish(app)
    fake.advance(10)
    app.prepare()  # a restart does not fire it again
    poll_once(app)
    assert len(runs_of(app, "warm")) == 1 and len(runs_of(app, "api_warm")) == 1
    assert app.get_schedule("warm").next_run_at == datetime(2030, 1, 1, 1, tzinfo=UTC)


# -- overlap and manual triggers -----------------------------------------------------------


def test_a_tick_that_meets_an_active_run_under_skip_is_recorded_as_skipped(
    fapp: rota.App, fake: rota.FakeClock
) -> None:
    fapp.add_schedule("s", "t", every=60)
    fake.set(minute(1))
    poll_once(fapp)
    fapp.store.claim("busy-worker", 10, None, 3600)  # the 00:01 run is now running
    fake.set(minute(2))
    poll_once(fapp)
    first, second = runs_of(fapp, "s")
    assert (first.status, second.status) == ("running", "skipped")
    assert second.error is not None and second.error["type"] == "Overlap"
    assert f"run {first.id} was still running (overlap=skip)" in second.error["message"]
    assert fapp.get_schedule("s").skip_count == 1


def test_trigger_under_skip_is_refused_clearly_while_a_run_is_active(fapp: rota.App) -> None:
    fapp.add_schedule("s", "t", every=3600)
    first = fapp.trigger("s")
    assert first.refresh().status == "pending"
    with pytest.raises(rota.TriggerRefused) as refused:
        fapp.trigger("s")
    message = str(refused.value)
    assert f"schedule 's' has run {first.id} pending" in message
    assert "overlap policy 'skip'" in message and "overlap='queue'" in message
    assert [r.id for r in runs_of(fapp, "s")] == [first.id]  # nothing recorded
    finish(fapp)
    assert fapp.trigger("s").refresh().status == "pending"  # free again


def test_trigger_under_queue_waits_behind_the_active_run(fapp: rota.App) -> None:
    fapp.add_schedule("s", "t", every=3600, overlap="queue")
    first = fapp.trigger("s")
    second = fapp.trigger("s")
    third = fapp.trigger("s")
    assert [h.refresh().queued for h in (first, second, third)] == [False, True, True]
    assert finish(fapp) == [int(first.id)]  # held runs are not claimable
    assert finish(fapp) == [int(second.id)]  # the slot passed to the oldest held run
    assert finish(fapp) == [int(third.id)]
    assert fapp.get_schedule("s").success_count == 3


def test_a_run_that_ends_while_a_trigger_queues_behind_it_hands_over_its_slot(
    fapp: rota.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race: a manual trigger inserts its held run; before it commits, the active run
    ends in another transaction, whose hand-over cannot see the uncommitted held run. The
    held run must still get the slot (not wait, stranded, for some later tick)."""
    fapp.add_schedule("q", "t", every=3600, overlap="queue")
    first = fapp.trigger("q")
    (claim,) = fapp.store.claim("w", 10, None, 60)
    store: Any = fapp.store
    original = store._overlap
    finishing: list[threading.Thread] = []

    def overlap_then_the_active_run_ends(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        done = Outcome(claim.id, claim.token, "succeeded", result="null")
        thread = threading.Thread(target=store.finish, args=([done],))
        thread.start()
        thread.join(0.2 if store.dialect == "sqlite" else 5)  # SQLite: waits for our commit
        finishing.append(thread)
        return result

    monkeypatch.setattr(store, "_overlap", overlap_then_the_active_run_ends)
    second = fapp.trigger("q")
    monkeypatch.undo()
    finishing[0].join(30)
    assert first.refresh().status == "succeeded"
    run = second.refresh()
    assert (run.status, run.queued) == ("pending", False)
    assert finish(fapp) == [int(second.id)]


def test_trigger_under_replace_cancels_a_pending_run(fapp: rota.App) -> None:
    fapp.add_schedule("s", "t", every=3600, overlap="replace")
    first = fapp.trigger("s")
    second = fapp.trigger("s")
    run = first.refresh()
    assert run.status == "cancelled" and run.error is not None and run.error["type"] == "Replaced"
    assert (second.refresh().status, second.refresh().queued) == ("pending", False)


def test_trigger_under_concurrent_starts_regardless(fapp: rota.App) -> None:
    fapp.add_schedule("s", "t", every=3600, overlap="concurrent")
    handles = [fapp.trigger("s") for _ in range(3)]
    assert {(h.refresh().status, h.refresh().queued) for h in handles} == {("pending", False)}


def test_trigger_unknown_or_removed_schedule(fapp: rota.App) -> None:
    with pytest.raises(rota.ScheduleNotFound, match="'nope'"):
        fapp.trigger("nope")
    fapp.add_schedule("s", "t", every=60)
    fapp.remove_schedule("s")
    with pytest.raises(rota.ScheduleNotFound, match="'s'"):
        fapp.trigger("s")


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_replace_cancels_the_running_run_and_the_new_one_runs_after_it(app: rota.App, kind: str) -> None:
    started: list[str] = []
    ended: list[tuple[str, str]] = []
    lock = threading.Lock()

    if kind == "async":

        @app.task(name="long", pass_context=True)
        async def long_async(ctx: rota.RunContext) -> None:
            with lock:
                started.append(ctx.run_id)
            try:
                await asyncio.sleep(30)
            finally:
                with lock:
                    ended.append((ctx.run_id, "ended"))

    else:

        @app.task(name="long", pass_context=True)
        def long_sync(ctx: rota.RunContext) -> None:
            with lock:
                started.append(ctx.run_id)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not ctx.cancelled:
                time.sleep(0.01)
            with lock:
                ended.append((ctx.run_id, "ended"))
            if ctx.cancelled:
                raise RuntimeError("stopped: replaced")

    app.add_schedule("s", "long", every=3600, overlap="replace")
    start_worker(app, heartbeat_interval=0.2)
    first = app.trigger("s")
    wait_for(lambda: first.id in started, what="the first run to start")
    second = app.trigger("s")  # held until the first has stopped (checked by order below)
    wait_for(lambda: second.id in started, what="the replacing run to start")
    run = first.refresh()
    assert run.status == "cancelled" and run.error is not None
    with lock:
        assert ended[0] == (first.id, "ended")  # the first stopped before the second began
        assert started == [first.id, second.id]
    assert second.refresh().status == "running"
    app.cancel(second.id)
    assert second.wait(10).status == "cancelled"


# -- schedules as data ---------------------------------------------------------------------


def test_add_schedule_fires_with_its_arguments_and_options(fapp: rota.App, fake: rota.FakeClock) -> None:
    info = fapp.add_schedule(
        "report:42",
        "t",
        cron="*/5 * * * *",
        tz="Europe/Paris",
        args=[42],
        kwargs={"fmt": "pdf"},
        queue="reports",
        priority=3,
        retries=2,
        timeout=30,
    )
    assert (info.source, info.active, info.paused, info.next_run_at) == (
        "api",
        True,
        False,
        minute(5),
    )
    assert (info.queue, info.priority, info.max_attempts, info.timeout) == ("reports", 3, 3, 30)
    fake.set(minute(5))
    poll_once(fapp)
    (run,) = runs_of(fapp, "report:42")
    assert (run.task, run.args, run.kwargs, run.scheduled_for) == (
        "t",
        [42],
        {"fmt": "pdf"},
        minute(5),
    )
    assert (run.queue, run.priority, run.max_attempts, run.timeout) == ("reports", 3, 3, 30)
    assert fapp.get_schedule("report:42").next_run_at == minute(10)


def test_update_schedule_recomputes_next_run_and_new_ticks_use_the_new_definition(
    fapp: rota.App, fake: rota.FakeClock
) -> None:
    fapp.add_schedule("u", "t", every=60, args=[1])
    fake.set(minute(1))
    poll_once(fapp)
    info = fapp.update_schedule("u", every=300, args=[2])
    assert (info.every, info.args, info.next_run_at) == (timedelta(seconds=300), [2], minute(5))
    fake.set(minute(4, 59))
    poll_once(fapp)
    fake.set(minute(5))
    poll_once(fapp)
    assert [(r.scheduled_for, r.args) for r in runs_of(fapp, "u")] == [
        (minute(1), [1]),
        (minute(5), [2]),
    ]
    info = fapp.update_schedule("u", cron="0 9 * * MON", tz="Europe/Paris")
    assert (info.cron, info.every, info.tz) == ("0 9 * * MON", None, "Europe/Paris")
    assert info.next_run_at == datetime(2030, 1, 7, 8, tzinfo=UTC)  # Monday 09:00 CET
    # A change that is not about timing keeps the next fire time.
    assert fapp.update_schedule("u", overlap="queue").next_run_at == info.next_run_at


def test_remove_schedule_stops_it_cancels_its_pending_runs_and_keeps_history(
    fapp: rota.App, fake: rota.FakeClock
) -> None:
    fapp.add_schedule("r", "t", every=60, overlap="queue", misfire="all")
    fake.set(minute(1))
    poll_once(fapp)
    finish(fapp)  # 00:01 succeeded
    fake.set(minute(3))
    poll_once(fapp)  # 00:02 pending, 00:03 held behind it
    assert [(r.status, r.queued) for r in runs_of(fapp, "r")] == [
        ("succeeded", False),
        ("pending", False),
        ("pending", True),
    ]
    fapp.remove_schedule("r")
    runs = runs_of(fapp, "r")
    assert [r.status for r in runs] == ["succeeded", "cancelled", "cancelled"]
    assert all(r.error is not None and r.error["type"] == "Removed" for r in runs[1:])
    assert fapp.list_schedules() == []
    removed = fapp.get_schedule("r")
    assert not removed.active and removed.success_count == 1
    assert [s.name for s in fapp.list_schedules(include_inactive=True)] == ["r"]
    fake.set(minute(10))
    poll_once(fapp)
    assert len(runs_of(fapp, "r")) == 3  # no new ticks
    assert finish(fapp) == []
    with pytest.raises(rota.ScheduleNotFound):
        fapp.remove_schedule("r")
    # The name can be used again; the old history stays.
    again = fapp.add_schedule("r", "t", every=60)
    assert again.active and again.next_run_at == minute(11)
    fake.set(minute(11))
    poll_once(fapp)
    assert len(runs_of(fapp, "r")) == 4


def test_pause_and_resume_do_not_catch_up_paused_ticks(fapp: rota.App, fake: rota.FakeClock) -> None:
    fapp.add_schedule("p", "t", every=60, misfire="all", overlap="concurrent")
    assert fapp.pause("p").paused
    fake.set(minute(5, 30))
    poll_once(fapp)
    assert runs_of(fapp, "p") == []
    info = fapp.resume("p")
    assert not info.paused and info.next_run_at == minute(6)
    poll_once(fapp)
    assert runs_of(fapp, "p") == []
    fake.set(minute(6))
    poll_once(fapp)
    assert ticks(runs_of(fapp, "p")) == [minute(6)]
    with pytest.raises(rota.ScheduleNotFound):
        fapp.pause("nope")


def test_counters_next_and_last_run_in_list_schedules(fapp: rota.App, fake: rota.FakeClock) -> None:
    @fapp.task(name="maybe")
    def maybe(fail: bool) -> None:
        if fail:
            raise ValueError("boom")

    fapp.add_schedule("good", maybe, every=60, args=[False])
    fapp.add_schedule("bad", maybe, every=60, args=[True], misfire="skip", misfire_grace=0)
    start_worker(fapp)
    fake.set(minute(1))

    def counts(name: str) -> tuple[int, int, int, int]:
        s = fapp.get_schedule(name)
        return s.run_count, s.success_count, s.failure_count, s.skip_count

    wait_for(lambda: counts("good") == (1, 1, 0, 0) and counts("bad") == (1, 0, 1, 0))
    good, bad = fapp.get_schedule("good"), fapp.get_schedule("bad")
    assert (good.last_status, good.last_run_at, good.next_run_at) == (
        "succeeded",
        minute(1),
        minute(2),
    )
    assert (bad.last_status, bad.last_run_at, bad.next_run_at) == ("failed", minute(1), minute(2))

    fake.set(minute(5, 30))  # downtime-like jump: good coalesces, bad skips
    wait_for(lambda: counts("good") == (2, 2, 0, 3) and counts("bad") == (1, 0, 1, 4))
    fapp.trigger("bad")
    wait_for(lambda: counts("bad") == (2, 0, 2, 4))
    infos = {s.name: s for s in fapp.list_schedules()}
    assert infos["good"].last_run_at == minute(5, 30) and infos["good"].next_run_at == minute(6)
    assert infos["bad"].last_status == "failed" and infos["bad"].next_run_at == minute(6)
    for name, info in infos.items():  # the counters agree with the history
        runs = runs_of(fapp, name)
        assert info.success_count == len(by_status(runs, "succeeded"))
        assert info.failure_count == len(by_status(runs, "failed"))
        assert info.skip_count == len(by_status(runs, "skipped"))
        assert info.run_count == len([r for r in runs if r.started_at is not None])


# -- many schedules, none due --------------------------------------------------------------


def _bulk_insert_schedules(app: rota.App, n: int) -> None:
    """n API schedules due in a year, inserted in one statement batch."""
    store: Any = app.store
    template = app.store.get_schedule_def("template")
    assert template is not None
    far = START + timedelta(days=365)
    rows = [
        {
            **store._schedule_params(template, far),
            "name": f"customer-{i}",
            "now": store._ts(START) if store.dialect == "sqlite" else START,
        }
        for i in range(n)
    ]
    with store._tx() as s:
        if store.dialect == "sqlite":
            s.conn.executemany(store.queries["insert_schedule"], rows)
        else:
            s.cur.executemany(store.queries["insert_schedule"], rows)
            s.cur.execute("ANALYZE rota_schedules")


# (its bulk insert runs the schedule insert with executemany: one statement, not MySQL's two steps)
@pytest.mark.parametrize("db_url", STORES, indirect=True)
def test_twenty_thousand_idle_schedules_cost_nothing(fapp: rota.App, fake: rota.FakeClock) -> None:
    fapp.add_schedule("template", "t", every=60)
    _bulk_insert_schedules(fapp, 20_000)
    store: Any = fapp.store
    assert len(fapp.list_schedules()) == 20_001

    # The due query and the poll's "next schedule due" read the index, never scan the table.
    with store._read() as s:
        if store.dialect == "sqlite":
            due = s.q_text("EXPLAIN QUERY PLAN " + store.queries["due_schedules"], limit=100)
            poll = s.q_text("EXPLAIN QUERY PLAN " + store.queries["poll_state"], queues=None)
            plans = [" | ".join(str(r[-1]) for r in p) for p in (due, poll)]
            for plan in plans:
                assert "rota_schedules_due" in plan, plan
                assert "SCAN rota_schedules " not in plan + " ", plan
        else:
            for query, params in (("due_schedules", {"limit": 100}), ("poll_state", {})):
                plan = "\n".join(r[0] for r in s.q_text("EXPLAIN " + store.queries[query], queues=None, **params))
                assert "rota_schedules_due" in plan, plan
                assert "Seq Scan on rota_schedules" not in plan, plan

    # One housekeeping pass touches only the due schedule.
    fake.set(minute(1))
    worker = poll_once(fapp)
    assert worker.counters.ticks == 1 and worker.counters.locked_out == 0
    assert len(fapp.list_runs(limit=100)) == 1 and runs_of(fapp, "template") != []
    assert fapp.store.due_schedules(100) == []


# -- warnings ------------------------------------------------------------------------------


def test_a_schedule_more_frequent_than_the_poll_interval_warns_once_at_start(
    app_factory: Callable[..., rota.App], fake: rota.FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    app = app_factory(clock=fake)

    @app.schedule(every=1, name="hummingbird")  # the shortest interval allowed
    def hummingbird() -> None: ...

    @app.schedule(every=5, name="fine")
    def fine() -> None: ...

    caplog.set_level(logging.WARNING, logger="rota")
    worker = start_worker(app, poll_interval=1.5)
    wait_for(lambda: worker.counters.polls >= 2, what="a few polls")
    warnings = [r for r in caplog.records if "more often than this worker polls" in r.message]
    assert len(warnings) == 1
    assert "'hummingbird' fires every 1 s" in warnings[0].message
    assert "poll_interval" in warnings[0].message


def test_a_schedule_this_worker_cannot_plan_is_logged_once_and_does_not_spin_the_loop(
    app: rota.App, caplog: pytest.LogCaptureFixture
) -> None:
    """A stored schedule this host cannot plan (here a zone its tzdata lacks) stays due; the
    worker must say so once and keep polling at its interval, not re-poll in a busy loop."""
    app.add_schedule("elsewhere", "t", every=60)
    store: Any = app.store
    with store._tx() as s:
        s.q_text(
            "UPDATE rota_schedules SET tz = 'Mars/Olympus', next_run_at = "
            + {"sqlite": "next_run_at - 3600", "mysql": "UTC_TIMESTAMP(6) - INTERVAL 1 HOUR"}.get(
                store.dialect, "now() - interval '1 hour'"
            )
        )
    app.add_schedule("fine", "t", every=3600, run_immediately=True)
    caplog.set_level(logging.ERROR, logger="rota")
    began = time.monotonic()
    worker = start_worker(app, poll_interval=0.1)
    wait_for(lambda: runs_of(app, "fine") != [], what="the plannable schedule to fire")
    time.sleep(0.5)
    polls, elapsed = worker.counters.polls, time.monotonic() - began
    assert polls <= elapsed / 0.1 + 3, f"{polls} housekeeping passes in {elapsed:.2f} s"
    errors = [r.message for r in caplog.records if "cannot be planned" in r.message]
    assert len(errors) == 1 and "'elsewhere'" in errors[0] and "Mars/Olympus" in errors[0]


# -- the CLI -------------------------------------------------------------------------------

SCHEDULE_FIELDS = {
    "name",
    "task",
    "cron",
    "every",
    "tz",
    "overlap",
    "paused",
    "next_run_at",
    "last_run_at",
    "last_status",
    "run_count",
    "success_count",
    "failure_count",
    "skip_count",
}


def test_cli_schedules_json_trigger_pause_resume(fapp: rota.App, fake: rota.FakeClock) -> None:
    url = fapp.database_url
    fapp.add_schedule("nightly", "t", cron="0 3 * * *", tz="Europe/Berlin")
    fapp.add_schedule("often", "t", every=90, overlap="queue")
    fake.set(minute(3))
    poll_once(fapp)
    finish(fapp)
    runner = CliRunner()

    result = runner.invoke(cli, ["--database-url", url, "schedules", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [s["name"] for s in data] == ["nightly", "often"]
    assert all(set(s) >= SCHEDULE_FIELDS for s in data)
    nightly, often = data
    assert (nightly["cron"], nightly["every"], nightly["tz"], nightly["overlap"]) == (
        "0 3 * * *",
        None,
        "Europe/Berlin",
        "skip",
    )
    assert nightly["next_run_at"] == "2030-01-01T02:00:00Z" and nightly["last_run_at"] is None
    assert (often["cron"], often["every"], often["paused"]) == (None, 90.0, False)
    assert often["last_status"] == "succeeded" and often["run_count"] == 1
    assert often["success_count"] == 1 and often["failure_count"] == 0
    assert often["last_run_at"] == "2030-01-01T00:03:00Z"
    assert often["next_run_at"] == "2030-01-01T00:04:30Z"

    table = runner.invoke(cli, ["--database-url", url, "schedules"])
    assert table.exit_code == 0, table.output  # (rich folds it to the runner's 80 columns)

    assert runner.invoke(cli, ["--database-url", url, "pause", "often"]).exit_code == 0
    assert fapp.get_schedule("often").paused
    resumed = runner.invoke(cli, ["--database-url", url, "resume", "often"])
    assert resumed.exit_code == 0 and "resumed often" in resumed.output

    first = runner.invoke(cli, ["--database-url", url, "trigger", "nightly"])
    assert first.exit_code == 0 and "pending" in first.output
    refused = runner.invoke(cli, ["--database-url", url, "trigger", "nightly"])
    assert refused.exit_code == 1 and "overlap policy 'skip'" in refused.output
    queued = runner.invoke(cli, ["--database-url", url, "trigger", "often", "--json"])
    assert queued.exit_code == 0 and json.loads(queued.output)["schedule"] == "often"
    again = runner.invoke(cli, ["--database-url", url, "trigger", "often"])
    assert again.exit_code == 0 and "waiting behind the active run" in again.output
    missing = runner.invoke(cli, ["--database-url", url, "trigger", "nope"])
    assert missing.exit_code == 1 and "no schedule named 'nope'" in missing.output.replace("active ", "")


def test_cli_explain_shows_local_and_utc_times_with_dst_notes() -> None:
    runner = CliRunner()
    args = ["explain", "30 2 * * *", "--tz", "Europe/Berlin", "--after", "2030-03-30T12:00"]
    result = runner.invoke(cli, [*args, "--count", "2"])
    assert result.exit_code == 0, result.output
    assert "cron '30 2 * * *' in Europe/Berlin" in result.output
    assert "2030-03-31T01:00:00Z" in result.output  # 03:00 CEST: the jump
    assert "02:30 does not exist on 2030-03-31" in result.output
    assert "2030-04-01T00:30:00Z" in result.output

    data = json.loads(runner.invoke(cli, [*args, "--count", "3", "--json"]).output)
    assert [d["utc"] for d in data] == [
        "2030-03-31T01:00:00Z",
        "2030-04-01T00:30:00Z",
        "2030-04-02T00:30:00Z",
    ]
    assert data[0]["local"] == "2030-03-31T03:00:00+02:00" and "does not exist" in data[0]["note"]
    assert data[1]["note"] is None

    bad = runner.invoke(cli, ["explain", "0 3 * *", "--tz", "UTC"])
    assert bad.exit_code == 1 and "invalid cron expression '0 3 * *'" in bad.output
    zone = runner.invoke(cli, ["explain", "0 3 * * *", "--tz", "Europe/Berln"])
    assert zone.exit_code == 1 and "unknown time zone 'Europe/Berln'" in zone.output


# -- follow-ups ----------------------------------------------------------------------------


def test_removing_a_schedule_from_code_cancels_its_pending_runs(
    app_factory: Callable[..., rota.App], fake: rota.FakeClock
) -> None:
    v1 = app_factory(clock=fake)
    v1.schedule(every=60, name="dropped", overlap="queue")(v1.task(name="job")(lambda: None))
    v1.prepare()
    fake.set(minute(1))
    poll_once(v1)
    (pending,) = runs_of(v1, "dropped")
    assert pending.status == "pending"
    v2 = app_factory(clock=fake)
    v2.task(name="job")(lambda: None)
    v2.prepare()  # the schedule is gone from code
    run = v2.get_run(pending.id)
    assert run.status == "cancelled" and run.error is not None and run.error["type"] == "Removed"


def test_resume_of_a_schedule_that_is_not_paused_changes_nothing(fapp: rota.App, fake: rota.FakeClock) -> None:
    fapp.add_schedule("s", "t", every=60)
    before = fapp.get_schedule("s").next_run_at
    fake.advance(timedelta(minutes=5))  # overdue now
    assert fapp.resume("s").next_run_at == before


def test_the_too_frequent_warning_covers_stored_schedules(fapp: rota.App, caplog: pytest.LogCaptureFixture) -> None:
    fapp.add_schedule("fast", "t", every=1.5)
    with caplog.at_level(logging.WARNING, logger="rota.worker"):
        worker = start_worker(fapp, poll_interval=2.0)
        wait_for(lambda: worker.state == "running", what="the worker to start")
    assert sum("schedule 'fast' fires every 1.5 s" in r.getMessage() for r in caplog.records) == 1


def test_a_sync_handler_stops_on_cancellation_by_raising_and_a_normal_return_is_success(app: rota.App) -> None:
    @app.task(name="polite", pass_context=True)
    def polite(ctx: rota.RunContext, finish_anyway: bool) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not ctx.cancelled:
            time.sleep(0.01)
        if not finish_anyway:
            ctx.raise_if_cancelled()
        return "all work done"

    start_worker(app, heartbeat_interval=0.2, concurrency=2)
    stopped, finished = polite.enqueue(False), polite.enqueue(True)
    for handle in (stopped, finished):
        wait_for(lambda h=handle: h.refresh().status == "running", what="the runs to start")  # type: ignore[misc]
        app.cancel(handle.id)
    run = stopped.wait(10)
    assert run.status == "cancelled" and run.error is not None and run.error["type"] == "Cancelled"
    run = finished.wait(10)
    assert (run.status, run.result) == ("succeeded", "all work done")
