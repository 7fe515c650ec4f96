"""The dashboard's views in real Chromium on a seeded history (both stores): every view by
URL, back/forward/reload, the charts' numbers against the database, a missing id, contrast
of the rendered colours in light and dark, and a 390 px wide screen. Screenshots of every
view go to tests/artifacts/screenshots/."""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import rota
import rota.testing
from rota.web import create_app

from .conftest import in_thread

expect = pytest.importorskip("playwright.sync_api").expect  # waits for a condition, unlike a plain assert

VIEWS = {
    "overview": "#/",
    "runs": "#/runs?status=succeeded",
    "schedules": "#/schedules",
    "queues": "#/queues",
    "workers": "#/workers",
    "locks": "#/locks",
    "run": None,  # filled in by the test: a failed run's page
    "schedule": "#/schedule/reports%2Fdaily",
    "worker": "#/worker/host-1%3A41%3Aaa",
}


@pytest.fixture(autouse=True)
def _no_env_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROTA_DASHBOARD_TOKEN", raising=False)


def shift(app: rota.App, db_url: str, run_id: str, seconds: float, late: float) -> None:
    """Move a finished run `seconds` into the past, its start `late` seconds after it was due."""
    store: Any = app.store
    p = store._p
    if db_url.startswith("postgres"):
        ago = f"make_interval(secs => {p('s')})"
        due = f"make_interval(secs => {p('s')} + {p('late')})"
    else:
        ago, due = p("s"), f"({p('s')} + {p('late')})"
    sql = (
        f"UPDATE rota_runs SET finished_at = finished_at - {ago}, started_at = started_at - {ago}, "
        f"scheduled_for = started_at - {due}, due_at = started_at - {due}, created_at = started_at - {due} "
        f"WHERE id = {p('id')}"
    )
    with store._tx() as s:
        s.q_text(sql, s=seconds, late=late, id=int(run_id))


@pytest.fixture
def history(app: rota.App, db_url: str) -> dict[str, Any]:
    """Runs finished over the last 50 minutes (succeeded, failed, retried, skipped), pending
    runs on two queues (due now and later), one running, a schedule with ticks, a worker."""

    @app.task(name="ok")
    def ok(x: Any = None) -> int:
        return 1

    @app.task(name="flaky", retries=1, backoff=0)
    def flaky(x: Any = None) -> None:
        raise ValueError("flaky <i>upstream</i>")

    app.add_schedule("reports/daily", "ok", cron="30 2 * * *", tz="Europe/Berlin")
    done = [ok.enqueue(i) for i in range(30)] + [flaky.enqueue(i) for i in range(3)]
    for _ in range(4):
        app.trigger("reports/daily")
        in_thread(lambda: rota.testing.run_pending(app))
    in_thread(lambda: rota.testing.run_pending(app))
    for i, ref in enumerate(done):
        shift(app, db_url, ref.id, seconds=60 + i * 95, late=0.5 + i * 0.25)
    store: Any = app.store
    tick = app.trigger("reports/daily")
    with store._tx() as s:  # a skipped tick, as the overlap policy records one
        s.q_text(
            f"UPDATE rota_runs SET status = 'skipped', finished_at = created_at WHERE id = {store._p('id')}",
            id=int(tick.id),
        )
    for i in range(3):
        ok.options(queue="mail").enqueue(i)
    for i in range(2):
        ok.options(queue="mail", delay=3600).enqueue(i)
    ok.options(queue="reports", delay=600).enqueue(0)
    busy = ok.enqueue("busy")
    app.store.register_worker("host-1:41:aa", "host-1", 41, 4, None)
    with store._tx() as s:
        s.q_text(
            "UPDATE rota_runs SET status = 'running', owner = 'host-1:41:aa', token = 999, attempt = 1, "
            f"started_at = created_at, lease_until = created_at WHERE id = {store._p('id')}",
            id=int(busy.id),
        )
    lease = app.try_lock("nightly-report", ttl=300)
    assert lease is not None
    failed = next(r.id for r in app.list_runs(status="failed", limit=10))
    return {"app": app, "failed": failed, "busy": busy.id}


