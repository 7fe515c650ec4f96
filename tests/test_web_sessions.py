"""Dashboard sessions against planted cookies and restarts: a cookie that is not ours is no
session on every route, and a signed-out session stays signed out across dashboards sharing
the database (on both stores)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import rota
from rota.web import create_app
from rota.web.auth import COOKIE

from .conftest import WITH_MYSQL, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


TOKEN = "s3cret-token"


@pytest.fixture(autouse=True)
def _no_env_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROTA_DASHBOARD_TOKEN", raising=False)


def signed_in(web: Any) -> TestClient:
    client = TestClient(web)
    response = client.post("/login", data={"token": TOKEN}, follow_redirects=False)
    assert response.status_code == 303, response.text
    return client


ROUTES = [
    ("GET", "/", 401),
    ("GET", "/api/stats", 401),
    ("GET", "/api/runs", 401),
    ("GET", "/metrics", 401),
    ("GET", "/login", 303),
    ("POST", "/login", 401),
    ("POST", "/logout", 303),
    ("GET", "/healthz", 200),
]
PLANTED = [b"v1.\xff\xfe", "v1.1.2.é.abc".encode(), b"\xc3\xa9", b"v1.1.99999999999.n." + b"\xe2\x80\x8b" * 3]


@pytest.mark.parametrize("cookie", PLANTED)
@pytest.mark.parametrize(("method", "path", "status"), ROUTES)
def test_a_cookie_with_a_non_ascii_byte_is_no_session(
    tmp_path: Any, cookie: bytes, method: str, path: str, status: int
) -> None:
    app = rota.App(database_url=f"sqlite:///{tmp_path}/rota.db")
    client = TestClient(create_app(app, token=TOKEN), raise_server_exceptions=False)
    headers = {"cookie": b"other=1; " + COOKIE.encode() + b"=" + cookie}
    response = client.request(method, path, headers=headers, follow_redirects=False)
    assert response.status_code == status, response.text
    open_client = TestClient(create_app(app), base_url="http://localhost", raise_server_exceptions=False)
    assert open_client.request(method, path, headers=headers, follow_redirects=False).status_code < 500
    app.close()


# -- sign-out in the database ------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 1_900_000_000.0

    def __call__(self) -> float:
        return self.now


def signouts(app: rota.App) -> list[tuple[str, int]]:
    store: Any = app.store
    with store._read() as s:
        return [(r[0], int(r[1])) for r in s.q_text("SELECT nonce, expires_at FROM rota_dashboard_signouts")]


def test_sign_out_survives_a_restart_and_holds_for_every_dashboard(app_factory: Any) -> None:
    first, replica = app_factory(), app_factory()  # two dashboards (processes) on one database
    web = create_app(first, token=TOKEN)
    other = create_app(replica, token=TOKEN)
    client = signed_in(web)
    cookie = client.cookies[COOKIE]
    assert TestClient(other, cookies={COOKIE: cookie}).get("/api/stats").status_code == 200
    assert client.post("/logout", follow_redirects=False).status_code == 303
    assert TestClient(web, cookies={COOKIE: cookie}).get("/api/stats").status_code == 401
    assert TestClient(other, cookies={COOKIE: cookie}).get("/api/stats").status_code == 401  # the replica
    restarted = create_app(app_factory(), token=TOKEN)  # a new process: nothing in memory
    assert TestClient(restarted, cookies={COOKIE: cookie}).get("/api/stats").status_code == 401
    assert TestClient(restarted, cookies={COOKIE: cookie}).get("/").status_code == 401
    fresh = signed_in(restarted)  # signing in again works, and other sessions never ended
    assert fresh.get("/api/stats").status_code == 200
    assert TestClient(other, cookies={COOKIE: fresh.cookies[COOKIE]}).get("/api/stats").status_code == 200
    nonce, expires = cookie.split(".")[3], int(cookie.split(".")[2])
    assert signouts(first) == [(nonce, expires)] and TOKEN not in str(signouts(first))


def test_sign_outs_are_forgotten_after_the_session_lifetime(app_factory: Any) -> None:
    app = app_factory()
    web = create_app(app, token=TOKEN, session_ttl=600)
    clock = Clock()
    web.state.sessions.clock = clock
    old = signed_in(web)
    first = old.cookies[COOKIE].split(".")[3]
    old.post("/logout")
    clock.now += 300
    assert signouts(app) == [(first, int(clock.now) - 300 + 600)]
    clock.now += 301  # the first session would have expired by now: its sign-out is useless
    newer = signed_in(web)
    nonce = newer.cookies[COOKIE].split(".")[3]
    newer.post("/logout")
    assert signouts(app) == [(nonce, int(clock.now) + 600)]
    again = create_app(app, token=TOKEN, session_ttl=600)
    again.state.sessions.clock = clock
    assert signed_in(again).post("/logout", follow_redirects=False).status_code == 303
    assert len(signouts(app)) == 2


def test_a_sign_out_the_database_cannot_record_is_said(
    app_factory: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    from rota.errors import DatabaseUnavailable

    app = app_factory()
    web = create_app(app, token=TOKEN)
    client = signed_in(web)
    cookie = client.cookies[COOKIE]

    def unavailable(*args: Any) -> None:
        raise DatabaseUnavailable("database unavailable")

    monkeypatch.setattr(app.store, "signout_add", unavailable)
    out = client.post("/logout", follow_redirects=False)
    assert out.status_code == 503 and "could not record the sign-out" in out.json()["error"]
    assert COOKIE not in client.cookies  # the browser forgets it anyway
    assert TestClient(web, cookies={COOKIE: cookie}).get("/api/stats").status_code == 401  # and so does this one
    assert "sign-out not recorded in the database" in caplog.text
    monkeypatch.setattr(app.store, "signed_out", unavailable)
    fresh = signed_in(web)
    checked = fresh.get("/api/stats")
    assert checked.status_code == 503 and checked.json() == {"error": "database unavailable: cannot check the session"}
    assert fresh.get("/api/stats", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200
