"""The dashboard, JSON API and /metrics (rota.web) through Starlette's TestClient, on both
stores; and `rota dashboard` refusing a public bind without a token."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

import rota
import rota.testing
from rota.cli import main
from rota.errors import DatabaseUnavailable
from rota.models import iso
from rota.web import create_app
from rota.web.static import FILES

from .conftest import WITH_MYSQL, store_url
from .ports import free_port


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


RUN_FIELDS = {
    "id",
    "task",
    "schedule",
    "status",
    "attempt",
    "scheduled_for",
    "started_at",
    "finished_at",
    "worker",
    "error",
}
SCHEDULE_FIELDS = {"name", "task", "cron", "every", "tz", "overlap", "paused", "next_run_at", "last_run_at", "last_status",
                   "run_count", "success_count", "failure_count", "skip_count"}  # fmt: skip
XSS = "<script>alert('x')</script>"


@pytest.fixture(autouse=True)
def _no_env_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROTA_DASHBOARD_TOKEN", raising=False)


@pytest.fixture
def filled(app: rota.App) -> rota.App:
    """ok and bad runs (one each, finished), a schedule with a '/' in its name."""

    @app.task(name="ok")
    def ok(x: Any = None) -> dict[str, Any]:
        return {"fine": True}

    @app.task(name="bad")
    def bad(x: Any = None) -> None:
        raise ValueError(f"bad input {x}")

    app.add_schedule("reports/daily", "ok", every=3600)
    ok.enqueue(1)
    bad.options(queue="slow").enqueue(XSS)
    rota.testing.run_pending(app)
    return app


@pytest.fixture
def client(filled: rota.App) -> Iterator[TestClient]:
    with TestClient(create_app(filled), base_url="http://localhost") as c:
        yield c


def get(client: TestClient, path: str, status: int = 200) -> Any:
    response = client.get(path)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    return response.json()


def post(client: TestClient, path: str, status: int = 200) -> Any:
    response = client.post(path)
    assert response.status_code == status, response.text
    return response.json()


# -- reads ----------------------------------------------------------------------------------
def test_reads_have_the_cli_shapes(client: TestClient, filled: rota.App) -> None:
    stats = get(client, "/api/stats")
    assert stats["runs"]["succeeded"] == 1 and stats["runs"]["failed"] == 1 and "capacity" in stats

    schedules = get(client, "/api/schedules")
    assert [s["name"] for s in schedules] == ["reports/daily"]
    assert set(schedules[0]) >= SCHEDULE_FIELDS and schedules[0]["every"] == 3600
    assert get(client, "/api/schedules/reports/daily") == schedules[0]
    assert get(client, "/api/schedules/reports%2Fdaily")["name"] == "reports/daily"

    runs = get(client, "/api/runs")
    assert [r["task"] for r in runs] == ["bad", "ok"]
    assert all(set(r) >= RUN_FIELDS | {"args_preview", "result_preview", "corrupt", "truncated"} for r in runs)
    for summary, full in zip(runs, filled.list_runs(limit=50), strict=True):
        record = full.to_json()
        assert {k: v for k, v in summary.items() if k in record and k != "error"} == {
            k: v for k, v in record.items() if k in summary and k != "error"
        }
        links = filled.run_links(full.id)  # parents, dependents, waiting_on (as `rota run --json`)
        extra = {"due_at": iso(full.due_at)}  # the detail page's timeline reads it
        assert get(client, f"/api/runs/{full.id}") == {**extra, **record, **links, "corrupt": [], "raw": {}}
    assert runs[0]["error"] == {"type": "ValueError", "message": f"bad input {XSS}"}
    assert runs[1]["result_preview"] == '{"fine":true}' and runs[1]["args_preview"] == "[1]"

    detail = get(client, f"/api/runs/{runs[0]['id']}")
    assert detail["error"]["type"] == "ValueError" and "Traceback" in detail["error"]["traceback"]
    assert [a["status"] for a in detail["attempts"]] == ["failed"]
    assert detail["attempts"][0]["error"]["message"] == f"bad input {XSS}"

    workers = get(client, "/api/workers")
    assert workers == [w.to_json() for w in filled.list_workers()]
    with filled.lock("nightly-report", ttl=30):
        (held,) = get(client, "/api/locks")
    assert held["name"] == "nightly-report" and held["held"] is True and set(held) >= {"owner", "token", "expires_at"}


def test_timeline_lists_recent_runs_with_start_and_finish(client: TestClient, filled: rota.App) -> None:
    pending = filled.get_task("ok").options(delay=60).enqueue()
    data = get(client, "/api/timeline")
    assert data["minutes"] == 60 and data["since"] < data["until"] and data["truncated"] is False
    assert [r["task"] for r in data["runs"]] == ["ok", "bad"]  # oldest first; the pending run has no bar
    assert pending.id not in {r["id"] for r in data["runs"]}
    assert set(data["runs"][0]) == {"id", "task", "schedule", "status", "attempt", "scheduled_for", "started_at",
                                    "finished_at", "worker"}  # fmt: skip
    assert all(r["started_at"] <= r["finished_at"] for r in data["runs"])
    assert get(client, "/api/timeline?minutes=5")["minutes"] == 5
    assert "minutes must be an integer from 1 to 1440, got '0'" in get(client, "/api/timeline?minutes=0", 400)["error"]


def test_run_filters_and_paging(client: TestClient, filled: rota.App) -> None:
    bad, ok = get(client, "/api/runs")
    assert [r["id"] for r in get(client, "/api/runs?status=failed")] == [bad["id"]]
    assert [r["id"] for r in get(client, "/api/runs?task=ok")] == [ok["id"]]
    assert [r["id"] for r in get(client, "/api/runs?queue=slow")] == [bad["id"]]
    assert get(client, "/api/runs?schedule=reports/daily") == []
    assert [r["id"] for r in get(client, "/api/runs?limit=1")] == [bad["id"]]
    assert [r["id"] for r in get(client, f"/api/runs?before={bad['id']}")] == [ok["id"]]
    assert len(get(client, "/api/runs?status=&task=")) == 2  # an empty filter is no filter
    filled.trigger("reports/daily")
    assert [r["schedule"] for r in get(client, "/api/runs?schedule=reports/daily")] == ["reports/daily"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("status=faild", "unknown status 'faild' (did you mean 'failed'?)"),
        ("limit=abc", "limit must be an integer from 1 to 1000, got 'abc'"),
        ("limit=0", "limit must be an integer from 1 to 1000, got '0'"),
        ("before=-3", "before must be an integer from 1 to"),
        ("statsu=failed", "unknown query parameter 'statsu' (did you mean 'status'?)"),
    ],
)
def test_bad_input_is_400_naming_the_value(client: TestClient, query: str, message: str) -> None:
    assert message in get(client, f"/api/runs?{query}", 400)["error"]


def test_not_found_and_unknown_routes_are_json(client: TestClient) -> None:
    assert get(client, "/api/runs/424242", 404) == {"error": "no run with id '424242'"}
    assert "run ids are integers" in get(client, "/api/runs/abc", 404)["error"]
    assert (
        "no schedule named 'reports/daly' (did you mean 'reports/daily'?)"
        in get(client, "/api/schedules/reports/daly", 404)["error"]
    )
    assert get(client, "/api/nothing", 404) == {"error": "Not Found"}
    response = client.delete("/api/runs/1")
    assert response.status_code == 405 and response.json() == {"error": "Method Not Allowed"}


def test_store_calls_run_off_the_event_loop(
    client: TestClient, filled: rota.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []
    real = filled.stats

    def stats() -> dict[str, Any]:
        try:
            asyncio.get_running_loop()
            seen.append(True)
        except RuntimeError:
            seen.append(False)
        return real()

    monkeypatch.setattr(filled, "stats", stats)
    get(client, "/api/stats")
    client.get("/metrics")
    assert seen == [False, False]


# -- actions ----------------------------------------------------------------------------------
def test_schedule_actions(client: TestClient, filled: rota.App) -> None:
    paused = post(client, "/api/schedules/reports/daily/pause")
    assert paused["name"] == "reports/daily" and paused["paused"] is True
    resumed = post(client, "/api/schedules/reports/daily/resume")
    assert resumed["paused"] is False and resumed["next_run_at"] is not None

    run = post(client, "/api/schedules/reports/daily/trigger", 201)
    assert set(run) >= RUN_FIELDS and run["schedule"] == "reports/daily" and run["status"] == "pending"
    refused = post(client, "/api/schedules/reports/daily/trigger", 409)
    assert f"schedule 'reports/daily' has run {run['id']} pending" in refused["error"]

    for action in ("pause", "resume", "trigger"):
        assert "no" in post(client, f"/api/schedules/nope/{action}", 404)["error"]
    assert client.get("/api/schedules/reports/daily/pause").status_code == 404  # actions are POST only


def test_run_actions(client: TestClient, filled: rota.App) -> None:
    later = filled.get_task("ok").options(delay=3600).enqueue()
    retry_pending = post(client, f"/api/runs/{later.id}/retry", 409)
    assert retry_pending == {"error": f"run {later.id} is still pending; wait for it or cancel it before retrying"}

    cancelled = post(client, f"/api/runs/{later.id}/cancel")
    assert cancelled["id"] == later.id and cancelled["status"] == "cancelled"
    assert post(client, f"/api/runs/{later.id}/cancel")["status"] == "cancelled"  # idempotent

    again = post(client, f"/api/runs/{later.id}/retry", 201)
    assert again["retry_of"] == later.id and again["status"] == "pending" and again["task"] == "ok"
    assert filled.get_run(again["id"]).status == "pending"

    for action in ("cancel", "retry"):
        assert post(client, f"/api/runs/999999/{action}", 404) == {"error": "no run with id '999999'"}


def test_actions_from_another_site_are_refused(client: TestClient) -> None:
    for headers in ({"origin": "https://evil.example"}, {"sec-fetch-site": "cross-site"}):
        response = client.post("/api/schedules/reports/daily/pause", headers=headers)
        assert response.status_code == 403 and response.json() == {"error": "cross-site request refused"}
    same = {"origin": "http://localhost", "sec-fetch-site": "same-origin"}
    assert client.post("/api/schedules/reports/daily/pause", headers=same).status_code == 200
    assert (
        client.get("/api/stats", headers={"sec-fetch-site": "cross-site"}).status_code == 200
    )  # reads are not actions


# -- auth -------------------------------------------------------------------------------------
def test_token_required_accepted_and_refused(filled: rota.App) -> None:
    client = TestClient(create_app(filled, token="s3cret-token"))
    for path in (
        "/api/stats",
        "/api/runs",
        "/api/runs/1",
        "/api/schedules",
        "/api/workers",
        "/api/locks",
        "/api/limits",
        "/api/timeline",
        "/metrics",
    ):
        response = client.get(path)
        assert response.status_code == 401, path
        assert "Authorization: Bearer" in response.json()["error"] and response.headers["www-authenticate"] == "Bearer"
    assert client.post("/api/schedules/reports/daily/trigger").status_code == 401
    assert client.get("/api/stats", headers={"authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/api/stats", headers={"authorization": "Basic s3cret-token"}).status_code == 401

    good = {"authorization": "Bearer s3cret-token"}
    assert client.get("/api/stats", headers=good).status_code == 200
    assert client.get("/metrics", headers=good).status_code == 200
    assert client.post("/api/schedules/reports/daily/pause", headers=good).json()["paused"] is True
    assert client.get("/healthz").json() == {"status": "ok"}  # open, for load balancers

    page = client.get("/")
    assert page.status_code == 401 and '<form method="post" action="login">' in page.text
    assert client.get("/", headers=good).status_code == 200


def test_browser_signs_in_once_and_keeps_a_cookie(filled: rota.App) -> None:
    client = TestClient(create_app(filled, token="s3cret-token"))
    wrong = client.get("/?token=nope", follow_redirects=False)
    assert wrong.status_code == 401 and "not right" in wrong.text and "rota_dashboard" not in client.cookies

    link = client.get("/?token=s3cret-token", follow_redirects=False)
    assert link.status_code == 303 and link.headers["location"] == "./"  # the token leaves the address bar
    cookie = link.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "s3cret-token" not in cookie
    assert client.get("/").status_code == 200
    assert client.get("/api/stats").status_code == 200

    form = TestClient(create_app(filled, token="s3cret-token"))
    assert form.post("/login", data={"token": "nope"}).status_code == 401
    signed = form.post("/login", data={"token": "s3cret-token"}, follow_redirects=False)
    assert signed.status_code == 303 and form.get("/api/runs").status_code == 200
    form.cookies.set("rota_dashboard", "forged")
    assert form.get("/api/runs").status_code == 401


def test_token_from_the_environment(filled: rota.App, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROTA_DASHBOARD_TOKEN", "from-env")
    client = TestClient(create_app(filled))
    assert client.get("/api/stats").status_code == 401
    assert client.get("/api/stats", headers={"authorization": "Bearer from-env"}).status_code == 200
    with pytest.raises(rota.ConfigurationError, match="must not be empty"):
        create_app(filled, token=" ")


def test_allowed_hosts_refuse_other_names(filled: rota.App) -> None:
    web = create_app(filled, allowed_hosts=["localhost", "127.0.0.1", "::1"])
    for host in ("localhost:8000", "127.0.0.1", "[::1]:8000"):
        assert TestClient(web, base_url=f"http://{host}").get("/api/stats").status_code == 200, host
    refused = TestClient(web, base_url="http://rebound.example:8000").get("/api/stats")
    assert refused.status_code == 403 and "host 'rebound.example' is not allowed" in refused.json()["error"]


# -- the page ---------------------------------------------------------------------------------
def static_sources(client: TestClient) -> dict[str, str]:
    """The page's own scripts and style sheet, as served."""
    sources = {}
    for name in sorted(FILES):
        response = client.get(f"/static/{name}")
        assert response.status_code == 200, name
        kind = "text/javascript" if name.endswith(".js") else "text/css"
        assert response.headers["content-type"].startswith(kind), name
        sources[name] = response.text
    return sources


