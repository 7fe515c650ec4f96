"""The run page of a durable task in real Chromium (issue 43), on every store: each step with
its name, attempt, start, end and outcome; a parked run's wait (its signal and due time) and
its progress; and a signal sent meanwhile resuming the run, which the page's auto-refresh
shows succeeded, its last step added and the wait gone."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

import rota
from rota.web import create_app

from ..conftest import WITH_MYSQL, start_worker, store_url, wait_for

expect = pytest.importorskip("playwright.sync_api").expect  # waits for a condition, unlike a plain assert


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """The run page reads the steps, the wait and the progress from every store."""
    yield from store_url(request, tmp_path)


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROTA_DASHBOARD_TOKEN", raising=False)


def _cells(page: Any, row: int) -> list[str]:
    cells = page.locator("#steps tr.step").nth(row).locator("td")
    return [cells.nth(i).inner_text().strip() for i in range(cells.count())]


def test_the_run_page_shows_steps_the_wait_and_progress_and_a_signal_resumes(
    app: rota.App, page: Any, serve: Any
) -> None:
    failed_once = threading.Event()

    @app.task(name="onboard", retries=2, backoff=0.1, pass_context=True)
    def onboard(ctx: rota.RunContext, user_id: int) -> str:
        account = ctx.step("create-account", lambda: {"id": user_id})

        def welcome() -> str:
            if not failed_once.is_set():
                failed_once.set()
                raise RuntimeError("mail server down")
            return "sent"

        ctx.step("send-welcome", welcome)
        ctx.progress(0.5, "waiting for the e-mail confirmation")
        confirmed = ctx.wait_for("email-confirmed", timeout=timedelta(days=7))
        ctx.step("first-tip", lambda: account["id"])
        return "done" if confirmed else "expired"

    start_worker(app)
    ref = onboard.enqueue(7)

    def parked_with_progress() -> bool:
        run = app.get_run(ref.id)
        return run.status == "pending" and run.waiting is not None and run.progress is not None

    wait_for(parked_with_progress, 20, "the park with its progress")
    run = app.get_run(ref.id)
    assert run.waiting is not None and run.progress is not None
    served = serve(create_app(app))
    page.goto(served.url + f"#/run/{ref.id}")
    page.locator("#steps tr.step").first.wait_for()

    rows = [_cells(page, i) for i in range(page.locator("#steps tr.step").count())]
    assert [(r[0], r[1], r[2], r[5]) for r in rows] == [
        ("1", "create-account", "1", "succeeded"),
        ("2", "send-welcome", "2", "succeeded"),  # failed in attempt 1: saved once it succeeded
        ("3", "wait:email-confirmed", "2", "waiting"),
    ]
    by_name = {s["name"]: s for s in run.steps}
    for r in rows:  # start and end as stored
        step = by_name[r[1]]
        assert (r[3], r[4]) == (step["started_at"] or "", step["finished_at"] or "")
    assert rows[0][3] and rows[0][4]

    wait = page.locator('#detail [data-wait="signal"]')
    assert wait.inner_text().startswith(f"waiting for signal email-confirmed until {run.waiting['until']}")
    assert page.locator('#detail [data-wait="rate"]').count() == 0
    assert "50% — waiting for the e-mail confirmation" in page.locator("#detail dl").inner_text()

    page.goto(served.url + "#/runs")  # the runs list says it is parked, and for what
    parked = page.locator(f'tr[data-run="{ref.id}"] [data-wait="signal"]')
    expect(parked).to_have_text("waits for email-confirmed")
    assert parked.get_attribute("title") == f"until {run.waiting['until']}"
    page.goto(served.url + f"#/run/{ref.id}")
    page.locator("#steps tr.step").first.wait_for()

    assert app.signal(ref.id, "email-confirmed", {"at": "now"}).woken
    expect(page.locator("#detail h2 .badge").first).to_have_text("succeeded", timeout=20_000)  # auto-refresh
    expect(page.locator("#steps tr.step")).to_have_count(4)
    assert _cells(page, 2)[5] == "succeeded" and _cells(page, 3)[1:3] == ["first-tip", "2"]
    assert page.locator('#detail [data-wait="signal"]').count() == 0
    assert ref.wait(5).result == "done"


def test_the_run_page_says_a_run_waits_for_its_rate(app: rota.App, page: Any, serve: Any) -> None:
    @app.task(name="quota_call", rate=rota.Rate(1, per=timedelta(hours=1), name="quota"))
    def quota_call(n: int) -> int:
        return n

    start_worker(app)
    assert quota_call.enqueue(1).wait(10).result == 1
    second = quota_call.enqueue(2)
    wait_for(lambda: (app.get_run(second.id).waiting or {}).get("kind") == "rate", what="the wait for the rate")
    until = app.get_run(second.id).waiting["until"]  # type: ignore[index]
    served = serve(create_app(app))
    page.goto(served.url + f"#/run/{second.id}")
    shown = page.locator('#detail [data-wait="rate"]')
    expect(shown).to_have_text(f"rate quota is full until {until}")
    assert page.locator('#detail [data-wait="signal"], #detail [data-wait="sleep"]').count() == 0
    app.cancel(second.id)
