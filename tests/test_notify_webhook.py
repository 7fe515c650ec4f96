"""The webhook against hostile local HTTP servers: redirects, drips, secrets in the URL."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import rota
import rota.notify
from rota.events import Event
from rota.webhook_http import origin_label


class Recorded(ThreadingHTTPServer):
    """Answers every request with `answer(handler)`; keeps (method, path, headers, body)."""

    daemon_threads = True

    def __init__(self, answer: Callable[[Handler], None]) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.answer = answer
        self.seen: list[tuple[str, str, dict[str, str], bytes]] = []

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Recorded

    def _record(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append((self.command, self.path, dict(self.headers.items()), body))
        with contextlib.suppress(OSError):  # the client hung up (a drip cut short)
            self.server.answer(self)

    do_POST = do_GET = do_CONNECT = _record

    def reply(self, status: int, **headers: str) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[Handler], None]], Recorded]]:
    servers: list[Recorded] = []

    def start(answer: Callable[[Handler], None]) -> Recorded:
        server = Recorded(answer)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


def event(n: int = 1) -> Event:
    return Event("run_failed", datetime(2030, 1, 1, tzinfo=UTC), "w1", run_id=str(n))


def deliver(hook: rota.notify.Webhook, *events: Event) -> None:
    async def main() -> None:
        for e in events:
            await hook.deliver(e)

    asyncio.run(main())


SECRET = {"Authorization": "Bearer s3cret"}


def test_a_redirect_to_another_origin_is_not_followed_and_counts_as_failed(serve: Any, caplog: Any) -> None:
    elsewhere = serve(lambda h: h.reply(200))
    hook_server = serve(lambda h: h.reply(302, Location=f"{elsewhere.origin}/steal"))
    hook = rota.notify.Webhook(f"{hook_server.origin}/hook", headers=SECRET, retries=0)
    deliver(hook, event())
    assert hook.sent == 0 and hook.given_up == 1
    assert elsewhere.seen == []  # neither the Authorization header nor anything else went there
    assert "redirect to another origin" in caplog.text and "/steal" not in caplog.text


@pytest.mark.parametrize("scheme", ["ftp", "file", "https"])
def test_a_redirect_to_another_scheme_is_not_followed(serve: Any, scheme: str) -> None:
    hook_server = serve(lambda h: h.reply(301, Location=f"{scheme}://127.0.0.1/x"))
    hook = rota.notify.Webhook(f"{hook_server.origin}/hook", retries=0)
    with pytest.raises(Exception, match="not followed"):
        hook.send(event())
    deliver(hook, event())
    assert hook.sent == 0 and hook.given_up == 1 and len(hook_server.seen) == 2


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_on_the_same_origin_is_followed_as_the_same_post(serve: Any, status: int) -> None:
    def answer(h: Handler) -> None:
        if h.path == "/old":
            h.reply(status, Location="/new?x=1")
        else:
            h.reply(204)

    server = serve(answer)
    hook = rota.notify.Webhook(f"{server.origin}/old", headers=SECRET, retries=0)
    deliver(hook, event())
    assert hook.sent == 1 and hook.given_up == 0
    (m1, p1, _h1, b1), (m2, p2, h2, b2) = server.seen
    assert (m1, p1, m2, p2) == ("POST", "/old", "POST", "/new?x=1")
    assert b1 == b2 and b"run_failed" in b2 and h2["Authorization"] == "Bearer s3cret"


def test_a_redirect_to_an_unusable_url_is_not_followed_nor_logged(serve: Any, caplog: Any) -> None:
    server = serve(lambda h: h.reply(307, Location="/new path/SeCrEt\x01"))
    hook = rota.notify.Webhook(f"{server.origin}/hook", retries=0)
    deliver(hook, event())
    assert hook.given_up == 1 and len(server.seen) == 1
    assert "spaces or control characters not followed" in caplog.text and "SeCrEt" not in caplog.text


def test_endless_redirects_end_the_attempt(serve: Any) -> None:
    server = serve(lambda h: h.reply(307, Location=h.path + "x"))
    hook = rota.notify.Webhook(f"{server.origin}/a", retries=0)
    with pytest.raises(Exception, match="more than 5 redirects"):
        hook.send(event())


def drip(h: Handler) -> None:
    """A 200 whose body comes one byte every 0.2 s for 8 s."""
    h.send_response(200)
    h.send_header("Content-Length", "40")
    h.end_headers()
    for _ in range(40):
        h.wfile.write(b"x")
        h.wfile.flush()
        time.sleep(0.2)


def drip_headers(h: Handler) -> None:
    """The status line and headers one byte every 0.2 s, for 8 s."""
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"y" * 40:
        h.wfile.write(bytes([byte]))
        h.wfile.flush()
        time.sleep(0.2)


@pytest.mark.parametrize("answer", [drip, drip_headers])
def test_timeout_bounds_the_whole_attempt(serve: Any, answer: Callable[[Handler], None]) -> None:
    server = serve(answer)
    hook = rota.notify.Webhook(f"{server.origin}/hook", timeout=1, retries=0)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="within 1 s"):
        hook.send(event())
    assert time.monotonic() - started < 3  # about 1 s (generous under load); each read would be 8 s


def test_later_events_do_not_wait_behind_a_drip(serve: Any) -> None:
    server = serve(drip)
    hook = rota.notify.Webhook(f"{server.origin}/hook", timeout=1, retries=0)
    started = time.monotonic()
    deliver(hook, event(1), event(2))
    assert hook.given_up == 2 and len(server.seen) == 2
    assert time.monotonic() - started < 5  # two attempts of about 1 s each, not 2 x 8 s


def test_the_failure_log_shows_the_origin_only(serve: Any, caplog: Any) -> None:
    server = serve(lambda h: h.reply(500))
    url = f"{server.origin}/services/T000/B000/XoXoSeCrEt?token=QuErYsEcReT"
    hook = rota.notify.Webhook(url, retries=1, backoff=0.01)
    with caplog.at_level(logging.WARNING, logger="rota.notify"):
        deliver(hook, event())
    assert hook.given_up == 1 and len(server.seen) == 2
    assert "XoXoSeCrEt" not in caplog.text and "QuErYsEcReT" not in caplog.text and "/services" not in caplog.text
    assert f"{server.origin}/…" in caplog.text and "HTTP 500" in caplog.text
    assert "XoXoSeCrEt" not in repr(hook)


def test_origin_label() -> None:
    assert origin_label("https://hooks.slack.com/services/T/B/x?y=1") == "https://hooks.slack.com/…"
    assert origin_label("http://[::1]:8080/p") == "http://[::1]:8080/…"
    assert origin_label("http://user:pw@host:81/p") == "http://host:81/…"
    assert origin_label("http://host:99999999/p") == "(an unreadable URL)"


@pytest.mark.parametrize("url", ["http://", "http://host:notaport/x", "http://ho st/x", "http://host/\nx"])
def test_a_webhook_url_without_a_usable_host_is_refused(url: str) -> None:
    with pytest.raises(rota.ConfigurationError, match="http:// or https:// URL with a host"):
        rota.notify.Webhook(url)


# -- proxies (HTTP_PROXY, HTTPS_PROXY, NO_PROXY, as urllib reads them) ---------------------------
def test_an_http_url_goes_through_the_http_proxy(serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = serve(lambda h: h.reply(204))
    monkeypatch.setenv("HTTP_PROXY", proxy.origin.replace("http://", "http://me:p%40ss@"))
    hook = rota.notify.Webhook("http://hooks.invalid:8080/services/x?y=1", headers=SECRET, retries=0)
    deliver(hook, event())
    assert hook.sent == 1
    ((method, path, headers, body),) = proxy.seen
    assert (method, path, headers["Host"]) == ("POST", "http://hooks.invalid:8080/services/x?y=1", "hooks.invalid:8080")
    assert headers["Proxy-Authorization"] == "Basic " + base64.b64encode(b"me:p@ss").decode()
    assert headers["Authorization"] == "Bearer s3cret" and b"run_failed" in body


def test_no_proxy_bypasses_it(serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    proxy, direct = serve(lambda h: h.reply(500)), serve(lambda h: h.reply(200))
    monkeypatch.setenv("HTTP_PROXY", proxy.origin)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    hook = rota.notify.Webhook(f"{direct.origin}/hook", retries=0)
    deliver(hook, event())
    assert hook.sent == 1 and proxy.seen == [] and len(direct.seen) == 1


def test_an_https_url_goes_through_a_connect_tunnel(serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = serve(lambda h: h.reply(200))  # then hangs up: the TLS handshake fails
    monkeypatch.setenv("HTTPS_PROXY", proxy.origin)
    hook = rota.notify.Webhook("https://hooks.invalid/services/x", headers=SECRET, retries=0)
    deliver(hook, event())
    assert hook.given_up == 1
    ((method, path, headers, _),) = proxy.seen
    assert (method, path) == ("CONNECT", "hooks.invalid:443") and "Authorization" not in headers