def expected_throughput(app: rota.App, api: dict[str, Any]) -> list[dict[str, int]]:
    """The chart's buckets recomputed from every run in the database (a plain scan)."""
    width = api["bucket_seconds"]
    starts = [datetime.fromisoformat(b["start"]).timestamp() for b in api["buckets"]]
    out = [dict.fromkeys(("succeeded", "failed", "retried", "skipped", "cancelled"), 0) for _ in starts]
    for run in app.list_runs(limit=1000):
        if run.finished_at is None:
            continue
        index = math.floor((run.finished_at.timestamp() - starts[0]) / width)
        if 0 <= index < len(starts):
            out[index][run.status] += 1
            out[index]["retried"] += max(run.attempt - 1, 0)
    return out


def nearest_rank(values: list[float], p: float) -> float | None:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] if ordered else None


def test_the_charts_numbers_match_the_database(history: dict[str, Any], page: Any, serve: Any) -> None:
    app: rota.App = history["app"]
    served = serve(create_app(app))
    page.goto(served.url + "#/")
    page.locator("#throughput rect.mark").first.wait_for()
    api = page.evaluate("async () => (await fetch('api/charts/throughput?window=1h')).json()")
    buckets = [{k: b[k] for k in ("succeeded", "failed", "retried", "skipped", "cancelled")} for b in api["buckets"]]
    assert buckets == expected_throughput(app, api)
    assert api["totals"]["succeeded"] >= 30 and api["totals"]["failed"] == 3 and api["totals"]["retried"] == 3
    assert api["totals"]["skipped"] == 1 and not api["estimated"]
    for key in ("succeeded", "failed", "retried", "skipped"):  # the legend says the totals in numbers
        legend = page.locator(f'#throughput .key[data-key="{key}"]')
        assert legend.get_attribute("data-total") == str(api["totals"][key])
        assert legend.locator("b").inner_text() == str(api["totals"][key])
        drawn = page.locator(f'#throughput rect[data-key="{key}"]').evaluate_all(
            "rs => rs.reduce((s, r) => s + Number(r.dataset.count), 0)"
        )
        assert drawn == api["totals"][key]

    late = page.evaluate("async () => (await fetch('api/charts/lateness?window=1h')).json()")
    runs = [r for r in app.list_runs(limit=1000) if r.finished_at is not None and r.started_at is not None]
    since = datetime.fromisoformat(late["since"]).timestamp()
    runs = [r for r in runs if r.finished_at is not None and r.finished_at.timestamp() >= since]
    lateness = [(r.started_at - r.scheduled_for).total_seconds() for r in runs if r.attempt == 1 and r.started_at]
    waits = [(r.started_at - max(r.created_at, r.due_at)).total_seconds() for r in runs if r.started_at]
    assert late["lateness"]["n"] == len(lateness) and late["wait"]["n"] == len(waits)
    for key, values in (("lateness", lateness), ("wait", waits)):
        for p in (50, 95):
            assert late[key][f"p{p}"] == pytest.approx(nearest_rank(values, p), abs=0.002)
    summary = page.locator("#lateness-summary").inner_text()
    assert f"over {len(lateness)} first attempts" in summary
    dots = page.locator('#lateness circle[data-key="p95"]').evaluate_all("cs => cs.map((c) => Number(c.dataset.value))")
    assert dots == [b["lateness"]["p95"] for b in late["buckets"] if b["lateness"]["p95"] is not None]

    backlog = page.evaluate("async () => (await fetch('api/charts/backlog')).json()")
    queues = {q["queue"]: (q["due"], q["later"], q["running"]) for q in backlog["queues"]}
    assert queues == {"mail": (3, 2, 0), "reports": (0, 1, 0), "default": (0, 0, 1)}
    mail = page.locator('#backlog .bk-row[data-queue="mail"]')
    assert mail.locator(".bk-nums").inner_text() == "3 due now · 2 later · 0 running"

    page.goto(served.url + "#/?window=15m&task=flaky")  # a task filter and another window, by URL
    page.locator("#throughput h2, section h2", has_text="task flaky").first.wait_for()
    filtered = page.evaluate("async () => (await fetch('api/charts/throughput?window=15m&task=flaky')).json()")
    assert len(filtered["buckets"]) == 15 and filtered["bucket_seconds"] == 60
    assert page.locator('.windows a[aria-current="true"]').inner_text() == "15m"


