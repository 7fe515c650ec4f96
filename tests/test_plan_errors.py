"""A schedule that cannot be planned is marked with its error instead of staying due
(issue 14 item 6); an update clears the mark."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner

import rota
from rota.cli import main as cli

from .conftest import WITH_MYSQL, start_worker, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _break_zone(app: rota.App, name: str) -> None:
    """Give a stored schedule a zone this host does not know, overdue (as if written elsewhere)."""
    store: Any = app.store
    overdue = {"sqlite": "next_run_at - 3600", "mysql": "UTC_TIMESTAMP(6) - INTERVAL 1 HOUR"}.get(
        store.dialect, "now() - interval '1 hour'"
    )
    with store._tx() as s:
        s.q_text(f"UPDATE rota_schedules SET tz = 'Mars/Olympus', next_run_at = {overdue} WHERE name = '{name}'")


def test_an_unplannable_schedule_is_marked_and_no_longer_due_until_updated(app: rota.App) -> None:
    app.task(name="t")(lambda: None)
    app.add_schedule("elsewhere", "t", every=60)
    _break_zone(app, "elsewhere")
    worker = start_worker(app, poll_interval=0.05)
    _wait_for(lambda: app.get_schedule("elsewhere").plan_error is not None, "the schedule to be marked")
    info = app.get_schedule("elsewhere")
    assert info.plan_error is not None and "Mars/Olympus" in info.plan_error
    assert info.next_run_at is None
    assert app.store.due_schedules(10) == []  # not due on every poll any more
    assert app.store.poll_state(None).next_schedule_due is None
    assert info.to_json()["plan_error"] == info.plan_error

    fixed = app.update_schedule("elsewhere", tz="UTC")
    assert fixed.plan_error is None and fixed.next_run_at is not None
    worker.stop(wait=True, timeout=10)


def test_an_update_without_timing_changes_also_clears_the_mark(app: rota.App) -> None:
    app.task(name="t")(lambda: None)
    app.add_schedule("s", "t", cron="0 3 * * *")
    due = app.store.get_schedule("s")
    assert due is not None and due.next_run_at is not None
    (stored,) = [d for d in _due_now(app) if d.name == "s"]
    assert app.store.mark_plan_error(stored, "cron exploded") is True
    assert app.get_schedule("s").plan_error == "cron exploded"
    again = app.update_schedule("s", priority=3)  # timing unchanged: still re-planned
    assert again.plan_error is None and again.next_run_at is not None


def test_a_stale_mark_loses_to_a_concurrent_update(app: rota.App) -> None:
    app.task(name="t")(lambda: None)
    app.add_schedule("s", "t", every=60)
    (stored,) = _due_now(app)
    app.update_schedule("s", every=120)  # next_run_at moved on
    assert app.store.mark_plan_error(stored, "too late") is False
    assert app.get_schedule("s").plan_error is None


def test_cli_schedules_json_shows_the_plan_error(app: rota.App) -> None:
    app.task(name="t")(lambda: None)
    app.add_schedule("s", "t", every=60)
    (stored,) = _due_now(app)
    app.store.mark_plan_error(stored, "unknown time zone 'Mars/Olympus'")
    result = CliRunner().invoke(cli, ["--database-url", app.database_url, "schedules", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)[0]["plan_error"] == "unknown time zone 'Mars/Olympus'"


def _due_now(app: rota.App) -> list[Any]:
    """Every active schedule as the worker would see it once due (next_run_at moved to now)."""
    store: Any = app.store
    now = {"sqlite": "strftime('%s','now') - 1", "mysql": "UTC_TIMESTAMP(6) - INTERVAL 1 SECOND"}.get(
        store.dialect, "now() - interval '1 second'"
    )
    names = [s.name for s in app.list_schedules()]
    olds = {s.name: s.next_run_at for s in app.list_schedules()}
    with store._tx() as s:
        s.q_text(f"UPDATE rota_schedules SET next_run_at = {now}")
    due = store.due_schedules(100)
    assert sorted(d.name for d in due) == sorted(names), olds
    return list(due)
