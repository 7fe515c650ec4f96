"""Issue 44 item 11 in real Chromium (both stores): lost has its own colour, the throughput
chart counts each run once (retried attempts beside it, not stacked), status and error stay on
a 390 px screen (screenshots in tests/artifacts/screenshots/), live workers come first, bulk
actions ask with a count, and the read-only token sees no buttons and cannot act."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import rota
import rota.testing
from rota.web import create_app

from .conftest import in_thread

expect = pytest.importorskip("playwright.sync_api").expect

TOKEN, VIEWER = "full-token-1", "look-only-2"
LONG = "the upstream service answered 503 Service Unavailable after 30 s; " * 3


@pytest.fixture(autouse=True)
def _no_env_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROTA_DASHBOARD_TOKEN", raising=False)
    monkeypatch.delenv("ROTA_DASHBOARD_READONLY_TOKEN", raising=False)


@pytest.fixture
def ops(app: rota.App) -> dict[str, Any]:
    """Five succeeded runs, three runs that failed twice each (a retry apiece), two pending."""

    @app.task(name="ok")
    def ok(x: Any = None) -> int:
        return 1

    @app.task(name="flaky", retries=1, backoff=0)
    def flaky(x: Any = None) -> None:
        raise ConnectionError(LONG)

    app.add_schedule("reports/daily", "ok", every=3600)
    for i in range(5):
        ok.enqueue(i)
    for i in range(3):
        flaky.enqueue(i)
    in_thread(lambda: rota.testing.run_pending(app))
    for i in range(2):
        ok.options(delay=3600).enqueue(i)
    failed = next(r.id for r in app.list_runs(status="failed", limit=10))
    return {"app": app, "failed": failed}


COLOURS = """() => {
  const out = {};
  for (const cls of ["badge failed", "badge lost", "swatch s-failed", "swatch s-lost"]) {
    const node = document.createElement("span");
    node.className = cls;
    node.textContent = "x";
    document.body.append(node);
    const style = getComputedStyle(node);
    out[cls] = { bg: style.backgroundColor, fg: style.color };
    node.remove();
  }
  return out;
}"""
RATIO = """([fg, bg]) => {
  const rgb = (c) => /rgba?\\(([^)]+)\\)/.exec(c)[1].split(/[\\s,]+/).slice(0, 3).map(Number);
  const lum = (c) => 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  function f(v) { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; }
  const [x, y] = [lum(rgb(fg)), lum(rgb(bg))].sort((p, q) => q - p);
  return (x + 0.05) / (y + 0.05);
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_lost_has_its_own_readable_colour(ops: dict[str, Any], chromium: Any, serve: Any, scheme: str) -> None:
    served = serve(create_app(ops["app"]))
    context = chromium.new_context(viewport={"width": 1200, "height": 800}, color_scheme=scheme)
    page = context.new_page()
    try:
        page.goto(served.url + "#/runs")
        page.locator("tr[data-run]").first.wait_for()
        colours = page.evaluate(COLOURS)
        assert colours["badge lost"]["bg"] != colours["badge failed"]["bg"]
        assert colours["swatch s-lost"]["bg"] != colours["swatch s-failed"]["bg"]
        assert colours["badge lost"]["bg"] == colours["swatch s-lost"]["bg"]  # one colour for lost everywhere
        assert page.evaluate(RATIO, [colours["badge lost"]["fg"], colours["badge lost"]["bg"]]) >= 4.5
    finally:
        context.close()


def test_throughput_counts_each_run_once_with_retries_beside(ops: dict[str, Any], page: Any, serve: Any) -> None:
    served = serve(create_app(ops["app"]))
    page.goto(served.url + "#/")
    page.locator("#throughput rect.mark").first.wait_for()
    api = page.evaluate("async () => (await fetch('api/charts/throughput?window=1h')).json()")
    assert api["totals"]["succeeded"] == 5 and api["totals"]["failed"] == 3 and api["totals"]["retried"] == 3
    marks = page.locator("#throughput rect.mark").evaluate_all(
        """rs => rs.map((r) => ({ key: r.dataset.key, start: r.dataset.start, count: Number(r.dataset.count),
        apart: r.classList.contains("apart"), x: r.x.baseVal.value, y: r.y.baseVal.value,
        w: r.width.baseVal.value, h: r.height.baseVal.value }))"""
    )
    by_start: dict[str, list[dict[str, Any]]] = {}
    for mark in marks:
        by_start.setdefault(mark["start"], []).append(mark)
    for bucket in api["buckets"]:
        drawn = by_start.get(bucket["start"], [])
        stacked = [m for m in drawn if not m["apart"]]
        # the stacked bar is the runs that finished, each once: no retried segment in it
        assert sum(m["count"] for m in stacked) == bucket["succeeded"] + bucket["failed"] + bucket["skipped"]
        assert all(m["key"] != "retried" for m in stacked)
        retried = [m for m in drawn if m["apart"]]
        assert sum(m["count"] for m in retried) == bucket["retried"]
        for m in retried:  # beside the bar, from the axis: never on top of it
            assert m["key"] == "retried"
            assert all(m["x"] >= s["x"] + s["w"] - 0.01 for s in stacked)
            if stacked:
                bottom = max(s["y"] + s["h"] for s in stacked)
                assert abs(m["y"] + m["h"] - bottom) < 0.6
    legend = page.locator('#throughput .legend .key[data-key="retried"]').inner_text()
    assert "not stacked" in legend and "3" in legend