def test_every_view_by_url_with_back_forward_and_reload(
    history: dict[str, Any], page: Any, serve: Any, screenshots: Path, db_url: str
) -> None:
    app: rota.App = history["app"]
    served = serve(create_app(app))
    store = "postgres" if db_url.startswith("postgres") else "sqlite"
    views = {**VIEWS, "run": f"#/run/{history['failed']}"}
    checks = {
        "overview": "#throughput rect.mark",
        "runs": "tr[data-run]",
        "schedules": 'tr[data-schedule="reports/daily"]',
        "queues": 'tr[data-queue="mail"]',
        "workers": 'tr[data-worker="host-1:41:aa"]',
        "locks": 'tr[data-lock="nightly-report"]',
        "run": "tr.attempt",
        "schedule": "svg.strip rect",
        "worker": f'tr[data-run="{history["busy"]}"]',
    }
    for name, target in views.items():
        page.goto(served.url + target)
        page.locator(checks[name]).first.wait_for()
        page.screenshot(path=str(screenshots / f"{name}-{store}.png"), full_page=True)
    page.goto(served.url + views["schedule"])
    page.locator("svg.strip rect").first.wait_for()
    assert "Europe/Berlin" in page.locator("#schedule").inner_text()
    assert page.locator("main table").nth(0).locator("tbody tr").count() == 8  # the next ticks
    strip = page.locator("svg.strip rect").evaluate_all("rs => rs.map((r) => r.dataset.status)")
    assert strip == ["succeeded"] * 4 + ["skipped"]  # oldest first, the skipped tick included

    # Filters and pages live in the URL: back, forward and reload come back to them.
    page.goto(served.url + "#/runs")
    page.locator("tr[data-run]").first.wait_for()
    page.get_by_label("status").select_option("succeeded")
    page.wait_for_url("**#/runs?status=succeeded")
    page.get_by_label("limit").select_option("25")
    page.wait_for_url("**#/runs?status=succeeded&limit=25")
    page.locator("#older").click()
    page.wait_for_url("**before=*")
    page.locator("#runs-note", has_text="older than run").wait_for()
    paged = page.url
    first_older = page.locator("tr[data-run]").first.get_attribute("data-run")
    page.reload()
    page.locator(f'tr[data-run="{first_older}"]').wait_for()
    assert page.get_by_label("status").input_value() == "succeeded" and page.get_by_label("limit").input_value() == "25"
    page.go_back()
    page.wait_for_url("**#/runs?status=succeeded&limit=25")
    expect(page.locator("tr[data-run]")).to_have_count(25)
    expect(page.locator("#newest")).to_be_hidden()
    page.go_back()
    page.wait_for_url("**#/runs?status=succeeded")
    expect(page.get_by_label("limit")).to_have_value("50")
    page.go_forward()
    page.go_forward()
    assert page.url == paged
    page.locator(f'tr[data-run="{first_older}"]').wait_for()

    # Selecting a run is a URL too; back returns to the list as it was.
    page.locator("tr[data-run] a").first.click()
    page.locator("#detail").wait_for()
    page.go_back()
    page.wait_for_url(paged)
    page.locator(f'tr[data-run="{first_older}"]').wait_for()
    page.locator("#nav").get_by_role("link", name="Queues").click()
    page.wait_for_url("**#/queues")
    expect(page.locator("#nav a.on")).to_have_text("Queues")


