"""The dashboard's schedules table in a real browser: a damaged schedule (issue 21 item 1) and
a high-frequency one (item 19) are marked, and the others are listed as usual."""

from __future__ import annotations

from typing import Any

import pytest

import rota
from rota.web import create_app


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROTA_DASHBOARD_TOKEN", raising=False)
    monkeypatch.delenv("ROTA_HIGH_FREQUENCY", raising=False)


def test_damaged_and_high_frequency_schedules_are_marked(app: rota.App, page: Any, serve: Any) -> None:
    app.task(name="t")(lambda: None)
    app.add_schedule("fast", "t", every=5)
    app.add_schedule("damaged", "t", every=3600)
    app.add_schedule("plain", "t", cron="0 3 * * *")
    store: Any = app.store
    far = "next_run_at + interval '100000 years'" if store.dialect == "postgresql" else "next_run_at + 1e12"
    with store._tx() as s:
        s.q_text(f"UPDATE rota_schedules SET next_run_at = {far} WHERE name = 'damaged'")
    served = serve(create_app(app))
    page.goto(served.url + "#/schedules")
    rows = {name: page.locator(f'tr[data-schedule="{name}"]') for name in ("fast", "damaged", "plain")}
    rows["plain"].wait_for()
    assert "high frequency" in rows["fast"].inner_text() and "corrupt" not in rows["fast"].inner_text()
    assert "corrupt next_run_at" in " ".join(rows["damaged"].inner_text().split())
    assert "high frequency" not in rows["plain"].inner_text() and "corrupt" not in rows["plain"].inner_text()
