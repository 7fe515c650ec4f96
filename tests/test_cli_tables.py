"""Tables a person reads at a glance: names never wrap, short relative times, humanized
durations, columns dropped (not squeezed) when the terminal is narrow; --json unchanged."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner

import rota.testing
from rota.cli import main
from rota.cli.display import Column, duration, fit, when
from rota.cli.inspect import RUN_COLUMNS

from .conftest import WITH_MYSQL, make_app, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


NAMES = ("demo.heartbeat", "demo.minutely-report", "billing.reconcile-ledgers-nightly")
ISO_MICRO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+")


def render(url: str, width: int, *args: str) -> list[str]:
    result = CliRunner(env={"COLUMNS": str(width)}).invoke(main, ["--database-url", url, *args])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    if "--json" in args:
        return lines
    assert lines[0].startswith("database: ") and len(lines[0]) <= width, lines[0]  # which database it read
    if lines[1].startswith("times: "):  # the database whole on its own line, the times' zone after it
        return lines[2:]
    assert "; times: " in lines[0], lines[0]
    return lines[1:]


@pytest.fixture
def url(db_url: str) -> str:
    app = make_app(db_url)
    for i, name in enumerate(NAMES):
        app.schedule(every=timedelta(seconds=5 + i), name=name, run_immediately=True)(lambda: "tick")
    app.task(name="fails")(lambda: 1 / 0)
    app.get_task("fails").enqueue()
    rota.testing.run_pending(app)
    app.close()
    return db_url


@pytest.mark.parametrize("width", [140, 80])
def test_schedules_and_runs_fit_without_wrapping(url: str, width: int) -> None:
    for command in ("schedules", "runs"):
        lines = render(url, width, command)
        assert all(len(line) <= width for line in lines), "\n".join(lines)
        body = "\n".join(lines)
        assert not ISO_MICRO.search(body), body
        for name in NAMES:
            assert any(name in line for line in lines), f"{name} wrapped or missing at {width}:\n{body}"
        if command == "schedules" or width == 140:
            assert re.search(r"\d+ s ago|in \d+ s|\bnow\b", body), body
    runs = "\n".join(render(url, width, "runs"))
    # Whether "started" fits at 140 depends on how long the runs took ("4 ms" vs "10 ms"); the
    # summary column then has its minimum width, which still shows the error's type.
    assert "ZeroDivisionErr" in runs and "failed" in runs


def test_narrow_terminal_drops_columns_in_order(url: str) -> None:
    keep = {header: k for header, k, _ in RUN_COLUMNS}
    for narrower, wider in ((80, 140), (140, 300)):
        shown = set(re.split(r"\s{2,}", render(url, narrower, "runs")[0].strip()))
        more = set(re.split(r"\s{2,}", render(url, wider, "runs")[0].strip()))
        assert {"id", "task", "status", "result / error"} <= shown < more
        assert min(keep[h] for h in shown) > max(keep[h] for h in more - shown)
    assert "name" in render(url, 40, "schedules")[0].split()


def test_utc_flag_and_json_keep_full_iso(url: str) -> None:
    assert "scheduled (UTC)" in render(url, 140, "runs", "--utc")[0]
    assert "next run (UTC)" in render(url, 200, "schedules", "--utc")[0]
    runs = json.loads("\n".join(render(url, 80, "runs", "--json")))
    assert all(r["scheduled_for"].endswith("Z") and "T" in r["scheduled_for"] for r in runs)
    schedules = json.loads("\n".join(render(url, 80, "schedules", "--json")))
    assert {s["name"] for s in schedules} == set(NAMES) and all(s["next_run_at"].endswith("Z") for s in schedules)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.25, "250 ms"),
        (3.25, "3.2 s"),
        (5, "5 s"),
        (42, "42 s"),
        (252, "4 min 12 s"),
        (7500, "2 h 5 min"),
        (3 * 86400, "3 d"),
    ],
)
def test_duration(seconds: float, shown: str) -> None:
    assert duration(timedelta(seconds=seconds)) == shown


def test_when() -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert when(now + timedelta(seconds=12), now) == "in 12 s"
    assert when(now - timedelta(minutes=3, seconds=5), now) == "3 min ago"
    assert when(now, now) == "now" and when(None, now) is None
    assert when(now - timedelta(hours=5), now, utc=True) == "07:00:00"
    assert when(now + timedelta(days=3), now, utc=True) == "Dec 03 12:00"
    assert when(now + timedelta(days=400), now, utc=True) == "2028-01-04 12:00"


def test_fit_gives_the_flexible_column_what_is_left() -> None:
    columns = [Column("id", 100), Column("worker", 10), Column("summary", 50, flexible=True)]
    rows = [["1", "w" * 30, "x" * 200]]
    assert fit(columns, rows, 300) == {0: 2, 1: 30, 2: 200}
    assert fit(columns, rows, 70) == {0: 2, 1: 30, 2: 70 - 2 - 30 - 6}
    assert fit(columns, rows, 60) == {0: 2, 2: 60 - 2 - 3}  # not a summary under 24 characters
    assert fit(columns, rows, 30) == {0: 2, 2: 30 - 2 - 3}
