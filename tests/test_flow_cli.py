"""`rota backfill`, `rota retry --failed` and `rota explain --jitter`, through click's runner."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import rota
import rota.testing
from rota import timing

from .conftest import WITH_MYSQL, make_app, store_url
from .test_cli import cli


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def test_backfill_makes_the_missing_ticks_once_and_reports_them(db_url: str) -> None:
    app = make_app(db_url)
    try:
        app.add_schedule("nightly", "some.task", every=60)
        now = datetime.now(UTC).replace(microsecond=0)
        start, end = (now - timedelta(minutes=5)).replace(tzinfo=None).isoformat(), now.isoformat()
        code, out = cli(db_url, "backfill", "nightly", "--from", start, "--to", end, "--json")
        assert code == 0, out
        runs = json.loads(out)
        assert len(runs) == 5 and all(r["backfill"] for r in runs)
        assert [r["scheduled_for"] for r in runs] == sorted(r["scheduled_for"] for r in runs)
        assert runs[0]["scheduled_for"] >= (now - timedelta(minutes=5)).isoformat()[:16]  # naive --from: UTC
        code, out = cli(db_url, "backfill", "nightly", "--from", start, "--to", end)
        assert code == 0 and "nothing to do" in out
        early = (now - timedelta(minutes=40)).isoformat()
        code, out = cli(db_url, "backfill", "nightly", "--from", early, "--to", start)
        assert code == 0 and "35 run(s) backfilled" in out and "... and 15 more" in out, out
        assert out.count("queued behind the others") == 20  # the runs of the first backfill hold the slot
        code, out = cli(db_url, "run", runs[0]["id"])
        assert code == 0 and "backfill: True" in out
        code, out = cli(db_url, "run", runs[0]["id"], "--json")
        assert json.loads(out)["backfill"] is True
    finally:
        app.close()


def test_backfill_refuses_bad_input_with_one_line(db_url: str) -> None:
    app = make_app(db_url)
    try:
        app.add_schedule("nightly", "some.task", every=60)
        code, out = cli(db_url, "backfill", "nightly", "--from", "yesterday", "--to", "2030-01-01")
        assert code == 2 and "'yesterday' is not an ISO time" in out
        code, out = cli(db_url, "backfill", "nightly", "--from", "2030-01-02", "--to", "2030-01-01")
        assert code == 1 and out.count("\n") == 1 and "must be after start" in out
        code, out = cli(db_url, "backfill", "nighty", "--from", "2030-01-01", "--to", "2030-01-02")
        assert code == 1 and "did you mean 'nightly'" in out
        code, out = cli(db_url, "backfill", "nightly", "--from", "2000-01-01", "--to", "2030-01-02")
        assert code == 1 and "more than 10,000 ticks" in out
        code, out = cli(db_url, "backfill", "nightly", "--from", "2030-01-01", "--to", "2030-01-02", "--overlap", "x")
        assert code == 2 and "'x' is not one of" in out
        assert app.list_runs() == []
    finally:
        app.close()


def test_retry_failed_retries_them_all_and_retry_id_still_works(db_url: str) -> None:
    app = make_app(db_url)
    try:
        app.task(name="bad")(lambda: 1 / 0)
        app.task(name="other")(lambda: 1 / 0)
        bad = [app.get_task("bad").enqueue() for _ in range(3)]
        other = app.get_task("other").enqueue()
        rota.testing.run_pending(app)
        code, out = cli(db_url, "retry", "--failed", "--task", "bad", "--since", "6h")
        assert code == 0 and "3 failed run(s) of task bad finished in the last 6 h enqueued again" in out
        retried = {r.retry_of for r in app.list_runs(status="pending")}
        assert retried == {b.id for b in bad}
        code, out = cli(db_url, "retry", "--failed", "--json")
        assert code == 0 and json.loads(out)["retried"] == 1  # other's; bad's were retried already
        code, out = cli(db_url, "retry", other.id)
        assert code == 0 and f"(retry of {other.id})" in out
        code, out = cli(db_url, "retry", "--failed", "--since", "soon")
        assert code == 2 and "'soon' is not a duration such as 90s, 15m, 6h or 2d" in out
        code, out = cli(db_url, "retry")
        assert code == 2 and "give a RUN_ID, or --failed" in out
        code, out = cli(db_url, "retry", other.id, "--failed")
        assert code == 2 and "give a RUN_ID, or --failed" in out
    finally:
        app.close()


def test_explain_with_jitter_shows_each_offset_and_how_it_is_hashed(db_url: str) -> None:
    after = "2030-01-01T00:00"
    code, out = cli(db_url, "explain", "0 * * * *", "--after", after, "--count", "2", "--jitter", "30s")
    assert code == 0 and "offsets hashed from '0 * * * * UTC'" in out and "--name" in out
    assert "(jitter 30 s: " in out, out  # humanized, as every other duration (not 0:00:30)
    code, out = cli(
        db_url, "explain", "0 * * * *", "--after", after, "--count", "2", "--jitter", "30s", "--name", "n", "--json"
    )
    fires = json.loads(out)
    trigger = timing.make_trigger(cron="0 * * * *")
    tick = datetime(2030, 1, 1, 1, tzinfo=UTC)
    offset = timing.jitter_offset(trigger, "n", tick, timedelta(seconds=30))
    assert fires[0]["utc"] == "2030-01-01T01:00:00Z" and fires[0]["offset_seconds"] == offset.total_seconds()
    assert fires[0]["due"].startswith("2030-01-01T01:00:")
    code, out = cli(db_url, "explain", "0 * * * *", "--jitter", "-3")
    assert code == 2 and "is not a duration" in out


def test_schedules_show_the_jittered_next_run(db_url: str) -> None:
    app = make_app(db_url)
    try:
        info = app.add_schedule("j", "some.task", cron="0 * * * *", jitter=timedelta(minutes=20))
        code, out = cli(db_url, "schedules", "--json")
        assert code == 0
        (shown,) = json.loads(out)
        assert shown["jitter"] == 1200 and shown["next_run_at"] == rota.models.iso(info.next_run_at)
        assert info.next_run_at is not None and info.next_run_at.minute < 20
    finally:
        app.close()


def test_a_jittered_tick_waiting_for_its_offset_says_when_it_is_due(db_url: str) -> None:
    clock = rota.FakeClock(datetime(2029, 12, 31, 23, 59, 59, tzinfo=UTC))
    app = make_app(db_url, clock=clock)
    try:
        app.task(name="some.task")(lambda: None)
        app.add_schedule("j", "some.task", cron="0 * * * *", jitter=timedelta(minutes=50))
        clock.advance(seconds=2)  # past the tick, before its offset (at least 3 s: see below)
        rota.testing.run_pending(app)
        (run,) = app.list_runs(schedule="j")
        assert run.status == "pending" and run.due_at > clock.now(), run  # made, not due yet
        code, out = cli(db_url, "runs")
        assert code == 0 and "due " in out and "(tick + jitter)" in out, out
        code, out = cli(db_url, "run", run.id)
        assert code == 0 and f"scheduled_for: 2030-01-01T00:00:00Z (due {rota.models.iso(run.due_at)})" in out, out
    finally:
        app.close()


def test_retry_of_a_task_name_that_has_no_run_says_so(db_url: str) -> None:
    app = make_app(db_url)
    try:
        app.task(name="shop.charge")(lambda: 1 / 0).enqueue()
        rota.testing.run_pending(app)
        code, out = cli(db_url, "retry", "--failed", "--task", "charge")
        assert code == 1 and out.startswith("error: ") and out.count("\n") == 1, out
        assert "no run of task 'charge' exists (did you mean 'shop.charge'?): nothing to retry" in out, out
        code, out = cli(db_url, "retry", "--status", "cancelled", "--task", "shop.charge")
        assert code == 0 and "no run of task" not in out, out  # it exists: nothing to retry is no typo
    finally:
        app.close()


def test_rota_run_says_why_a_run_ended_without_an_attempt(db_url: str) -> None:
    app = make_app(db_url)
    try:
        app.task(name="bad")(lambda: 1 / 0)
        app.task(name="report")(lambda: None)
        parent = app.get_task("bad").enqueue()
        child = app.get_task("report").options(after=[parent]).enqueue()
        rota.testing.run_pending(app)
        assert child.refresh().status == "cancelled"
        code, out = cli(db_url, "run", child.id)
        assert code == 0 and f"error: DependencyFailed: parent run {parent.id} (bad) ended failed" in out, out
        code, out = cli(db_url, "run", parent.id)
        assert code == 0 and out.count("ZeroDivisionError: division by zero") == 2, out  # the attempt's, once
        assert "         error:" not in out, out  # the attempt already says why
    finally:
        app.close()


def test_enqueue_takes_unique_for_and_after(db_url: str) -> None:
    app = make_app(db_url)
    app.migrate()
    try:
        base = ("enqueue", "tests.apps.basic:app", "noop")
        code, first = cli(db_url, *base, "--args", "[1]", "--key", "k", "--unique-for", "10m")
        assert code == 0 and first.strip().isdigit(), first
        rota.testing.run_pending(app)  # it succeeds: within the window it still counts
        code, out = cli(db_url, *base, "--args", "[1]", "--key", "k", "--unique-for", "10m")
        assert code == 0 and out.startswith(f"{first.strip()} (created with key 'k' within the last 10 min"), out
        code, out = cli(db_url, *base, "--args", "[2]", "--after", first.strip(), "--json")
        assert code == 0 and json.loads(out)["created"], out
        assert app.run_links(json.loads(out)["id"])["parents"] == [first.strip()]
        code, out = cli(db_url, *base, "--args", "[3]", "--after", "999999")
        assert code == 1 and out.count("\n") == 1 and "do not exist: 999999" in out, out
        code, out = cli(db_url, *base, "--args", "[3]", "--key", "k", "--unique-for", "soon")
        assert code == 2 and "'soon' is not a duration" in out, out
    finally:
        app.close()


def test_backfill_of_future_ticks_says_they_are_the_schedules_own(db_url: str) -> None:
    app = make_app(db_url)
    try:
        app.add_schedule("nightly", "some.task", every=60)
        now = datetime.now(UTC)
        start, end = (now + timedelta(hours=1)).isoformat(), (now + timedelta(hours=2)).isoformat()
        code, out = cli(db_url, "backfill", "nightly", "--from", start, "--to", end)
        assert code == 0 and out.count("\n") == 1, out
        assert "starts at or after its next run" in out and "backfill makes only past ticks" in out, out
        app.pause("nightly")
        code, out = cli(db_url, "backfill", "nightly", "--from", start, "--to", end)
        assert code == 0 and "resume it first" in out, out
    finally:
        app.close()


def test_a_short_schedule_name_gets_the_full_one_suggested(db_url: str) -> None:
    app = make_app(db_url)
    try:
        app.add_schedule("myapp.jobs.nightly_cleanup", "some.task", every=3600)
        for command in ("trigger", "pause", "resume"):
            code, out = cli(db_url, command, "nightly_cleanup")
            assert code == 1 and out.count("\n") == 1, out
            assert out.count("(did you mean 'myapp.jobs.nightly_cleanup'?)") == 1, out
    finally:
        app.close()
