"""The dashboard in a real browser (Debian's Chromium through Playwright): the views on a
database with runs, schedule and run actions by clicking, a run's detail page with its
attempts, signing in and out with a token. Screenshots go to tests/artifacts/screenshots/."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import rota
import rota.testing
from rota.web import create_app

from ..conftest import WITH_MYSQL
from .conftest import in_thread

TOKEN = "browser-s3cret"


@pytest.fixture(autouse=True)
def _no_env_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROTA_DASHBOARD_TOKEN", raising=False)


@pytest.fixture
def filled(app: rota.App) -> dict[str, Any]:
    """A schedule, a succeeded and a failed run, a run due in an hour, a corrupt row, a lock."""

    @app.task(name="ok")
    def ok(x: Any = None) -> dict[str, Any]:
        return {"x": x}

    @app.task(name="bad", retries=1, backoff=0)
    def bad(x: Any = None) -> None:
        raise ValueError(f"bad input {x}")

    app.add_schedule("reports/daily", "ok", every=3600)
    ok.enqueue(1)
    failed = bad.enqueue("<b>not bold</b>")
    later = ok.options(delay=3600).enqueue(2)
    in_thread(lambda: rota.testing.run_pending(app))
    corrupt = ok.enqueue(3)
    store: Any = app.store
    with store._tx() as s:
        s.q_text(f"UPDATE rota_runs SET args = '[3,' WHERE id = {store._p('id')}", id=int(corrupt.id))
    lease = app.try_lock("nightly-report", ttl=300)
    assert lease is not None
    return {"app": app, "failed": failed.id, "later": later.id, "corrupt": corrupt.id}


def row(page: Any, attribute: str, value: str) -> Any:
    """The table row whose data-`attribute` is `value` (e.g. data-schedule="reports/daily")."""
    return page.locator(f'tr[data-{attribute}="{value}"]')


# The one browser flow on MySQL too (the views' data comes through the store's API, which the
# web and contract suites run on every store; each browser test costs seconds).
@pytest.mark.parametrize("db_url", WITH_MYSQL, indirect=True)
def test_views_and_actions_by_clicking(
    filled: dict[str, Any], page: Any, serve: Any, screenshots: Path, db_url: str
) -> None:
    app: rota.App = filled["app"]
    served = serve(create_app(app))
    page.goto(served.url + "#/runs")
    page.locator("tr[data-run]").nth(3).wait_for()
    assert page.locator("tr[data-run]").count() == 4
    assert "corrupt" in row(page, "run", filled["corrupt"]).inner_text()
    assert "bad input <b>not bold</b>" in page.locator("main").inner_text()  # markup shown as text
    assert page.locator("main b", has_text="not bold").count() == 0
    store = {"postgresql": "postgres"}.get(db_url.split(":", 1)[0], db_url.split(":", 1)[0])
    shot = screenshots / f"runs-{store}.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000

    page.goto(served.url + "#/locks")
    row(page, "lock", "nightly-report").wait_for()

    page.goto(served.url + "#/schedules")
    schedule = row(page, "schedule", "reports/daily")
    schedule.get_by_role("button", name="pause").click()
    schedule.locator(".badge.paused").wait_for()
    assert app.get_schedule("reports/daily").paused
    schedule.get_by_role("button", name="resume").click()
    schedule.locator(".badge.active").wait_for()
    assert not app.get_schedule("reports/daily").paused

    schedule.get_by_role("button", name="trigger").click()
    page.locator("#toast", has_text=re.compile(r"run \d+ pending")).wait_for()
    (triggered,) = app.list_runs(schedule="reports/daily")
    assert triggered.status == "pending"

    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(served.url + "#/runs")
    row(page, "run", filled["later"]).get_by_role("link", name=filled["later"], exact=True).click()
    detail = page.locator("#detail")
    detail.get_by_text(f"Run {filled['later']}").wait_for()
    assert page.url.endswith(f"#/run/{filled['later']}")
    detail.get_by_role("button", name="cancel").click()
    detail.locator(".badge.cancelled").first.wait_for()
    assert app.get_run(filled["later"]).status == "cancelled"


def test_a_runs_detail_has_every_attempt_and_retries(filled: dict[str, Any], page: Any, serve: Any) -> None:
    app: rota.App = filled["app"]
    served = serve(create_app(app))
    failed = filled["failed"]
    page.goto(f"{served.url}#run/{failed}")  # the first dashboard's links still open the run
    detail = page.locator("#detail")
    detail.get_by_text(f"Run {failed}").wait_for()
    attempts = page.locator("tr.attempt")
    assert attempts.count() == 2  # retries=1: both failures are listed
    assert (
        attempts.nth(0).locator("td").first.inner_text() == "1"
        and attempts.nth(1).locator("td").first.inner_text() == "2"
    )
    assert "ValueError" in detail.inner_text() and "Traceback" in detail.inner_text()
    assert "the handler raised ValueError" in page.locator(".fault").inner_text()
    assert page.locator("svg.attempts rect.seg").count() >= 3  # queued, attempt 1, backoff, attempt 2
    page.get_by_text("traceback of attempt 1").click()
    page.wait_for_timeout(6000)  # past an auto-refresh: an unchanged run is not redrawn
    assert page.locator("details").first.evaluate("d => d.open")
    detail.get_by_role("button", name="retry").click()
    toast = page.locator("#toast", has_text=re.compile(r"retry enqueued as run \d+"))
    toast.wait_for()
    new_id = re.search(r"run (\d+)", toast.inner_text()).group(1)  # type: ignore[union-attr]
    assert app.get_run(new_id).retry_of == failed
    page.wait_for_url(f"**#/run/{new_id}")  # the retry's own page

    page.goto(f"{served.url}#/run/{filled['corrupt']}")
    detail.get_by_text("args as stored").wait_for()
    assert "[3," in detail.inner_text()


def test_sign_in_with_a_token_and_sign_out(filled: dict[str, Any], page: Any, serve: Any) -> None:
    served = serve(create_app(filled["app"], token=TOKEN))
    page.goto(served.url)
    page.get_by_label("Token").fill("not-the-token")
    page.get_by_role("button", name="Sign in").click()
    page.get_by_text("That token is not right.").wait_for()

    page.get_by_label("Token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    page.locator("#nav").get_by_role("link", name="Schedules").click()
    row(page, "schedule", "reports/daily").wait_for()
    (cookie,) = page.context.cookies()
    assert cookie["httpOnly"] and TOKEN not in cookie["value"]

    page.get_by_role("button", name="sign out").click()
    page.get_by_label("Token").wait_for()
    assert page.context.cookies() == []
    assert page.goto(served.url + "api/stats").status == 401


def test_the_workers_view_shows_stuck_handlers(filled: dict[str, Any], page: Any, serve: Any) -> None:
    """The workers table has a `stuck` column: the API's count when the worker reports it (a
    badge when above zero), a dash when the record has none."""
    app: rota.App = filled["app"]
    app.store.register_worker("host-1:41:aa", "host-1", 41, 4, None)
    app.store.register_worker("host-2:42:bb", "host-2", 42, 2, ["mail"])
    records = {w.id: w.to_json() for w in app.list_workers()}
    served = serve(create_app(app))
    page.goto(served.url + "#/workers")
    first = row(page, "worker", "host-1:41:aa")
    first.wait_for()
    assert page.locator("main thead th").last.inner_text() == "stuck"
    assert first.locator("td").count() == 8
    reported = records["host-1:41:aa"].get("stuck")  # WorkerInfo.stuck where the worker has it
    assert first.locator("td").nth(7).inner_text() == ("–" if reported is None else str(reported))

    stuck = {"host-1:41:aa": 2, "host-2:42:bb": 0}  # as a worker with stuck handlers reports them
    answer = [{**record, "stuck": stuck[record["id"]]} for record in records.values()]
    page.route("**/api/workers", lambda route: route.fulfill(json=answer))
    page.reload()
    first.locator(".badge.stuck").wait_for()
    assert first.locator("td").nth(7).inner_text().split() == ["stuck", "2"]
    assert row(page, "worker", "host-2:42:bb").locator("td").nth(7).inner_text() == "0"


def test_a_schedule_that_cannot_be_planned_is_marked(filled: dict[str, Any], page: Any, serve: Any) -> None:
    app: rota.App = filled["app"]
    store: Any = app.store
    with store._tx() as s:
        s.q_text("UPDATE rota_schedules SET plan_error = 'unknown time zone Mars/Olympus', next_run_at = NULL")
    served = serve(create_app(app))
    page.goto(served.url + "#/schedules")
    schedule = row(page, "schedule", "reports/daily")
    schedule.locator(".badge", has_text="cannot plan").wait_for()
    assert "unknown time zone Mars/Olympus" in schedule.inner_text()
