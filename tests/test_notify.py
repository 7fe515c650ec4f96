"""rota.notify: a webhook against a local HTTP server, an email against a local SMTP server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

import rota
import rota.notify
import rota.testing

from .conftest import WITH_MYSQL, make_app, store_url
from .ports import free_port


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


class Hooked(ThreadingHTTPServer):
    """Answers 500 to the first `failures` POSTs, then 200; keeps every body."""

    def __init__(self, failures: int) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.failures = failures
        self.bodies: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class Handler(BaseHTTPRequestHandler):
    server: Hooked

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.bodies.append(json.loads(body))
        failing = len(self.server.bodies) <= self.server.failures
        self.send_response(500 if failing else 200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def http_server(request: pytest.FixtureRequest) -> Iterator[Hooked]:
    server = Hooked(getattr(request, "param", 0))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def failing_app(db_url: str, *notifiers: Any) -> tuple[rota.App, rota.RunHandle]:
    app = make_app(db_url, notifiers=list(notifiers))

    @app.task(name="explode")
    def explode() -> None:
        raise RuntimeError("disk full")

    handle = explode.enqueue()
    rota.testing.run_pending(app)
    assert app.events.drain(10)
    return app, handle


@pytest.mark.parametrize("http_server", [2], indirect=True)
def test_webhook_posts_the_event_and_retries_on_500(db_url: str, http_server: Hooked) -> None:
    hook = rota.notify.Webhook(http_server.url, retries=3, backoff=0.01, dashboard_url="http://ops.example/rota/")
    app, handle = failing_app(db_url, hook)
    assert len(http_server.bodies) == 3 and hook.sent == 1 and hook.given_up == 0
    body = http_server.bodies[-1]
    assert body["event"] == "run_failed" and body["run_id"] == handle.id and body["task"] == "explode"
    assert body["status"] == "failed" and body["attempt"] == 1 and body["schedule"] is None
    assert body["error"]["type"] == "RuntimeError" and body["error"]["message"] == "disk full"
    assert body["worker"] and body["time"].endswith("Z")
    # the run's page in the dashboard (it pointed at the JSON API), and the API's record apart
    assert body["run_url"] == f"http://ops.example/rota/#/run/{handle.id}"
    assert body["run_api_url"] == f"http://ops.example/rota/api/runs/{handle.id}"
    app.close()


@pytest.mark.parametrize("http_server", [100], indirect=True)
def test_webhook_gives_up_after_its_retries(db_url: str, http_server: Hooked, caplog: Any) -> None:
    hook = rota.notify.Webhook(http_server.url, retries=2, backoff=0.01)
    app, _ = failing_app(db_url, hook)
    assert len(http_server.bodies) == 3 and hook.sent == 0 and hook.given_up == 1
    assert "gave up on run" in caplog.text and "after 3 attempt(s)" in caplog.text
    app.close()


def test_schedule_notify_on_selects_events_for_its_runs(db_url: str, http_server: Hooked) -> None:
    clock = rota.FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    app = make_app(db_url, clock=clock)
    app.add_notifier(rota.notify.Webhook(http_server.url, backoff=0.01))  # default: failures only

    @app.schedule(every=timedelta(minutes=5), name="report", notify_on=("success", "failure"))
    def report() -> str:
        return "sent"

    @app.task(name="quiet")
    def quiet() -> None:
        pass

    quiet.enqueue()
    rota.testing.run_pending(app)
    clock.advance(timedelta(minutes=5))
    rota.testing.run_pending(app)
    assert app.events.drain(10)
    assert [(b["event"], b["schedule"], b["status"]) for b in http_server.bodies] == [
        ("run_succeeded", "report", "succeeded")
    ]
    app.close()


def test_bad_notifier_options_are_refused(tmp_path: Any) -> None:
    app = make_app(f"sqlite:///{tmp_path}/rota.db")
    with pytest.raises(rota.ConfigurationError, match=r"unknown notify_on value 'failures'; valid: success, failure"):
        app.schedule(every=60, notify_on=("failures",))
    with pytest.raises(rota.ConfigurationError, match="notify_on must be a tuple"):
        app.schedule(every=60, notify_on="failure")
    with pytest.raises(rota.ConfigurationError, match=r"unknown notify_on value 'failures'"):
        app.add_schedule("x", "some.task", every=60, notify_on=("failures",))  # a stored one's is checked too
    assert app.list_schedules(include_inactive=True) == []
    with pytest.raises(rota.ConfigurationError, match="http:// or https://"):
        rota.notify.Webhook("ftp://x")
    with pytest.raises(rota.ConfigurationError, match="unknown event 'failed'"):
        rota.notify.Webhook("http://x", events=["failed"])
    with pytest.raises(rota.ConfigurationError, match="retries"):
        rota.notify.Webhook("http://x", retries=-1)
    with pytest.raises(rota.ConfigurationError, match="to= must be"):
        rota.notify.Email(host="localhost", sender="a@b.c", to="ops@b.c")
    with pytest.raises(rota.ConfigurationError, match="not both"):
        rota.notify.Email(host="localhost", sender="a@b.c", to=["ops@b.c"], ssl=True, starttls=True)
    with pytest.raises(rota.ConfigurationError, match="wants"):
        app.add_notifier(object())  # type: ignore[arg-type]


def test_email_is_sent_through_smtp(db_url: str) -> None:
    from aiosmtpd.controller import Controller

    received: list[Any] = []

    class Collect:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            received.append((envelope.mail_from, list(envelope.rcpt_tos), message_from_bytes(envelope.content)))
            return "250 OK"

    controller = Controller(Collect(), hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        mail = rota.notify.Email(
            host="127.0.0.1", port=controller.port, sender="rota@example.com", to=["ops@example.com"], backoff=0.01
        )
        app, handle = failing_app(db_url, mail)
    finally:
        controller.stop()
    assert mail.sent == 1 and len(received) == 1
    sender, recipients, message = received[0]
    assert sender == "rota@example.com" and recipients == ["ops@example.com"]
    assert message["Subject"] == f"[rota] run {handle.id} (explode): run failed"
    text = message.get_payload()
    assert f"run_id: {handle.id}" in text and "disk full" in text and "status: failed" in text
    app.close()


def test_a_failure_notifier_costs_nothing_per_successful_run(tmp_path: Any) -> None:
    app = make_app(f"sqlite:///{tmp_path}/rota.db", notifiers=[rota.notify.Webhook("http://127.0.0.1:9/x")])
    assert app.events.wants("run_failed") and not app.events.wants("run_succeeded")

    @app.schedule(every=60, name="nightly", notify_on=("success",))
    def nightly() -> None:
        pass

    assert app.events.wants("run_succeeded") and not app.events.wants("run_retrying")
    app.close()
