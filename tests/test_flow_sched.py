"""Issue 20 on both stores: backfill of a schedule's past ticks, jittered ticks, and
retry_many. A FakeClock drives the store's "now"; a worker's housekeeping pass
(poll_once) makes the ticks; `finish` plays a worker claiming and finishing what is due.
Real worker processes are in test_flow_sched_processes.py, the arithmetic in test_flow_timing.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import rota
from rota import timing
from rota.stores.base import NewRun, Outcome

from .conftest import STORES, WITH_MYSQL, store_url
from .test_schedules import finish, minute, poll_once, runs_of


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


START = datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC)
ERROR = '{"type": "Boom", "message": "no"}'


@pytest.fixture
def fake() -> rota.FakeClock:
    return rota.FakeClock(START)


@pytest.fixture
def fapp(app_factory: Callable[..., rota.App], fake: rota.FakeClock) -> rota.App:
    app = app_factory(clock=fake)

    @app.task(name="t")
    def t(*args: Any, **kwargs: Any) -> None: ...

    return app


def outage(fapp: rota.App, fake: rota.FakeClock, **schedule: Any) -> None:
    """Schedule `s` every minute from 00:00:30; the workers are down until 00:10:30, so the
    coalesce policy runs 00:10 and skips 00:01 to 00:09."""
    fapp.add_schedule("s", "t", every=60, **schedule)
    fake.set(minute(10, 30))
    poll_once(fapp)
    runs = runs_of(fapp, "s")
    assert [r.status for r in runs] == ["skipped"] * 9 + ["pending"]


# -- backfill ------------------------------------------------------------------------------


def test_backfill_runs_the_skipped_ticks_one_at_a_time_oldest_first_after_the_active_run(
    fapp: rota.App, fake: rota.FakeClock
) -> None:
    outage(fapp, fake)
    refs = fapp.backfill("s", start=minute(0), end=minute(10))
    runs = [r.refresh() for r in refs]
    assert [r.scheduled_for for r in runs] == [minute(m) for m in range(10)]
    assert all(r.backfill and r.queued and r.status == "pending" for r in runs)  # behind the 00:10 run
    assert runs[0].to_json()["backfill"] is True
    order = []
    while claimed := finish(fapp):
        assert len(claimed) == 1  # one at a time
        order.append(fapp.get_run(claimed[0]).scheduled_for)
    assert order == [minute(10)] + [minute(m) for m in range(10)]
    history = runs_of(fapp, "s")
    assert len([r for r in history if r.status == "skipped"]) == 9  # the skipped ticks stay in history
    assert not fapp.get_run(history[-1].id).backfill  # the schedule's own run is not marked
    assert fapp.backfill("s", start=minute(0), end=minute(10)) == []  # twice adds nothing


def test_backfill_of_a_concurrent_schedule_or_with_overlap_concurrent_runs_at_once(
    fapp: rota.App, fake: rota.FakeClock
) -> None:
    outage(fapp, fake)
    refs = fapp.backfill("s", start=minute(1), end=minute(4), overlap="concurrent")
    assert len(refs) == 3 and not any(r.refresh().queued for r in refs)
    assert len(finish(fapp)) == 4  # the 00:10 run and the three backfilled ones together
    fapp.add_schedule("c", "t", every=60, overlap="concurrent")
    assert len(fapp.backfill("c", start=minute(0), end=minute(5))) == 5
    assert len(finish(fapp)) == 5


def test_backfill_with_overlap_queue_of_a_concurrent_schedule_runs_one_at_a_time_oldest_first(
    fapp: rota.App,
) -> None:
    """The other direction of the override: a schedule declared `concurrent` whose backfill
    asks for overlap="queue" gets its backfilled ticks one after another, oldest first."""
    fapp.add_schedule("c", "t", every=60, overlap="concurrent")
    refs = fapp.backfill("c", start=minute(0) - timedelta(minutes=4), end=minute(1), overlap="queue")
    ticks = [minute(0) - timedelta(minutes=m) for m in (4, 3, 2, 1, 0)]
    runs = [r.refresh() for r in refs]
    assert [r.scheduled_for for r in runs] == ticks
    assert all(r.backfill and r.status == "pending" for r in runs)
    assert [r.queued for r in runs] == [False, True, True, True, True]  # only the oldest is claimable
    order = []
    while claimed := finish(fapp):
        assert len(claimed) == 1  # one at a time
        order.append(fapp.get_run(claimed[0]).scheduled_for)
    assert order == ticks
    assert {r.status for r in runs_of(fapp, "c")} == {"succeeded"}


def test_backfill_queues_behind_a_running_run_and_leaves_future_ticks_to_the_schedule(
    fapp: rota.App, fake: rota.FakeClock
) -> None:
    fapp.add_schedule("s", "t", every=60, overlap="queue")
    fake.set(minute(1, 0))
    poll_once(fapp)
    running = fapp.store.claim("w", 10, None, 30)
    assert len(running) == 1
    refs = fapp.backfill("s", start=minute(0) - timedelta(minutes=3), end=minute(30))
    # 23:57 .. 00:00 (00:01 has its run; 00:02 on is the schedule's own, not come yet)
    assert [r.refresh().scheduled_for for r in refs] == [minute(0) - timedelta(minutes=m) for m in (3, 2, 1, 0)]
    assert fapp.store.claim("w", 10, None, 30) == []  # held behind the running run
    fapp.store.finish([Outcome(running[0].id, running[0].token, "succeeded", result="null")])
    assert [fapp.get_run(i).scheduled_for for i in finish(fapp)] == [minute(0) - timedelta(minutes=3)]


def test_backfill_refuses_bad_ranges_names_and_overlaps_with_one_line(fapp: rota.App) -> None:
    fapp.add_schedule("nightly", "t", every=1)
    with pytest.raises(rota.ConfigurationError, match=r"end \(.*\) must be after start"):
        fapp.backfill("nightly", start=minute(5), end=minute(5))
    with pytest.raises(rota.ConfigurationError, match="start must be a timezone-aware datetime"):
        fapp.backfill("nightly", start=datetime(2030, 1, 1), end=minute(5))
    with pytest.raises(
        rota.ScheduleNotFound, match="no active schedule named 'nighty' \\(did you mean 'nightly'\\?\\)"
    ):
        fapp.backfill("nighty", start=minute(0), end=minute(5))
    with pytest.raises(
        rota.ConfigurationError,
        match=r"more than 10,000 ticks of every 1s; backfill at most 10,000 at a time \(split the range\)",
    ):
        fapp.backfill("nightly", start=minute(0) - timedelta(hours=3), end=minute(0))
    with pytest.raises(rota.ConfigurationError, match="unknown overlap policy 'later'"):
        fapp.backfill("nightly", start=minute(0), end=minute(1), overlap="later")
    assert fapp.list_runs() == []


# -- jitter --------------------------------------------------------------------------------


def test_a_jittered_tick_keeps_its_tick_and_is_due_its_stable_offset_later(
    fapp: rota.App, fake: rota.FakeClock
) -> None:
    info = fapp.add_schedule("j", "t", every=3600, jitter=timedelta(minutes=10))
    tick = datetime(2030, 1, 1, 1, tzinfo=UTC)
    trigger = timing.make_trigger(every=timedelta(hours=1))
    offset = timing.jitter_offset(trigger, "j", tick, timedelta(minutes=10))
    assert timedelta(0) < offset < timedelta(minutes=10)
    assert info.next_run_at == tick + offset and info.jitter == timedelta(minutes=10)
    assert info.to_json()["jitter"] == 600 and info.to_json()["next_run_at"].startswith("2030-01-01T01:")
    fake.set(tick)
    poll_once(fapp)
    (run,) = runs_of(fapp, "j")
    assert (run.scheduled_for, run.due_at, run.status) == (tick, tick + offset, "pending")
    assert finish(fapp) == []  # not due before tick + offset
    fake.set(tick + offset)
    assert finish(fapp) == [int(run.id)]
    following = tick + timedelta(hours=1)
    assert fapp.get_schedule("j").next_run_at == timing.jittered(trigger, "j", following, timedelta(minutes=10))


def test_jitter_never_makes_a_misfire_lateness_is_judged_from_the_due_time(
    fapp: rota.App, fake: rota.FakeClock
) -> None:
    spread = timedelta(minutes=30)
    fapp.add_schedule("j", "t", every=3600, jitter=spread, misfire="skip", misfire_grace=60)
    tick = datetime(2030, 1, 1, 1, tzinfo=UTC)
    offset = timing.jitter_offset(timing.make_trigger(every=timedelta(hours=1)), "j", tick, spread)
    assert offset > timedelta(seconds=61)  # (stable: the hash of 'j' and this tick)
    fake.set(tick + offset + timedelta(seconds=59))  # > grace after the tick, < grace after due
    poll_once(fapp)
    assert [r.status for r in runs_of(fapp, "j")] == ["pending"]


def test_jitter_is_set_changed_and_removed_by_add_update_and_code(
    fapp: rota.App, app_factory: Callable[..., rota.App], fake: rota.FakeClock
) -> None:
    fapp.add_schedule("j", "t", every=60, jitter=5)
    assert fapp.update_schedule("j", jitter=timedelta(seconds=20)).jitter == timedelta(seconds=20)
    plain = fapp.update_schedule("j", jitter=None)
    assert plain.jitter is None and plain.next_run_at == minute(1)
    coded = app_factory(clock=fake)

    @coded.schedule(cron="0 * * * *", jitter=timedelta(seconds=30), name="hourly")
    def hourly() -> None: ...

    coded.prepare()  # what a worker does at start: sync the code schedules
    assert coded.get_schedule("hourly").jitter == timedelta(seconds=30)

    # A deploy that changes only the jitter stores the new one (PostgreSQL's upsert once
    # left the old jitter in place), and one that removes it clears it.
    for spread in (timedelta(seconds=45), None):
        redeployed = app_factory(clock=fake)

        @redeployed.schedule(cron="0 * * * *", jitter=spread, name="hourly")
        def hourly_again() -> None: ...

        redeployed.prepare()
        assert redeployed.get_schedule("hourly").jitter == spread


def test_a_removed_schedule_added_again_takes_the_new_jitter(fapp: rota.App) -> None:
    fapp.add_schedule("j", "t", every=60, jitter=5)
    fapp.remove_schedule("j")
    assert fapp.add_schedule("j", "t", every=60, jitter=20).jitter == timedelta(seconds=20)
    assert fapp.get_schedule("j").jitter == timedelta(seconds=20)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"every": 60, "jitter": -1}, r"jitter must be >= 0 .* got -1"),
        ({"every": 60, "jitter": 60}, r"jitter 1m must be shorter than the schedule's interval \(every=1m\)"),
        ({"every": 60, "jitter": "5s"}, r"jitter must be a timedelta or seconds, got '5s'"),
    ],
)
def test_bad_jitter_is_refused_with_one_line(fapp: rota.App, options: dict[str, Any], message: str) -> None:
    with pytest.raises(rota.ConfigurationError, match=message):
        fapp.add_schedule("bad", "t", **options)
    assert fapp.list_schedules(include_inactive=True) == []


# -- retry_many ----------------------------------------------------------------------------


def ended(app: rota.App, task: str, status: str, n: int, key: str | None = None) -> list[int]:
    """`n` runs of `task` that ended with `status` (claimed and finished as a worker would)."""
    app.store.insert_runs([NewRun(task=task, key=key) for _ in range(n)])
    claimed = app.store.claim("w", n, None, 30)
    app.store.finish([Outcome(c.id, c.token, status, error=ERROR, history="{}") for c in claimed])
    return [c.id for c in claimed]


def test_retry_many_retries_each_matching_final_run_once_in_batches(
    fapp: rota.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("rota.flow_ops.RETRY_BATCH", 3)
    failed = ended(fapp, "x", "failed", 7)
    ended(fapp, "y", "failed", 2)
    ended(fapp, "x", "succeeded", 2)
    assert fapp.retry_many(status="failed", task="x") == 7
    retries = [r for r in fapp.list_runs(status="pending") if r.retry_of is not None]
    assert sorted(int(r.retry_of or 0) for r in retries) == failed
    assert all(r.task == "x" and r.attempt == 0 for r in retries)
    assert fapp.retry_many(status="failed", task="x") == 0  # each run is retried once
    assert fapp.retry_many() == 2  # the failed runs of y
    assert fapp.retry_many(status="succeeded") == 2


def test_retry_many_since_counts_from_the_finish_and_the_retries_are_not_retried_again(
    fapp: rota.App, fake: rota.FakeClock
) -> None:
    ended(fapp, "x", "failed", 2)
    fake.advance(timedelta(hours=7))
    recent = ended(fapp, "x", "failed", 1)
    assert fapp.retry_many(since=timedelta(hours=6)) == 1
    (retry,) = [r for r in fapp.list_runs(status="pending")]
    assert retry.retry_of == str(recent[0])
    assert fapp.retry_many() == 2  # the older ones; the pending retry is not final


def test_retry_many_keeps_keys_unique_and_exclusive_schedules_overlap(fapp: rota.App, fake: rota.FakeClock) -> None:
    ended(fapp, "x", "failed", 1, key="k")
    ended(fapp, "x", "failed", 1, key="k")
    assert fapp.retry_many() == 1  # one pending run per key
    fapp.add_schedule("q", "t", every=60, overlap="queue")
    for m in (1, 2):
        fake.set(minute(m))
        poll_once(fapp)
        claimed = fapp.store.claim("w", 10, None, 30)
        fapp.store.finish([Outcome(c.id, c.token, "failed", error=ERROR, history="{}") for c in claimed])
    assert fapp.retry_many(task="t") == 2
    queued = [r for r in runs_of(fapp, "q") if r.status == "pending"]
    assert sorted(r.queued for r in queued) == [False, True]  # one after the other, as App.retry


def test_the_async_twins_backfill_and_retry(fapp: rota.App, fake: rota.FakeClock) -> None:
    import asyncio

    ended(fapp, "x", "failed", 2)
    assert asyncio.run(fapp.retry_many_async(task="x")) == 2
    outage(fapp, fake)
    refs = asyncio.run(fapp.backfill_async("s", start=minute(1), end=minute(3)))
    assert [r.refresh().scheduled_for for r in refs] == [minute(1), minute(2)]


def test_retry_many_refuses_bad_arguments_with_one_line(fapp: rota.App) -> None:
    with pytest.raises(rota.ConfigurationError, match="unknown final status 'pending'"):
        fapp.retry_many(status="pending")
    with pytest.raises(rota.ConfigurationError, match="since must be a positive timedelta"):
        fapp.retry_many(since=timedelta(0))


# -- schema --------------------------------------------------------------------------------


# (an older schema built with SQLite's or PostgreSQL's own migrations; MySQL's start at 21)
@pytest.mark.parametrize("db_url", STORES, indirect=True)
def test_a_populated_version_4_database_migrates_to_the_latest_version_in_place(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rota.stores.postgres import store as pg_module
    from rota.stores.sqlite import store as sqlite_module
    from rota.stores.sqlstore.queries import load_migrations

    from .conftest import make_app
    from .test_hot_path import before_flow_control, migrations_of

    module: Any = pg_module if db_url.startswith("postgresql") else sqlite_module
    dialect = "postgres" if module is pg_module else "sqlite"
    with monkeypatch.context() as patch:
        patch.setattr(migrations_of(module), "load_migrations", lambda _d: load_migrations(dialect)[:4])
        patch.setattr(module, "load_queries", before_flow_control(module.load_queries))
        old = make_app(db_url)
        old.migrate()
        at = "now()" if dialect == "postgres" else "1893456000"
        with old.store._tx() as s:  # type: ignore[attr-defined]  # as a version-4 rota wrote it
            s.q_text(f"INSERT INTO rota_runs (task, scheduled_for, due_at, created_at) VALUES ('t', {at}, {at}, {at})")
        old.close()
    app = make_app(db_url)
    try:
        assert "0009_flow_schedules" in app.migrate()
        (run,) = app.list_runs()
        assert run.backfill is False and run.task == "t"
        app.add_schedule("j", "t", every=60, jitter=5)
        assert app.get_schedule("j").jitter == timedelta(seconds=5)
    finally:
        app.close()


def test_the_web_api_records_say_which_runs_were_backfilled(fapp: rota.App, fake: rota.FakeClock) -> None:
    from starlette.testclient import TestClient

    from rota.web import create_app

    outage(fapp, fake)
    (ref,) = fapp.backfill("s", start=minute(2), end=minute(3))
    with TestClient(create_app(fapp), base_url="http://localhost") as web:
        listed = {r["id"]: r["backfill"] for r in web.get("/api/runs", params={"limit": 100}).json()}
        assert listed[ref.id] is True and list(listed.values()).count(True) == 1
        assert web.get(f"/api/runs/{ref.id}").json()["backfill"] is True
        (schedule,) = web.get("/api/schedules").json()
        assert schedule["jitter"] is None


def test_retry_many_on_a_replace_schedule_queues_its_retries_one_after_another(
    fapp: rota.App, fake: rota.FakeClock
) -> None:
    fapp.add_schedule("r", "t", every=3600, overlap="replace")
    failed = []
    for _ in range(3):
        fapp.trigger("r")
        (c,) = fapp.store.claim("w", 10, None, 30)
        fapp.store.finish([Outcome(c.id, c.token, "failed", error=ERROR, history="{}")])
        failed.append(c.id)
    assert fapp.retry_many(task="t") == 3
    retries = [r for r in runs_of(fapp, "r") if r.retry_of is not None]
    assert [r.status for r in retries] == ["pending"] * 3  # none replaced another
    order = []
    while claimed := finish(fapp):
        assert len(claimed) == 1  # one at a time, oldest first
        order.append(int(fapp.get_run(claimed[0]).retry_of or 0))
    assert order == failed
