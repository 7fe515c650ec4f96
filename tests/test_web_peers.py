"""Whom `rota dashboard` believes and whom it answers: X-Forwarded-For only from configured
proxies (through a real uvicorn), and no `--allowed-host '*'` without a token."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from rota.cli import main
from rota.web.sessions import FREE_FAILURES

from .ports import free_port

TOKEN = "t0ken-for-the-peers"


def dashboard_cli(url: str, *args: str, env: dict[str, str | None] | None = None) -> tuple[int, str]:
    result = CliRunner(env={"ROTA_DASHBOARD_TOKEN": None, "ROTA_DASHBOARD_ALLOWED_HOSTS": None, **(env or {})}).invoke(
        main, ["--database-url", url, "dashboard", "tests.apps.basic:app", *args]
    )
    return result.exit_code, result.output


@pytest.fixture
def url(tmp_path: Any) -> str:
    return f"sqlite:///{tmp_path}/rota.db"


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What `rota dashboard` would hand to uvicorn.run (not run: the test starts it itself)."""
    import uvicorn

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda web, **options: calls.append({"web": web, **options}))
    return calls


@pytest.fixture
def run_uvicorn() -> Iterator[Any]:
    """Start a real uvicorn with the options `rota dashboard` chose; yields its base URL."""
    import uvicorn

    servers: list[uvicorn.Server] = []

    def start(call: dict[str, Any]) -> str:
        options = {k: v for k, v in call.items() if k not in ("web", "host", "port")}
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(call["web"], host="127.0.0.1", port=port, **options))
        threading.Thread(target=server.run, daemon=True).start()
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        servers.append(server)
        return f"http://127.0.0.1:{port}"

    yield start
    for server in servers:
        server.should_exit = True


def sign_in(base: str, token: str, forwarded_for: str) -> int:
    response = httpx.post(f"{base}/login", data={"token": token}, headers={"x-forwarded-for": forwarded_for})
    return response.status_code


def test_forwarded_for_from_a_loopback_client_is_not_believed_by_default(
    url: str, served: list[dict[str, Any]], run_uvicorn: Any, caplog: Any
) -> None:
    code, out = dashboard_cli(url, "--port", str(free_port()), env={"ROTA_DASHBOARD_TOKEN": TOKEN})
    assert code == 0, out
    assert "X-Forwarded-For" not in out
    base = run_uvicorn(served[-1])  # with the options rota chose (uvicorn's default believes loopback)
    with caplog.at_level(logging.WARNING, logger="rota.web"):
        statuses = [sign_in(base, "wrong", f"203.0.113.{n}") for n in range(FREE_FAILURES + 1)]
    # a new claimed address per attempt does not escape the throttle: it counts the real peer
    assert statuses == [401] * FREE_FAILURES + [429]
    assert sign_in(base, TOKEN, "198.51.100.1") == 429  # nor can it spend another address's budget
    failed = [m for m in caplog.messages if "sign-in failed" in m]
    assert failed and all(m.startswith("dashboard sign-in failed from 127.0.0.1 ") for m in failed)
    assert "203.0.113" not in caplog.text
    assert served[-1]["proxy_headers"] is False


@pytest.mark.parametrize("how", ["flag", "variable"])
def test_forwarded_for_is_believed_from_configured_proxies(
    url: str, served: list[dict[str, Any]], run_uvicorn: Any, caplog: Any, how: str
) -> None:
    env: dict[str, str | None] = {"ROTA_DASHBOARD_TOKEN": TOKEN}
    args = ["--port", str(free_port())]
    if how == "flag":
        args += ["--forwarded-allow-ips", "127.0.0.1, 10.0.0.0/8"]
    else:
        env["ROTA_DASHBOARD_FORWARDED_ALLOW_IPS"] = "127.0.0.1,10.0.0.0/8"
    code, out = dashboard_cli(url, *args, env=env)
    assert code == 0, out
    assert "believing X-Forwarded-For from 127.0.0.1, 10.0.0.0/8" in out
    assert served[-1]["proxy_headers"] is True and served[-1]["forwarded_allow_ips"] == ["127.0.0.1", "10.0.0.0/8"]
    base = run_uvicorn(served[-1])
    with caplog.at_level(logging.WARNING, logger="rota.web"):
        assert [sign_in(base, "wrong", "203.0.113.7") for _ in range(FREE_FAILURES)] == [401] * FREE_FAILURES
        assert sign_in(base, "wrong", "203.0.113.7") == 429
        assert sign_in(base, "wrong", "203.0.113.8") == 401  # another client behind the proxy
    assert "dashboard sign-in failed from 203.0.113.7 (1 in a row)" in caplog.messages


@pytest.mark.parametrize("value", ["localhost", "10.0.0.0/33", ",", "1.2.3.4 5.6.7.8"])
def test_bad_forwarded_allow_ips_are_refused(url: str, served: list[dict[str, Any]], value: str) -> None:
    code, out = dashboard_cli(url, "--forwarded-allow-ips", value)
    assert code == 2 and "--forwarded-allow-ips" in out and "proxy IP addresses or networks" in out, out
    code, out = dashboard_cli(url, env={"ROTA_DASHBOARD_FORWARDED_ALLOW_IPS": value})
    assert code == 1 and f"ROTA_DASHBOARD_FORWARDED_ALLOW_IPS={value!r} is not valid" in out, out
    assert served == []


@pytest.mark.parametrize("how", ["flag", "variable"])
def test_any_host_without_a_token_is_refused(url: str, served: list[dict[str, Any]], how: str) -> None:
    port = str(free_port())
    if how == "flag":
        code, out = dashboard_cli(url, "--port", port, "--allowed-host", "*")
    else:
        code, out = dashboard_cli(url, "--port", port, env={"ROTA_DASHBOARD_ALLOWED_HOSTS": "localhost,*"})
    assert code == 1, out
    assert "refusing --allowed-host '*'" in out and "without a token" in out and "DNS rebinding" in out
    assert "ROTA_DASHBOARD_TOKEN" in out and len(out.strip().splitlines()) == 1 and "Traceback" not in out
    assert served == []
    code, out = dashboard_cli(url, "--port", port, "--allowed-host", "*", env={"ROTA_DASHBOARD_TOKEN": TOKEN})
    assert code == 0 and "(sign in with the token)" in out, out
    assert TestClient(served[-1]["web"], base_url="http://any.example").get("/").status_code == 401


def test_the_banner_names_the_hosts_an_open_dashboard_answers(url: str, served: list[dict[str, Any]]) -> None:
    code, out = dashboard_cli(url, "--port", str(free_port()), "--allowed-host", "dash.internal")
    assert code == 0 and "(no token: loopback only, answering Host dash.internal)" in out, out
    code, out = dashboard_cli(url, "--port", str(free_port()))
    assert code == 0 and "(no token: loopback only)" in out, out