def test_page_is_self_contained_and_injects_no_user_data(client: TestClient) -> None:
    response = client.get("/")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    html = response.text
    csp = response.headers["content-security-policy"]
    assert "script-src 'self';" in csp and "style-src 'self';" in csp and "unsafe-inline" not in csp
    assert re.findall(r"<script[^>]*>", html) == ['<script type="module" src="static/app.js">']  # no inline code
    assert "<style" not in html and " style=" not in html and " on" + "click=" not in html
    sources = static_sources(client)
    everything = html + "".join(sources.values())
    assert (
        "http://" not in everything.replace("http://www.w3.org/2000/svg", "") and "https://" not in everything
    )  # no CDN
    assert "alert(" not in html  # no run data is rendered on the server
    for path in ("api/stats", "api/schedules", "api/runs", "api/timeline", "api/workers", "api/locks", "api/charts/throughput",
                 "api/charts/lateness", "api/charts/backlog", "/ticks", "/cancel", "/retry", "/trigger"):  # fmt: skip
        assert path in everything, path
    imports = set(re.findall(r'from "\./([a-z]+\.js)"', everything))
    assert imports and imports <= FILES  # every module the page imports is served
    assert response.headers["x-content-type-options"] == "nosniff"


def test_only_the_pages_own_files_are_served(client: TestClient) -> None:
    for name in ("../api.py", "nope.js", "dashboard.html", "%2e%2e%2fapi.py"):
        assert client.get(f"/static/{name}").status_code == 404, name


