"""The API against names the library refuses (a NUL, a lone surrogate) and errors that would
echo a password: 400 naming the parameter, never 500; no password in any answer or log."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import rota
from rota.errors import DatabaseError, DatabaseUnavailable
from rota.web import create_app

from .conftest import WITH_MYSQL, make_app, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


LOCAL = "http://127.0.0.1"


async def _asgi(web: Any, method: str, path: str, query: bytes = b"") -> tuple[int, dict[str, Any]]:
    """One request straight through ASGI: a path may hold what no HTTP client sends (a lone
    surrogate), as a server that decodes paths leniently could pass it."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
        "path": path, "raw_path": path.encode("utf-8", "surrogatepass"), "query_string": query, "root_path": "",
        "headers": [(b"host", b"127.0.0.1")], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
    }  # fmt: skip
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await web(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return sent[0]["status"], json.loads(body)


def call(web: Any, method: str, path: str, query: bytes = b"") -> tuple[int, dict[str, Any]]:
    return asyncio.run(_asgi(web, method, path, query))


@pytest.fixture
def served_app(db_url: str) -> Any:
    app = make_app(db_url)
    app.task(name="t")(lambda: None)
    app.add_schedule("reports", "t", every=60)
    yield app
    app.close()


@pytest.mark.parametrize("bad", ["re\x00ports", "re\ud800ports"])
@pytest.mark.parametrize(("method", "suffix"), [("GET", ""), ("POST", "/pause"), ("POST", "/resume"),
                                                ("POST", "/trigger")])  # fmt: skip
def test_a_schedule_name_the_library_refuses_is_400_naming_it(
    served_app: rota.App, bad: str, method: str, suffix: str
) -> None:
    status, body = call(create_app(served_app), method, f"/api/schedules/{bad}{suffix}")
    assert status == 400, body
    assert body["error"].startswith("schedule name "), body
    assert ("NUL" in body["error"]) if "\x00" in bad else ("lone surrogate" in body["error"])
    assert served_app.get_schedule("reports").paused is False


@pytest.mark.parametrize("name", ["status", "task", "schedule", "queue", "limit", "before"])
def test_a_nul_in_any_run_filter_is_400_naming_it(served_app: rota.App, name: str) -> None:
    status, body = call(create_app(served_app), "GET", "/api/runs", f"{name}=a%00b".encode())
    assert status == 400 and body["error"].startswith(f"{name} must not contain a NUL character"), body


@pytest.mark.parametrize(("path", "name"), [("/api/schedules", "all"), ("/api/timeline", "minutes")])
def test_a_nul_in_other_parameters_is_400_naming_it(served_app: rota.App, path: str, name: str) -> None:
    status, body = call(create_app(served_app), "GET", path, f"{name}=%00".encode())
    assert status == 400 and body["error"].startswith(f"{name} must not contain a NUL character"), body


@pytest.mark.parametrize("bad", ["1\x00", "1\ud800", "\ud800"])
@pytest.mark.parametrize(("method", "suffix"), [("GET", ""), ("POST", "/cancel"), ("POST", "/retry")])
def test_a_run_id_with_a_nul_or_surrogate_is_404_not_500(
    served_app: rota.App, bad: str, method: str, suffix: str
) -> None:
    status, body = call(create_app(served_app), method, f"/api/runs/{bad}{suffix}")
    assert status == 404 and "run ids are integers" in body["error"], body


# -- passwords ---------------------------------------------------------------------------------
def _with_password(url: str, how: str) -> str:
    """The test database's URL carrying a password (trust authentication ignores it)."""
    if how == "userinfo":
        return url.replace("postgresql://postgres@", "postgresql://postgres:hunter2@", 1)
    return url + ("&" if "?" in url else "?") + "password=hunter2"


@pytest.mark.postgres
@pytest.mark.parametrize("how", ["userinfo", "query"])
def test_no_password_in_stats_header_errors_or_logs(
    pg_url: str, how: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    url = _with_password(pg_url, how)
    assert "hunter2" in url
    app = make_app(url)
    try:
        client = TestClient(create_app(app), base_url=LOCAL, raise_server_exceptions=False)
        stats = client.get("/api/stats")
        assert stats.status_code == 200 and "hunter2" not in stats.text
        assert "***" in stats.json()["database"]  # the dashboard's header shows this label
        page = client.get("/")
        assert page.status_code == 200 and "hunter2" not in page.text

        def driver_says(message: str, kind: type[Exception]) -> Any:
            def fail(*args: Any, **kwargs: Any) -> None:
                raise kind(message)

            return fail

        echoes = [  # what drivers write: the URL, a conninfo pair, the bare password
            (f"cannot connect to {url}: refused", DatabaseUnavailable, 503),
            ("FATAL: bad conninfo host=h password=hunter2 dbname=x", DatabaseError, 500),
            ("password authentication failed (tried 'hunter2')", DatabaseError, 500),
            ("boom hunter2", RuntimeError, 500),
        ]
        with caplog.at_level(logging.DEBUG):
            for message, kind, code in echoes:
                monkeypatch.setattr(app, "stats", driver_says(message, kind))
                monkeypatch.setattr(app, "list_schedules", driver_says(message, kind))
                for path in ("/api/stats", "/api/schedules", "/metrics"):
                    response = client.get(path)
                    expected = 200 if path == "/metrics" and kind is not RuntimeError else code  # rota_up 0
                    assert response.status_code == expected, (path, response.text)
                    assert "hunter2" not in response.text, (path, response.text)
        assert "hunter2" not in caplog.text, caplog.text
    finally:
        app.close()
