"""Times at the edges (issue 41): a schedule's next_run_at written by hand off a whole
microsecond still fires (item 13); `rota explain` and backfill near year 1 or 9999 give a
correct answer or one clear line, never an OverflowError (the low item)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from click.testing import CliRunner

import rota
from rota import timing
from rota.cli import main

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


LAST = datetime.max.replace(tzinfo=UTC)


def _write_next_run_at(app: rota.App, name: str, seconds: float) -> None:
    """Set a schedule's next_run_at by hand to Unix `seconds` (on PostgreSQL the server keeps
    whole microseconds, as MySQL/MariaDB's DATETIME(6) does; SQLite keeps the REAL as written)."""
    store: Any = app.store
    server = {"postgresql": "to_timestamp({})", "mysql": "FROM_UNIXTIME({})"}.get(store.dialect, "{}")
    value = server.format(repr(seconds))
    with store._tx() as s:
        s.q_text(f"UPDATE rota_schedules SET next_run_at = {value} WHERE name = {store._p('name')}", name=name)


def test_a_next_run_at_off_a_whole_microsecond_fires(app: rota.App) -> None:
    task = app.task(name="t")(lambda: None)
    app.add_schedule("hourly", task, every=3600)
    app.add_schedule("other", task, every=3600)
    past = float(int(time.time()) - 30) + 0.1234567  # 0.1234567 s: not on a whole microsecond
    assert datetime.fromtimestamp(past, UTC).timestamp() != past
    _write_next_run_at(app, "hourly", past)
    start_worker(app)

    def fired() -> list[rota.Run]:  # (an hour's tick that came meanwhile may fire too)
        return [r for r in app.list_runs(schedule="hourly") if abs(r.scheduled_for.timestamp() - past) < 1e-6]  # type: ignore[union-attr]

    wait_for(fired, 30, "the hand-written tick to fire")
    wait_for(
        lambda: (app.get_schedule("hourly").next_run_at or LAST) > datetime.now(UTC), 30, "the schedule to advance"
    )
    assert len(fired()) == 1  # fired once, then planned the next tick


# -- rota explain -----------------------------------------------------------------------------


def test_explain_near_the_end_of_year_9999_lists_the_fire_times_there_are() -> None:
    fires = timing.explain("* * * * *", after=datetime(9999, 12, 31, 23, 57, tzinfo=UTC), count=5)
    assert [f.utc for f in fires] == [datetime(9999, 12, 31, 23, m, tzinfo=UTC) for m in (58, 59)]
    with pytest.raises(
        rota.ConfigurationError, match=r"has no fire time after 9999-12-31T.* before the end of year 9999"
    ):
        timing.explain("0 0 * * *", "America/New_York", after=datetime(9999, 12, 31, 12, tzinfo=UTC))


def test_explain_near_year_1_is_one_line_or_a_correct_answer() -> None:
    with pytest.raises(rota.ConfigurationError, match=r"after 0001-01-01T00:00:00\+00:00 is too close to year 1"):
        timing.explain("* * * * *", after=datetime(1, 1, 1, tzinfo=UTC))
    fires = timing.explain("0 0 * * *", "America/New_York", after=datetime(1, 1, 3, tzinfo=UTC), count=2, jitter=60)
    assert [f.local.replace(tzinfo=None) for f in fires] == [datetime(1, 1, 3), datetime(1, 1, 4)]


@pytest.mark.parametrize(
    ("after", "message"),
    [
        ("0001-01-01T00:00", "error: after 0001-01-01T00:00:00+00:00 is too close to year 1: ticks are computed from"),
        ("9999-12-31T23:59:30", "error: cron '* * * * *' in UTC has no fire time after 9999-12-31T23:59:30+00:00"),
    ],
)
def test_rota_explain_at_the_edges_is_one_line(after: str, message: str) -> None:
    result = CliRunner().invoke(main, ["explain", "* * * * *", "--after", after])
    assert result.exit_code == 1 and result.output.startswith(message) and result.output.count("\n") == 1, result.output


# -- backfill (both stores) -------------------------------------------------------------------


@pytest.fixture
def scheduled(app: rota.App) -> rota.App:
    task = app.task(name="t")(lambda: None)
    app.add_schedule("every", task, every=3600)
    app.add_schedule("cron", task, cron="0 * * * *", tz="America/New_York")
    return app


@pytest.mark.parametrize("name", ["every", "cron"])
def test_backfill_near_year_1_is_one_line_or_a_correct_answer(scheduled: rota.App, name: str) -> None:
    with pytest.raises(rota.ConfigurationError, match=r"start 0001-01-01T00:00:00\+00:00 is too close to year 1"):
        scheduled.backfill(name, start=datetime(1, 1, 1, tzinfo=UTC), end=datetime(2020, 1, 1, tzinfo=UTC))
    start = datetime(1, 1, 3, tzinfo=UTC)
    handles = scheduled.backfill(name, start=start, end=start + timedelta(hours=3))
    ticks = [h.refresh().scheduled_for for h in handles]
    assert len(ticks) == 3 and all(t is not None and start <= t < start + timedelta(hours=3) for t in ticks)
    assert scheduled.backfill(name, start=start, end=start + timedelta(hours=3)) == []  # each tick has its run


@pytest.mark.parametrize("name", ["every", "cron"])
def test_backfill_near_the_end_of_year_9999_makes_nothing(scheduled: rota.App, name: str) -> None:
    assert scheduled.backfill(name, start=datetime(9999, 12, 31, tzinfo=UTC), end=LAST) == []
    late = datetime(9999, 12, 31, 20, tzinfo=timezone(timedelta(hours=-10)))  # 10000-01-01 in UTC
    assert scheduled.backfill(name, start=datetime(9999, 12, 31, tzinfo=UTC), end=late) == []
    url = scheduled.database_url
    cli = CliRunner()
    done = cli.invoke(
        main, ["--database-url", url, "backfill", name, "--from", "9999-12-31T00:00", "--to", "9999-12-31T23:59"]
    )
    assert done.exit_code == 0 and done.output.endswith("nothing to do\n"), done.output
    refused = cli.invoke(main, ["--database-url", url, "backfill", name, "--from", "0001-01-01", "--to", "0001-01-02"])
    assert refused.exit_code == 1 and refused.output.count("\n") == 1, refused.output
    assert refused.output.startswith("error: start 0001-01-01T00:00:00+00:00 is too close to year 1"), refused.output