def test_page_script_only_writes_text(client: TestClient) -> None:
    scripts = {k: v for k, v in static_sources(client).items() if k.endswith(".js")}
    for name, script in scripts.items():
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "DOMParser",
                     "setAttribute(\"style", "cssText"):  # fmt: skip
            assert sink not in script, (name, sink)
    core = scripts["core.js"]
    assert "document.createTextNode(String(child))" in core  # el(), svg(): every value becomes a text node
    assert sum(script.count("el(") for script in scripts.values()) > 100  # ... and the page is built with them


def test_user_data_in_the_api_stays_inert(client: TestClient) -> None:
    raw = client.get("/api/runs?task=bad").text
    assert "<script>" not in raw and "\\u003cscript\\u003e" in raw
    (run,) = json.loads(raw)
    assert json.loads(run["args_preview"]) == [XSS]
    detail = client.get(f"/api/runs/{run['id']}").text
    assert "<script>" not in detail and json.loads(detail)["args"] == [XSS]


# -- /metrics ---------------------------------------------------------------------------------
def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_parse_and_count(client: TestClient, filled: rota.App) -> None:
    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    samples = metric_samples(response.text)
    assert samples[("rota_up", ())] == 1
    assert samples[("rota_runs", (("status", "failed"),))] == 1
    assert samples[("rota_runs", (("status", "succeeded"),))] == 1
    assert samples[("rota_runs", (("status", "pending"),))] == 0
    assert ("rota_workers_alive", ()) in samples and ("rota_workers_capacity", ()) in samples
    label = (("schedule", "reports/daily"),)
    assert samples[("rota_schedule_runs_total", label)] == 0
    assert samples[("rota_schedule_paused", label)] == 0
    next_run = filled.get_schedule("reports/daily").next_run_at
    assert next_run is not None and samples[("rota_schedule_next_run_timestamp_seconds", label)] == next_run.timestamp()

    filled.trigger("reports/daily")
    rota.testing.run_pending(filled)
    samples = metric_samples(client.get("/metrics").text)
    assert samples[("rota_schedule_runs_total", label)] == 1
    assert samples[("rota_schedule_successes_total", label)] == 1
    assert samples[("rota_schedule_failures_total", label)] == 0
    assert ("rota_schedule_last_run_timestamp_seconds", label) in samples