def test_a_missing_id_says_so_and_never_shows_a_stale_panel(history: dict[str, Any], page: Any, serve: Any) -> None:
    served = serve(create_app(history["app"]))
    page.rota_expected.append("404")
    page.goto(f"{served.url}#/run/{history['failed']}")
    page.locator("#detail").wait_for()
    page.goto(f"{served.url}#/run/999999")  # from a run's page to one that does not exist
    page.get_by_role("heading", name="No such run").wait_for()
    assert page.locator("#detail").count() == 0 and "999999" in page.locator("main").inner_text()
    page.evaluate(f"location.hash = '#/run/{history['failed']}'")
    page.locator("#detail").wait_for()
    page.evaluate("location.hash = '#/run/999998'")  # in-page navigation too
    page.get_by_role("heading", name="No such run").wait_for()
    assert page.locator("#detail").count() == 0
    for target, heading in (
        ("#/schedule/nope", "No such schedule"),
        ("#/worker/nope", "No such worker"),
        ("#/nope", "No such page"),
    ):
        page.goto(served.url + target)
        page.get_by_role("heading", name=heading).wait_for()


CONTRAST = """() => {
  const parse = (c) => { const m = /rgba?\\(([^)]+)\\)/.exec(c || ""); if (!m) return null;
    const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
  const blend = (top, under) => [0, 1, 2].map((i) => top[i] * top[3] + under[i] * (1 - top[3])).concat([1]);
  const background = (node) => {
    const layers = [];
    for (let n = node; n && n.nodeType === 1; n = n.parentElement) {
      const c = parse(getComputedStyle(n).backgroundColor);
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    return layers.reduceRight((under, top) => blend(top, under), [255, 255, 255, 1]);
  };
  const lum = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
  const out = [];
  for (const node of document.querySelectorAll("body *")) {
    const own = [...node.childNodes].some((c) => c.nodeType === 3 && c.data.trim());
    if (!own || !node.getClientRects().length || node.closest("[hidden], option, title")) continue;
    const style = getComputedStyle(node);
    if (style.visibility === "hidden") continue;
    const isSvg = node instanceof SVGElement;
    const bg = background(isSvg ? node.closest("div, section, main, body") : node);
    const fg = blend(parse(isSvg ? style.fill : style.color), bg);
    out.push({ text: node.textContent.trim().slice(0, 40), tag: node.tagName, ratio: ratio(fg, bg) });
  }
  return out;
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_text_is_readable_in_light_and_dark(
    history: dict[str, Any], chromium: Any, serve: Any, scheme: str, screenshots: Path, db_url: str
) -> None:
    """WCAG AA: every rendered text (HTML and SVG) has a contrast of at least 4.5:1 against
    the background it is drawn on, in each colour scheme, on every view."""
    served = serve(create_app(history["app"]))
    context = chromium.new_context(viewport={"width": 1300, "height": 900}, color_scheme=scheme)
    page = context.new_page()
    store = "postgres" if db_url.startswith("postgres") else "sqlite"
    try:
        low = []
        for name, target in {**VIEWS, "run": f"#/run/{history['failed']}"}.items():
            page.goto(served.url + target)
            page.locator("main section").first.wait_for()
            page.wait_for_load_state("networkidle")
            page.wait_for_timeout(300)
            texts = page.evaluate(CONTRAST)
            assert len(texts) > 5, name
            low += [(name, t["tag"], t["text"], round(t["ratio"], 2)) for t in texts if t["ratio"] < 4.5]
            if name in ("overview", "schedule", "run"):
                page.screenshot(path=str(screenshots / f"{name}-{scheme}-{store}.png"), full_page=True)
        assert not low, low
    finally:
        context.close()


def test_a_390_px_screen_has_no_sideways_overflow_and_no_colliding_labels(
    history: dict[str, Any], chromium: Any, serve: Any, screenshots: Path, db_url: str
) -> None:
    served = serve(create_app(history["app"]))
    context = chromium.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True)
    page = context.new_page()
    store = "postgres" if db_url.startswith("postgres") else "sqlite"
    overlapping = """(selector) => {
      const boxes = [...document.querySelectorAll(selector)].map((n) => n.getBoundingClientRect()).filter((b) => b.width);
      const hits = [];
      for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
        const a = boxes[i], b = boxes[j];
        if (a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5) hits.push([i, j]);
      }
      return hits;
    }"""
    try:
        for name, target in {**VIEWS, "run": f"#/run/{history['failed']}"}.items():
            page.goto(served.url + target)
            page.locator("main section").first.wait_for()
            page.wait_for_load_state("networkidle")
            page.wait_for_timeout(300)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, (name, width)
            for labels in (".tl-tick", "#throughput text.axis", "#lateness text.axis", "#wait text.axis", "nav a"):
                assert page.evaluate(overlapping, labels) == [], (name, labels)
            page.screenshot(path=str(screenshots / f"{name}-390px-{store}.png"), full_page=True)
        page.goto(served.url + "#/")
        page.locator(".tl-tick").nth(1).wait_for()  # the timeline still has an axis, with fewer labels
    finally:
        context.close()


def test_a_held_run_is_marked_held(history: dict[str, Any], page: Any, serve: Any) -> None:
    """`held` (claimed by a worker, its handler not started) is drawn when the API has it."""
    served = serve(create_app(history["app"]))
    busy = history["busy"]
    record = history["app"].get_run(busy).to_json()
    page.goto(served.url + "#/runs?status=running")
    page.locator(f'tr[data-run="{busy}"]').wait_for()
    assert page.locator(f'tr[data-run="{busy}"] .badge.held').count() == 0
    summaries = page.evaluate("async () => (await fetch('api/runs?status=running')).json()")
    page.route("**/api/runs?status=running", lambda route: route.fulfill(json=[{**r, "held": True} for r in summaries]))
    detail = page.evaluate(f"async () => (await fetch('api/runs/{busy}')).json()")
    page.route(f"**/api/runs/{busy}", lambda route: route.fulfill(json={**detail, "held": True, "started_at": None}))
    page.reload()
    page.locator(f'tr[data-run="{busy}"] .badge.held').wait_for()
    page.goto(served.url + f"#/run/{busy}")
    page.locator("#detail .badge.held").wait_for()
    assert "its handler has not started yet" in page.locator("#detail").inner_text()
    assert record["status"] == "running"


def test_a_schedules_marks_are_drawn_when_the_api_has_them(history: dict[str, Any], page: Any, serve: Any) -> None:
    """Fields other branches add to schedules (corrupt, high_frequency) show as badges."""
    served = serve(create_app(history["app"]))
    page.goto(served.url + "#/schedules")
    page.locator('tr[data-schedule="reports/daily"]').wait_for()
    items = page.evaluate("async () => (await fetch('api/schedules')).json()")
    marked = [{**s, "corrupt": ["next_run_at"], "high_frequency": True} for s in items]
    page.route("**/api/schedules", lambda route: route.fulfill(json=marked))
    page.reload()
    schedule = page.locator('tr[data-schedule="reports/daily"]')
    schedule.locator(".badge", has_text="high frequency").wait_for()
    assert "corrupt next_run_at" in schedule.inner_text()


def test_a_runs_timeline_shows_the_wait_before_it_is_due(history: dict[str, Any], page: Any, serve: Any) -> None:
    app: rota.App = history["app"]
    (later,) = [r for r in app.list_runs(status="pending", limit=100) if r.queue == "reports"]  # due in 10 min
    served = serve(create_app(app))
    page.goto(served.url + f"#/run/{later.id}")
    page.locator("svg.attempts rect.seg.waiting").wait_for()
    assert page.locator("svg.attempts rect.seg").count() == 1  # not due yet: nothing queued, nothing ran
    assert "Not started yet." in page.locator("main").inner_text()


def test_a_schedules_page_shows_the_next_daylight_saving_change(history: dict[str, Any], page: Any, serve: Any) -> None:
    app: rota.App = history["app"]
    app.add_schedule("weekly", "ok", cron="30 2 * * 0", tz="Europe/Berlin")  # Sundays 02:30, Berlin
    served = serve(create_app(app))
    page.goto(served.url + "#/schedule/weekly")
    note = page.locator("tr.dst-row .dst").first
    note.wait_for()  # 02:30 does not exist on the spring-forward Sunday
    assert "does not exist" in note.inner_text() and "Europe/Berlin" in note.inner_text()
