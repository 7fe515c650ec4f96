"""Dashboard sessions against planted cookies and restarts: a cookie that is not ours is no
session on every route, and a signed-out session stays signed out across dashboards sharing
the database (on both stores)."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

import rota
from rota.web import create_app
from rota.web.auth import COOKIE

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