def test_metrics_say_down_when_the_database_is(
    client: TestClient, filled: rota.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unavailable() -> None:
        raise DatabaseUnavailable("database unavailable")

    monkeypatch.setattr(filled, "stats", unavailable)
    samples = metric_samples(client.get("/metrics").text)
    assert samples == {("rota_up", ()): 0}
    assert get(client, "/api/stats", 503) == {"error": "database unavailable"}


# -- rota dashboard ---------------------------------------------------------------------------
def dashboard_cli(db_url: str, *args: str, env: dict[str, str | None] | None = None) -> tuple[int, str]:
    result = CliRunner(env={"ROTA_DASHBOARD_TOKEN": None, **(env or {})}).invoke(
        main, ["--database-url", db_url, "dashboard", "tests.apps.basic:app", *args]
    )
    return result.exit_code, result.output


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    import uvicorn

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda web, **options: calls.append({"web": web, **options}))
    return calls


def test_cli_refuses_a_public_bind_without_a_token(db_url: str, served: list[dict[str, Any]]) -> None:
    for host in ("0.0.0.0", "192.0.2.7", "::", "example.com"):
        code, out = dashboard_cli(db_url, "--host", host)
        assert code == 1, out
        assert f"refusing to serve the dashboard on '{host}' without a token" in out
        assert "ROTA_DASHBOARD_TOKEN" in out and "--token" in out
    assert served == []


