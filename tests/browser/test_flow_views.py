"""The flow-control views in real Chromium on a seeded history (both stores): the Limits view
against the database (a limit with running and waiting runs, a rate with starts in its
window), its empty state, a run's parents and dependents as links (navigation by URL, back
and reload), waiting and backfilled marks; contrast in light and dark and a 390 px screen
for the new pages. Screenshots go to tests/artifacts/screenshots/."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import rota
import rota.testing
from rota.web import create_app

from .conftest import in_thread
from .test_views import CONTRAST

expect = pytest.importorskip("playwright.sync_api").expect


@pytest.fixture(autouse=True)
def _no_env_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROTA_DASHBOARD_TOKEN", raising=False)


@pytest.fixture
def flow(app: rota.App) -> dict[str, Any]:
    """A flow a -> c -> d with b (due in an hour) still to succeed before c; a limit of 2
    with 2 running and 3 waiting; a rate of 3 a minute with 3 starts and 2 waiting; two
    backfilled ticks."""

    @app.task(name="step")
    def step(x: Any = None) -> Any:
        return x

    @app.task(name="export", limit=2)
    def export(customer: int) -> None: ...

    @app.task(name="gh", rate=rota.Rate(3, per=60, name="github"))
    def gh(n: int) -> None: ...

    app.add_schedule("nightly", "step", every=3600)
    app.prepare()
    a = step.enqueue("a")
    in_thread(lambda: rota.testing.run_pending(app))
    b = step.options(delay=3600).enqueue("b")
    c = step.options(after=[a, b]).enqueue("c")
    d = step.options(after=[c]).enqueue("d")
    for i in range(5):
        export.enqueue(i)
        gh.enqueue(i)
    claimed = app.store.claim("w-1", 20, None, 600.0)
    assert sorted(r.task for r in claimed) == ["export"] * 2 + ["gh"] * 3  # c and d wait on b
    now = app.store.now()
    filled = app.backfill("nightly", start=now - timedelta(hours=3), end=now - timedelta(hours=1))
    assert filled
    return {"app": app, "export": export, "a": a.id, "b": b.id, "c": c.id, "d": d.id, "backfilled": filled[0].id}


def test_the_limits_view_matches_the_database(
    flow: dict[str, Any], page: Any, serve: Any, screenshots: Path, db_url: str
) -> None:
    app: rota.App = flow["app"]
    store: Any = app.store
    served = serve(create_app(app))
    page.goto(served.url + "#/limits")
    page.locator('tr[data-limit="export"]').wait_for()
    expect(page.locator("#nav a.on")).to_have_text("Limits")
    (limit,) = store.list_limits()
    assert (limit.name, limit.max, limit.running, limit.waiting, limit.keys) == ("export", 2, 2, 3, 1)
    row = page.locator('tr[data-limit="export"]')
    for col, value in (
        ("max", limit.max),
        ("running", limit.running),
        ("waiting", limit.waiting),
        ("keys", limit.keys),
    ):
        assert row.locator(f'td[data-col="{col}"]').inner_text() == str(value), col
    assert row.locator(".badge.full").count() == 1  # every slot taken, runs waiting
    (rate,) = store.list_rates()
    assert (rate.name, rate.max, rate.per, rate.started, rate.waiting) == ("github", 3, 60.0, 3, 2)
    row = page.locator('tr[data-rate="github"]')
    assert row.locator('td[data-col="max"]').inner_text() == "3 per 1 min"
    assert row.locator('td[data-col="started"]').inner_text() == str(rate.started)
    assert row.locator('td[data-col="waiting"]').inner_text() == str(rate.waiting)
    assert row.locator('td[data-col="keys"]').inner_text() == str(rate.keys)
    assert rate.keys_full == 1 and row.locator(".badge.full").count() == 1  # its one key's window is full
    assert page.locator("#rates th").all_inner_texts()[1:3] == [
        "max per key per window",
        "starts in the window (all keys)",
    ]
    store_name = "postgres" if db_url.startswith("postgres") else "sqlite"
    page.screenshot(path=str(screenshots / f"limits-{store_name}.png"), full_page=True)

    # More runs wait, one is cancelled: the view follows the database (here on a reload).
    flow["export"].enqueue(8)
    flow["export"].enqueue(9)
    app.cancel(next(r for r in app.list_runs(status="pending", task="export", limit=10)).id)
    page.reload()
    expect(page.locator('tr[data-limit="export"] td[data-col="waiting"]')).to_have_text("4")
    assert store.list_limits()[0].waiting == 4


def test_a_keyed_limit_is_full_only_when_a_key_is_at_its_max(
    app: rota.App, page: Any, serve: Any, screenshots: Path, db_url: str
) -> None:
    """max is per key: 2 runs of 2 customers running under Limit(2, by=) and one waiting is
    not full (the running count is over every key); it is once customer 1 has 2 running."""

    @app.task(name="export", limit=rota.Limit(2, by="customer"))
    def export(customer: int) -> None: ...

    app.prepare()
    export.enqueue(1), export.enqueue(2)
    assert len(app.store.claim("w-1", 10, None, 600.0)) == 2
    export.enqueue(3)  # due: it waits for a claim, not for a slot
    served = serve(create_app(app))
    page.goto(served.url + "#/limits")
    row = page.locator('tr[data-limit="export"]')
    row.wait_for()
    headers = page.locator("#limits th").all_inner_texts()
    assert headers[1:3] == ["max per key", "running (all keys)"], headers
    cells = {c: row.locator(f'td[data-col="{c}"]').inner_text() for c in ("max", "running", "waiting", "keys")}
    assert cells == {"max": "2", "running": "2", "waiting": "1", "keys": "3"}, cells
    assert row.locator(".badge.full").count() == 0  # running = max, yet no key is at its max

    export.enqueue(1), export.enqueue(1)
    assert len(app.store.claim("w-1", 10, None, 600.0)) == 2  # customer 1's second slot, and customer 3
    page.reload()
    badge = page.locator('tr[data-limit="export"] .badge.full')
    badge.wait_for()
    assert badge.get_attribute("title").startswith("1 of 3 keys have every slot taken"), badge.get_attribute("title")
    store_name = "postgres" if db_url.startswith("postgres") else "sqlite"
    page.screenshot(path=str(screenshots / f"limits-keyed-{store_name}.png"), full_page=True)


def test_the_limits_view_says_how_to_declare_one_when_there_is_none(
    app: rota.App, page: Any, serve: Any, screenshots: Path
) -> None:
    app.migrate()
    served = serve(create_app(app))
    page.goto(served.url + "#/")
    page.locator("#nav").get_by_role("link", name="Limits").click()
    page.wait_for_url("**#/limits")
    empty = page.locator("#limits-empty")
    empty.wait_for()
    assert "No limits or rates are stored yet" in empty.inner_text()
    assert "rota.Limit(1, by=" in empty.inner_text() and "rota.Rate(" in empty.inner_text()
    page.screenshot(path=str(screenshots / "limits-empty.png"), full_page=True)


def test_a_runs_parents_and_dependents_are_links_to_them(
    flow: dict[str, Any], page: Any, serve: Any, screenshots: Path, db_url: str
) -> None:
    app: rota.App = flow["app"]
    a, b, c, d = flow["a"], flow["b"], flow["c"], flow["d"]
    served = serve(create_app(app))
    page.goto(served.url + f"#/run/{c}")
    links = page.locator("#links")
    links.locator(f'li[data-link="parent"][data-run="{a}"] .badge.succeeded').wait_for()
    assert links.locator(f'li[data-link="parent"][data-run="{b}"] .badge.pending').count() == 1
    assert links.locator(f'li[data-link="dependent"][data-run="{d}"] .badge.pending').count() == 1
    assert "waiting on 1 parent to succeed" in page.locator("#waiting-on").inner_text()
    assert app.store.run_links(int(c)) == ([int(a), int(b)], [int(d)])
    store_name = "postgres" if db_url.startswith("postgres") else "sqlite"
    page.screenshot(path=str(screenshots / f"run-links-{store_name}.png"), full_page=True)

    links.locator(f'li[data-run="{a}"] a').click()  # to the parent, by its link
    page.wait_for_url(f"**#/run/{a}")
    page.locator(f'#detail[data-run="{a}"]').wait_for()
    page.locator(f'#links li[data-link="dependent"][data-run="{c}"]').wait_for()
    assert page.locator("#waiting-on").count() == 0  # a finished run waits on nothing
    page.go_back()
    page.locator(f'#detail[data-run="{c}"]').wait_for()
    page.reload()
    page.locator(f'#links li[data-link="parent"][data-run="{b}"]').wait_for()
    page.goto(served.url + f"#/run/{d}")  # by URL: d waits on c, and has no dependents
    page.locator(f'#links li[data-link="parent"][data-run="{c}"] .badge.pending').wait_for()
    assert page.locator('#links li[data-link="dependent"]').count() == 0

    # The runs list marks the waiting runs; a backfilled run is marked on its page and in lists.
    page.goto(served.url + "#/runs?status=pending&task=step")
    page.locator(f'tr[data-run="{c}"] .badge.waiting').wait_for()
    assert page.locator(f'tr[data-run="{c}"] .badge.waiting').inner_text() == "waiting on 1"
    assert page.locator(f'tr[data-run="{b}"] .badge.waiting').count() == 0
    assert page.locator(f'tr[data-run="{flow["backfilled"]}"] .badge.backfilled').count() == 1
    page.goto(served.url + f"#/run/{flow['backfilled']}")
    page.locator("#detail .badge.backfilled").wait_for()
    assert page.locator("#links").count() == 0  # no parents, no dependents: no section


def test_a_pruned_link_and_a_long_list_stay_readable(flow: dict[str, Any], page: Any, serve: Any) -> None:
    """A linked run no longer stored says so; past the first 50 links the rest are counted."""
    app: rota.App = flow["app"]
    c = flow["c"]
    served = serve(create_app(app))
    page.goto(served.url + "#/limits")
    page.locator("main section").first.wait_for()
    detail = page.evaluate(f"async () => (await fetch('api/runs/{c}')).json()")
    many = [str(9_000_000 + i) for i in range(60)]
    page.route(f"**/api/runs/{c}", lambda route: route.fulfill(json={**detail, "dependents": many}))
    page.goto(served.url + f"#/run/{c}")
    page.locator('#links li[data-link="dependent"]').first.wait_for()
    # 2 parents + 48 dependents are looked up (the first 50), the other 12 are counted
    assert page.locator('#links li[data-link="dependent"]').count() == 48
    assert "(no longer stored)" in page.locator('#links li[data-link="dependent"]').first.inner_text()
    assert "… and 12 more" in page.locator("#links").inner_text()


PAGES = {"limits": "#/limits", "run-links": None}


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_flow_pages_are_readable_in_light_and_dark(
    flow: dict[str, Any], chromium: Any, serve: Any, scheme: str, screenshots: Path, db_url: str
) -> None:
    served = serve(create_app(flow["app"]))
    context = chromium.new_context(viewport={"width": 1300, "height": 900}, color_scheme=scheme)
    page = context.new_page()
    store = "postgres" if db_url.startswith("postgres") else "sqlite"
    try:
        low = []
        for name, target in {**PAGES, "run-links": f"#/run/{flow['c']}", "runs": "#/runs?status=pending"}.items():
            page.goto(served.url + target)
            page.locator("main section").first.wait_for()
            page.wait_for_load_state("networkidle")
            page.wait_for_timeout(300)
            texts = page.evaluate(CONTRAST)
            assert len(texts) > 5, name
            low += [(name, t["tag"], t["text"], round(t["ratio"], 2)) for t in texts if t["ratio"] < 4.5]
            page.screenshot(path=str(screenshots / f"{name}-{scheme}-{store}.png"), full_page=True)
        assert not low, low
    finally:
        context.close()


def test_the_flow_pages_fit_a_390_px_screen(
    flow: dict[str, Any], chromium: Any, serve: Any, screenshots: Path, db_url: str
) -> None:
    served = serve(create_app(flow["app"]))
    context = chromium.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True)
    page = context.new_page()
    store = "postgres" if db_url.startswith("postgres") else "sqlite"
    try:
        for name, target in {**PAGES, "run-links": f"#/run/{flow['c']}"}.items():
            page.goto(served.url + target)
            page.locator("main section").first.wait_for()
            page.wait_for_load_state("networkidle")
            page.wait_for_timeout(300)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, (name, width)
            page.screenshot(path=str(screenshots / f"{name}-390px-{store}.png"), full_page=True)
    finally:
        context.close()


def test_a_limit_and_a_rate_no_worker_declared_are_shown_with_how_to_declare_them(
    app: rota.App, chromium: Any, page: Any, serve: Any, screenshots: Path, db_url: str
) -> None:
    """A client's typo ('emial', 'githbu') beside what the workers declared: the Limits view
    lists each undeclared name with its waiting runs, the run's page says why it waits; both
    readable in light and dark and on a 390 px screen."""

    @app.task(name="send", limit=rota.Limit(2, name="emial"))
    def send(n: int) -> None: ...

    @app.task(name="fetch", rate=rota.Rate(5, per=60, name="githbu"))
    def fetch(n: int) -> None: ...

    @app.task(name="export", limit=2)
    def export(n: int) -> None: ...

    app.migrate()
    app.store.sync_flow({"export": 2}, {})  # type: ignore[attr-defined]  # what a worker stored
    runs = [send.enqueue(1), send.enqueue(2), fetch.enqueue(3)]
    served = serve(create_app(app))
    page.goto(served.url + "#/limits")
    row = page.locator('tr[data-undeclared="limit:emial"]')
    row.wait_for()
    assert row.locator('td[data-col="waiting"]').inner_text() == "2"
    assert 'rota.Limit(N, name="emial")' in row.inner_text()
    row = page.locator('tr[data-undeclared="rate:githbu"]')
    assert row.locator('td[data-col="waiting"]').inner_text() == "1"
    assert 'rota.Rate(N, per=..., name="githbu")' in row.inner_text()
    page.locator('tr[data-limit="export"]').wait_for()  # the declared ones still listed
    page.goto(served.url + f"#/run/{runs[0].id}")
    wait = page.locator('[data-wait="undeclared"]')
    wait.wait_for()
    assert "limit emial is not declared by any worker" in wait.inner_text(), wait.inner_text()
    store = "postgres" if db_url.startswith("postgres") else "sqlite"
    targets = {"undeclared-limits": "#/limits", "undeclared-run": f"#/run/{runs[2].id}"}
    for scheme, viewport in (("light", (1300, 900)), ("dark", (1300, 900)), ("light", (390, 844))):
        context = chromium.new_context(viewport={"width": viewport[0], "height": viewport[1]}, color_scheme=scheme)
        other = context.new_page()
        try:
            for name, target in targets.items():
                other.goto(served.url + target)
                other.locator('[data-undeclared], [data-wait="undeclared"]').first.wait_for()
                other.wait_for_load_state("networkidle")
                low = [(t["text"], round(t["ratio"], 2)) for t in other.evaluate(CONTRAST) if t["ratio"] < 4.5]
                assert not low, (name, scheme, low)
                width = other.evaluate("document.documentElement.scrollWidth")
                assert width <= viewport[0], (name, viewport, width)
                other.screenshot(path=str(screenshots / f"{name}-{scheme}-{viewport[0]}-{store}.png"), full_page=True)
        finally:
            context.close()