VISIBLE = """(nodes) => nodes.map((n) => { const b = n.getBoundingClientRect();
  return { left: b.left, right: b.right, width: b.width, text: n.textContent.slice(0, 30) }; })"""


def test_status_and_error_stay_on_a_390_px_screen(
    ops: dict[str, Any], chromium: Any, serve: Any, screenshots: Path, db_url: str
) -> None:
    served = serve(create_app(ops["app"]))
    context = chromium.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True)
    page = context.new_page()
    store = "postgres" if db_url.startswith("postgres") else "sqlite"
    try:
        page.goto(served.url + "#/runs?status=failed")
        page.locator("tr[data-run]").first.wait_for()
        page.screenshot(path=str(screenshots / f"runs-390-{store}.png"), full_page=True)
        for selector in ("tr[data-run] .badge.failed", "tr[data-run] td.wrap"):
            boxes = page.locator(selector).evaluate_all(VISIBLE)
            assert len(boxes) == 3, selector
            for box in boxes:
                assert box["width"] > 0 and box["left"] >= 0 and box["right"] <= 390, (selector, box)
        assert "ConnectionError" in page.locator("tr[data-run] td.wrap").first.inner_text()
        page.goto(f"{served.url}#/run/{ops['failed']}")
        page.locator("tr.attempt").first.wait_for()
        page.screenshot(path=str(screenshots / f"attempts-390-{store}.png"), full_page=True)
        for selector in ("tr.attempt .badge", "tr.attempt td.wrap"):
            boxes = page.locator(selector).evaluate_all(VISIBLE)
            assert len(boxes) == 2, selector
            for box in boxes:
                assert box["width"] > 0 and box["left"] >= 0 and box["right"] <= 390, (selector, box)
        assert "upstream service" in page.locator("tr.attempt td.wrap").first.inner_text()
    finally:
        context.close()


def test_live_workers_are_listed_before_dead_ones(ops: dict[str, Any], page: Any, serve: Any) -> None:
    served = serve(create_app(ops["app"]))
    base = {"state": "running", "concurrency": 4, "queues": None, "started_at": None, "last_seen": None, "stuck": 0}
    answer = [
        {**base, "id": "dead-1", "alive": False},
        {**base, "id": "live-1", "alive": True},
        {**base, "id": "dead-2", "alive": False},
        {**base, "id": "live-2", "alive": True},
    ]
    page.route("**/api/workers", lambda route: route.fulfill(json=answer))
    page.goto(served.url + "#/workers")
    page.locator("tr[data-worker]").first.wait_for()
    order = page.locator("tr[data-worker]").evaluate_all("rs => rs.map((r) => r.dataset.worker)")
    assert order == ["live-1", "live-2", "dead-1", "dead-2"]


def test_bulk_retry_asks_with_the_count_then_acts(ops: dict[str, Any], page: Any, serve: Any) -> None:
    app: rota.App = ops["app"]
    served = serve(create_app(app))
    page.goto(served.url + "#/runs?status=failed")
    expect(page.locator("tr[data-run]")).to_have_count(3)
    expect(page.locator("#role")).to_be_hidden()  # the full role: no read-only mark
    asked: list[str] = []

    def answer(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.on("dialog", answer)
    page.locator("#bulk-retry").click()
    expect(page.locator("#toast")).to_contain_text("retried 3 of 3 runs")
    assert asked and asked[0].startswith("Retry 3 runs matching status failed")
    assert len(app.list_runs(task="flaky", status="pending")) == 3
    # cancel on a filter that matches nothing says so, and asks nothing
    asked.clear()
    page.goto(served.url + "#/runs?status=running")
    page.locator("#runs-note").wait_for()
    page.locator("#bulk-cancel").click()
    expect(page.locator("#toast")).to_contain_text("No runs match")
    assert asked == []


def test_the_read_only_token_sees_no_action_and_cannot_act(ops: dict[str, Any], page: Any, serve: Any) -> None:
    app: rota.App = ops["app"]
    served = serve(create_app(app, token=TOKEN, readonly_token=VIEWER))
    page.rota_expected.append("403")
    page.goto(f"{served.url}?token={VIEWER}")
    page.wait_for_url(served.url)
    assert page.locator("body").get_attribute("data-role") == "readonly"
    expect(page.locator("#role")).to_be_visible()
    page.goto(served.url + "#/runs?status=failed")
    expect(page.locator("tr[data-run]")).to_have_count(3)
    expect(page.locator("#bulk-retry")).to_be_hidden()
    expect(page.locator("#bulk-cancel")).to_be_hidden()
    page.goto(f"{served.url}#/run/{ops['failed']}")
    page.locator("tr.attempt").first.wait_for()
    assert page.locator("button", has_text="retry").filter(visible=True).count() == 0
    page.goto(served.url + "#/schedules")
    page.locator('tr[data-schedule="reports/daily"]').wait_for()
    assert page.locator("main button").filter(visible=True).count() == 0
    status = page.evaluate(
        """async (id) => (await fetch("api/runs/" + id + "/retry", { method: "POST" })).status""", ops["failed"]
    )
    assert status == 403
    assert app.list_runs(task="flaky", status="pending") == []