def test_cli_serves_with_a_token_or_on_loopback(db_url: str, served: list[dict[str, Any]]) -> None:
    port = free_port()
    code, out = dashboard_cli(
        db_url, "--host", "0.0.0.0", "--port", str(port), env={"ROTA_DASHBOARD_TOKEN": "t0ken-of-16-chars-or-more"}
    )
    assert code == 0, out
    assert f"on http://0.0.0.0:{port}/ (sign in with the token)" in out and "t0ken-of-16-chars-or-more" not in out
    assert served[-1]["host"] == "0.0.0.0" and served[-1]["port"] == port and served[-1]["access_log"] is False
    public = TestClient(served[-1]["web"], base_url="http://rota.example")  # any Host: the token guards it
    assert public.get("/").status_code == 401
    assert public.get("/", headers={"authorization": "Bearer t0ken-of-16-chars-or-more"}).status_code == 200

    port = free_port()  # through the variable: the default 8000 may be taken on this machine
    code, out = dashboard_cli(db_url, env={"ROTA_DASHBOARD_PORT": str(port)})
    assert code == 0 and f"on http://127.0.0.1:{port}/ (no token: loopback only)" in out, out
    local = served[-1]["web"]
    assert TestClient(local, base_url=f"http://127.0.0.1:{port}").get("/").status_code == 200
    assert TestClient(local, base_url="http://rebound.example").get("/").status_code == 403


def test_cli_allowed_hosts_from_the_flag_or_the_variable(db_url: str, served: list[dict[str, Any]]) -> None:
    def answers(web: Any, host: str) -> int:
        return int(TestClient(web, base_url=f"http://{host}").get("/").status_code)  # the App is closed: no store

    port = str(free_port())
    flags = ("--port", port, "--allowed-host", "dash.internal", "--allowed-host", "localhost")
    code, out = dashboard_cli(db_url, *flags, env={"ROTA_DASHBOARD_ALLOWED_HOSTS": "from-env.example"})
    assert code == 0, out
    web = served[-1]["web"]  # the flag wins over the variable
    assert [answers(web, h) for h in ("dash.internal", "localhost", "from-env.example", "rebound.example")] == [
        200, 200, 403, 403,
    ]  # fmt: skip
    any_host = {
        "ROTA_DASHBOARD_ALLOWED_HOSTS": "from-env.example,*",
        "ROTA_DASHBOARD_TOKEN": "t0ken-of-16-chars-or-more",
    }
    code, out = dashboard_cli(db_url, "--port", port, env=any_host)  # '*' needs a token (tests/test_web_peers.py)
    assert code == 0, out
    assert answers(served[-1]["web"], "anything.example") == 401  # answered: the token guards it
    code, out = dashboard_cli(db_url, "--port", port, env={"ROTA_DASHBOARD_ALLOWED_HOSTS": "from-env.example"})
    assert code == 0 and answers(served[-1]["web"], "from-env.example") == 200
    assert answers(served[-1]["web"], "127.0.0.1") == 403  # the names replace the defaults

    before = len(served)
    code, out = dashboard_cli(db_url, "--port", port, "--allowed-host", "a b")
    assert code == 2 and "--allowed-host" in out and "'a b'" in out, out
    code, out = dashboard_cli(db_url, "--port", port, env={"ROTA_DASHBOARD_ALLOWED_HOSTS": "evil/path"})
    assert code == 1 and "ROTA_DASHBOARD_ALLOWED_HOSTS='evil/path' is not valid" in out, out
    assert len(served) == before
