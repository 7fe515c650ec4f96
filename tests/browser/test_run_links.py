"""The run page in a real browser names a run's after= parents and dependents (as links), how
many parents it still waits for, and a backfilled run (issue 20's flows, seen by an operator)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import rota
import rota.testing
from rota.web import create_app


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROTA_DASHBOARD_TOKEN", raising=False)


def test_a_run_page_links_parents_and_dependents(app: rota.App, page: Any, serve: Any) -> None:
    load = app.task(name="load")(lambda part: part)
    app.task(name="report")(lambda: None)
    parents = [load.enqueue(1), load.enqueue(2)]
    report = app.get_task("report").options(after=parents).enqueue()
    app.add_schedule("nightly", "report", every=60)
    now = datetime.now(UTC)
    (filled,) = app.backfill("nightly", start=now - timedelta(seconds=90), end=now - timedelta(seconds=30))
    served = serve(create_app(app))
    page.goto(served.url + f"#/run/{report.id}")
    links = page.locator('#detail [data-links="parents"] a')
    links.first.wait_for()
    assert [links.nth(i).inner_text() for i in range(links.count())] == [p.id for p in parents]
    assert "2 parent run(s) to succeed" in page.locator("#detail").inner_text()
    page.goto(served.url + f"#/run/{parents[0].id}")
    page.locator('#detail [data-links="dependents"] a').wait_for()
    assert page.locator('#detail [data-links="dependents"] a').inner_text() == report.id
    assert "parent run(s) to succeed" not in page.locator("#detail").inner_text()
    page.goto(served.url + f"#/run/{filled.id}")
    page.locator("#detail dl").wait_for()
    assert "made for a past tick" in page.locator("#detail").inner_text()
