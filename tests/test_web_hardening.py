"""The dashboard against hostile and broken input: sessions that expire and end, throttled
sign-ins, bounded request bodies, Host names, run ids and filters that cannot be served, and
rows a listing must survive (corrupt JSON, dates past year 9999) on both stores."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import rota
import rota.testing
from rota.web import create_app
from rota.web.auth import COOKIE, LOGIN_BODY_LIMIT, MAX_BODY
from rota.web.openapi import document
from rota.web.sessions import FREE_FAILURES, LoginThrottle, Sessions

from . import mysql_db
from .conftest import WITH_MYSQL, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


TOKEN = "s3cret-token"
LOCAL = "http://localhost"


@pytest.fixture(autouse=True)
def _no_env_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROTA_DASHBOARD_TOKEN", raising=False)


@pytest.fixture
def filled(app: rota.App) -> rota.App:
    @app.task(name="ok")
    def ok(x: Any = None) -> str:
        return "r" * 5000

    @app.task(name="bad")
    def bad(x: Any = None) -> None:
        raise ValueError("m" * 5000)

    app.add_schedule("reports/daily", "ok", every=3600)
    ok.enqueue("a" * 5000)
    bad.enqueue(1)
    ok.enqueue(2)
    rota.testing.run_pending(app)
    return app


def raw_sql(app: rota.App, sql: str, **params: Any) -> None:
    """Write a row no API would write (a damaged or hand-edited database). On PostgreSQL an
    UPDATE of a run is made in the history table too (a succeeded run is kept there). On
    MySQL/MariaDB as a hand edit would, without strict mode (mysql_db.execute)."""
    store: Any = app.store
    if store.dialect == "mysql":
        mysql_db.execute(app.database_url, sql.replace(":id", str(int(params["id"]))))
        return
    with store._tx() as s:
        s.q_text(sql.replace(":id", store._p("id")), **params)
        if store.dialect == "postgresql" and sql.startswith("UPDATE rota_runs "):
            s.q_text(sql.replace(":id", store._p("id")).replace("UPDATE rota_runs ", "UPDATE rota_history "), **params)


# -- rows a listing must survive -----------------------------------------------------------
def test_corrupt_json_and_far_future_dates_are_shown_not_fatal(filled: rota.App) -> None:
    first, bad, last = sorted(int(r.id) for r in filled.list_runs())
    far = {"postgresql": "finished_at + interval '100000 years'", "mysql": mysql_db.ZERO_DATE}.get(
        filled.store.dialect, "finished_at + 1e12"
    )
    raw_sql(
        filled, f"UPDATE rota_runs SET args = '[1,', result = '{{nope', finished_at = {far} WHERE id = :id", id=first
    )
    raw_sql(filled, "UPDATE rota_runs SET error = 'not json' WHERE id = :id", id=bad)
    client = TestClient(create_app(filled), base_url=LOCAL)

    runs = {r["id"]: r for r in client.get("/api/runs").json()}
    assert runs[str(first)]["corrupt"] == ["finished_at", "args", "result"] and runs[str(first)]["finished_at"] is None
    assert runs[str(first)]["truncated"] == [] and runs[str(first)]["args_preview"] == "[1,"
    assert runs[str(bad)]["corrupt"] == ["error"] and runs[str(bad)]["error"] == {
        "type": "corrupt",
        "message": "not json",
    }
    assert runs[str(last)]["corrupt"] == [] and runs[str(last)]["status"] == "succeeded"

    detail = client.get(f"/api/runs/{first}").json()
    assert detail["corrupt"] == ["finished_at", "args", "result"] and detail["args"] is None
    assert detail["raw"] == {"args": "[1,", "result": "{nope"} and detail["kwargs"] == {}
    assert client.get(f"/api/runs/{bad}").json()["raw"] == {"error": "not json"}
    timeline = client.get("/api/timeline")
    assert timeline.status_code == 200 and str(last) in {r["id"] for r in timeline.json()["runs"]}
    assert client.get("/api/stats").status_code == 200


def test_a_damaged_run_can_be_cancelled_but_not_retried(filled: rota.App) -> None:
    later = filled.get_task("ok").options(delay=3600).enqueue(1)
    done = filled.list_runs(status="succeeded")[0]
    for run_id in (later.id, done.id):
        raw_sql(filled, "UPDATE rota_runs SET kwargs = '{' WHERE id = :id", id=int(run_id))
    client = TestClient(create_app(filled), base_url=LOCAL)
    cancelled = client.post(f"/api/runs/{later.id}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["corrupt"] == ["kwargs"]
    refused = client.post(f"/api/runs/{done.id}/retry")
    assert refused.status_code == 409
    assert refused.json()["error"] == f"run {done.id} cannot be retried: its stored kwargs are not valid JSON"


def test_listings_and_the_timeline_never_decode_whole_runs(filled: rota.App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The list and the timeline read their own columns (web_* queries), not Run records."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a whole-run read")

    monkeypatch.setattr(type(filled.store), "list_runs", refuse)
    monkeypatch.setattr(type(filled.store), "get_run", refuse)
    client = TestClient(create_app(filled), base_url=LOCAL)
    assert len(client.get("/api/runs").json()) == 3
    assert len(client.get("/api/timeline").json()["runs"]) == 3
    assert client.get("/api/runs/1").json()["id"] == "1"


def test_lists_are_summaries_and_the_detail_is_whole(filled: rota.App) -> None:
    big = filled.get_task("ok").enqueue("x" * 1_000_000)
    client = TestClient(create_app(filled), base_url=LOCAL)
    listing = client.get("/api/runs")
    assert listing.status_code == 200 and len(listing.content) < 10_000
    (summary,) = [r for r in listing.json() if r["id"] == big.id]
    assert summary["truncated"] == ["args"] and len(summary["args_preview"]) == 200
    assert summary["args_preview"].endswith("…") and "args" not in summary
    (done,) = [r for r in listing.json() if r["task"] == "bad"]
    assert done["truncated"] == ["error"] and done["error"]["type"] == "ValueError"
    assert done["error"]["message"] == "m" * 199 + "…"
    assert client.get(f"/api/runs/{big.id}").json()["args"] == ["x" * 1_000_000]


# -- input the API refuses ---------------------------------------------------------------------
@pytest.mark.parametrize("run_id", ["9223372036854775808", "99999999999999999999999", "abc", "0", "-1", "1.5", "１"])
def test_run_ids_that_cannot_exist_are_404(filled: rota.App, run_id: str) -> None:
    client = TestClient(create_app(filled), base_url=LOCAL)
    for method, path in (("GET", ""), ("POST", "/cancel"), ("POST", "/retry")):
        response = client.request(method, f"/api/runs/{run_id}{path}")
        assert response.status_code == 404, (method, path, response.text)
        assert "run ids are integers from 1 to 9223372036854775807" in response.json()["error"]


@pytest.mark.parametrize("name", ["status", "task", "schedule", "queue"])
def test_a_nul_in_a_filter_is_400_naming_it(filled: rota.App, name: str) -> None:
    client = TestClient(create_app(filled), base_url=LOCAL)
    response = client.get(f"/api/runs?{name}=a%00b")
    assert response.status_code == 400
    assert response.json()["error"].startswith(f"{name} must not contain a NUL character")


def test_a_nul_in_a_schedule_name_is_400(filled: rota.App) -> None:
    client = TestClient(create_app(filled), base_url=LOCAL)
    for method, path in (("GET", ""), ("POST", "/pause"), ("POST", "/trigger")):
        response = client.request(method, f"/api/schedules/re%00ports{path}")
        assert response.status_code == 400 and "schedule name must not contain a NUL" in response.json()["error"]
    assert client.get("/api/runs?before=99999999999999999999999").status_code == 400


# -- Host names ------------------------------------------------------------------------------
def test_without_a_token_only_loopback_hosts_are_answered(filled: rota.App) -> None:
    web = create_app(filled)
    for host in ("localhost:8000", "127.0.0.1", "[::1]:8000"):
        assert TestClient(web, base_url=f"http://{host}").get("/api/stats").status_code == 200, host
    for host in ("rebound.example", "localhost.rebound.example", "10.0.0.1"):
        response = TestClient(web, base_url=f"http://{host}").get("/api/stats")
        assert response.status_code == 403 and "is not allowed here" in response.json()["error"], host
    assert TestClient(create_app(filled, allowed_hosts=["*"]), base_url="http://any.example").get("/healthz").is_success
    named = create_app(filled, allowed_hosts=["rota.internal"])
    assert TestClient(named, base_url="http://rota.internal:80").get("/api/stats").status_code == 200
    assert TestClient(named, base_url=LOCAL).get("/api/stats").status_code == 403
    with_token = create_app(filled, token=TOKEN)  # the token guards it: any name
    assert TestClient(with_token, base_url="http://rota.example").get("/healthz").status_code == 200


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"allowed_hosts": "localhost"}, "must be a list of host names"),
        ({"allowed_hosts": ["http://x/"]}, "must be host names like 'localhost'"),
        ({"max_body": 10}, "max_body must be an integer of at least"),
        ({"session_ttl": 0}, "session_ttl must be from 60"),
    ],
)
def test_bad_options_are_refused_at_creation(filled: rota.App, options: dict[str, Any], message: str) -> None:
    with pytest.raises(rota.ConfigurationError, match=message):
        create_app(filled, **options)


# -- request bodies --------------------------------------------------------------------------
async def call(web: Any, path: str, headers: list[tuple[bytes, bytes]], chunks: int) -> tuple[int, int]:
    """POST `chunks` chunks of 64 KiB to `path` through ASGI: (status, chunks the app read)."""
    read = 0
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal read
        read += 1
        return {"type": "http.request", "body": b"t" * 65536, "more_body": read < chunks}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    scope = {"type": "http", "method": "POST", "path": path, "raw_path": path.encode(), "root_path": "",
             "query_string": b"", "headers": [(b"host", b"localhost"), *headers], "client": ("127.0.0.1", 5),
             "server": ("localhost", 80), "scheme": "http", "http_version": "1.1", "asgi": {"version": "3.0"}}  # fmt: skip
    await web(scope, receive, send)
    return status, read


@pytest.mark.parametrize("token", [None, TOKEN])
def test_a_huge_body_is_refused_before_it_is_read(filled: rota.App, token: str | None) -> None:
    web = create_app(filled, token=token)
    declared = [(b"content-length", b"200000000"), (b"content-type", b"application/x-www-form-urlencoded")]
    assert asyncio.run(call(web, "/login", declared, 3052)) == (413, 0)
    assert asyncio.run(call(web, "/api/schedules/reports/daily/pause", declared, 3052)) == (413, 0)
    # Chunked (no length said): read up to the limit at most; only the sign-in form has a body.
    status, read = asyncio.run(call(web, "/login", [], 3052))
    assert (status, read) == ((413, 1) if token else (303, 0))
    status, read = asyncio.run(call(web, "/api/runs/999999/cancel", [], 3052))
    assert status in (401, 404) and read <= MAX_BODY // 65536 + 1


def test_a_sign_in_form_past_its_limit_is_413(filled: rota.App) -> None:
    client = TestClient(create_app(filled, token=TOKEN))
    response = client.post("/login", data={"token": "x" * (LOGIN_BODY_LIMIT + 10)})
    assert response.status_code == 413 and "sign-in form too large" in response.json()["error"]


# -- sessions --------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def signed_in(web: Any, token: str = TOKEN) -> TestClient:
    client = TestClient(web)
    response = client.post("/login", data={"token": token}, follow_redirects=False)
    assert response.status_code == 303, response.text
    return client


def test_a_session_is_signed_expires_and_never_holds_the_token(filled: rota.App) -> None:
    web = create_app(filled, token=TOKEN, session_ttl=600)
    clock = Clock()
    web.state.sessions.clock = clock
    client = signed_in(web)
    cookie = client.cookies[COOKIE]
    version, issued, expires, nonce, _signature = cookie.split(".")
    assert version == "v1" and int(expires) - int(issued) == 600 and TOKEN not in cookie
    assert signed_in(web).cookies[COOKIE].split(".")[3] != nonce  # a new nonce per sign-in
    assert client.get("/api/stats").status_code == 200
    clock.now += 599
    assert client.get("/api/stats").status_code == 200
    clock.now += 2
    assert client.get("/api/stats").status_code == 401 and client.get("/").status_code == 401
    forged = cookie.replace(f".{expires}.", f".{int(expires) + 10**6}.")
    clock.now -= 2
    client.cookies.set(COOKIE, forged)
    assert client.get("/api/stats").status_code == 401


def test_a_new_token_ends_every_session(filled: rota.App) -> None:
    cookie = signed_in(create_app(filled, token=TOKEN)).cookies[COOKIE]
    same = TestClient(create_app(filled, token=TOKEN), cookies={COOKIE: cookie})
    assert same.get("/api/stats").status_code == 200  # a restart with the same token keeps sessions
    rotated = TestClient(create_app(filled, token="a-new-token"), cookies={COOKIE: cookie})
    assert rotated.get("/api/stats").status_code == 401


def test_sign_out_ends_the_session(filled: rota.App) -> None:
    web = create_app(filled, token=TOKEN)
    client = signed_in(web)
    cookie = client.cookies[COOKIE]
    page = client.get("/")
    assert page.status_code == 200 and 'action="logout"' in page.text
    out = client.post("/logout", follow_redirects=False)
    assert out.status_code == 303 and COOKIE not in client.cookies
    replay = TestClient(web, cookies={COOKIE: cookie})  # the old cookie, kept by someone
    assert replay.get("/api/stats").status_code == 401
    assert 'action="logout"' not in TestClient(create_app(filled), base_url=LOCAL).get("/").text


def test_wrong_tokens_are_throttled_per_client_and_logged(filled: rota.App, caplog: pytest.LogCaptureFixture) -> None:
    web = create_app(filled, token=TOKEN)
    clock = Clock()
    web.state.throttle.clock = clock
    client = TestClient(web)
    with caplog.at_level(logging.WARNING, logger="rota.web"):
        for _ in range(FREE_FAILURES):
            assert client.post("/login", data={"token": "wrong"}).status_code == 401
    assert caplog.messages[-1] == f"dashboard sign-in failed from testclient ({FREE_FAILURES} in a row)"
    refused = client.post("/login", data={"token": TOKEN})  # even the right token waits
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1" and "Try again in 1 s" in refused.text
    assert client.get(f"/?token={TOKEN}").status_code == 429
    clock.now += 1.01
    assert client.post("/login", data={"token": "wrong"}).status_code == 401
    assert client.post("/login", data={"token": TOKEN}).headers["retry-after"] == "2"  # doubled
    clock.now += 2.01
    assert client.post("/login", data={"token": TOKEN}, follow_redirects=False).status_code == 303
    assert client.post("/login", data={"token": "wrong"}).status_code == 401  # success cleared the count


def test_wrong_bearer_tokens_are_throttled_too(filled: rota.App) -> None:
    web = create_app(filled, token=TOKEN)
    clock = Clock()
    web.state.throttle.clock = clock
    client = TestClient(web)
    wrong, right = {"authorization": "Bearer wrong"}, {"authorization": f"Bearer {TOKEN}"}
    assert [client.get("/api/stats", headers=wrong).status_code for _ in range(FREE_FAILURES)] == [401] * FREE_FAILURES
    refused = client.get("/api/stats", headers=right)
    assert refused.status_code == 429 and refused.json() == {"error": "too many wrong tokens: try again in 1 s"}
    clock.now += 1.01
    assert client.get("/api/stats", headers=right).status_code == 200
    assert client.get("/healthz", headers=wrong).status_code == 200  # never guarded


def test_the_throttle_forgets_quiet_clients_and_stays_bounded() -> None:
    clock = Clock()
    throttle = LoginThrottle(clock=clock)
    for _ in range(10):
        throttle.failed("a")
    assert throttle.wait("a") == 128 and throttle.wait("b") == 0
    clock.now += 3601
    assert throttle.wait("a") == 0
    with pytest.raises(ValueError, match="positive number of seconds"):
        Sessions(TOKEN, ttl=0)


# -- the description --------------------------------------------------------------------------
def test_openapi_describes_every_api_route(filled: rota.App) -> None:
    from rota.web import api, bulk, charts, operate, pages

    client = TestClient(create_app(filled), base_url=LOCAL)
    served = client.get("/api/openapi.json").json()
    assert served == document() and served["openapi"] == "3.1.0"
    every = [*api.routes(), *charts.routes(), *pages.routes(), *bulk.routes(), *operate.routes()]
    routes = {route.path.replace(":path", "") for route in every}  # type: ignore[attr-defined]
    assert routes == set(served["paths"])


def test_a_real_server_refuses_a_200_mb_sign_in_at_once(filled: rota.App) -> None:
    """Through uvicorn on a socket: the 413 comes back after the headers, while the client
    has sent almost none of the 200 MB it announced."""
    import socket

    from tests.browser.served import Served

    served = Served(create_app(filled, token=TOKEN))
    try:
        with socket.create_connection(("127.0.0.1", served.port), timeout=10) as conn:
            head = (
                "POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                "Content-Length: 200000000\r\n\r\n"
            )
            conn.sendall(head.encode() + b"token=" + b"x" * 65536)
            answer = ""
            while "}" not in answer and (chunk := conn.recv(4096)):
                answer += chunk.decode(errors="replace")
        assert answer.startswith("HTTP/1.1 413 "), answer
        assert "request body too large" in answer
    finally:
        served.stop()


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://rota:hunter2@127.0.0.1:1/nowhere",
        "postgresql://rota@127.0.0.1:1/nowhere?password=hunter2",
    ],
)
def test_no_password_in_any_answer(url: str) -> None:
    """The header's label, 503 bodies and /metrics never show the database password."""
    app = rota.App(url)
    try:
        client = TestClient(create_app(app), base_url=LOCAL, raise_server_exceptions=False)
        bodies = [client.get(path) for path in ("/api/stats", "/api/runs", "/api/runs/1", "/api/timeline", "/metrics")]
        assert [b.status_code for b in bodies] == [503, 503, 503, 503, 200]
        assert all("hunter2" not in b.text for b in bodies), [b.text for b in bodies]
        assert "***" in bodies[0].text or "rota@127.0.0.1" in bodies[0].text
    finally:
        app.close()
