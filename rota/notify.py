"""Ready-made notifiers: a webhook and an email, fed by the event hooks (rota.events).

    app = rota.App(notifiers=[
        rota.notify.Webhook("https://hooks.example.com/rota", events=("run_failed",)),
        rota.notify.Email(host="smtp.example.com", sender="rota@example.com", to=["ops@example.com"],
                          starttls=True, username="rota", password=os.environ["SMTP_PASSWORD"]),
    ])

    @app.schedule(cron="0 3 * * *", notify_on=("success", "failure"))
    def nightly_backup(): ...

Which events a notifier sends: for a run of a schedule declared with `notify_on=`, the
events that notify_on selects ("success", "failure", "retry", "cancel", "skip"); for
everything else, the notifier's own `events=` (default: run_failed). `schedules=` limits a
notifier to the runs of those schedules.

Delivery runs on the events dispatcher, never on a worker's loop: each attempt is bounded by
`timeout`, failed attempts are retried `retries` times with exponential backoff (starting
at `backoff` seconds), then the notification is given up with an error in the log.

HTTP goes through the standard library (rota.webhook_http over http.client): `timeout`
bounds a webhook attempt as a whole, redirects are followed only on the URL's own origin,
and logs show the URL's origin only (`https://hooks.example.com/…`), never its path or query,
which often hold the webhook's secret. Mail goes through smtplib (STARTTLS or SMTPS optional).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import smtplib
import ssl as tls
from collections.abc import Mapping, Sequence
from email.message import EmailMessage
from typing import Any
from urllib.parse import urlsplit

from .errors import ConfigurationError
from .events import NOTIFY_ON, Event, check_events
from .logs import escape_controls
from .webhook_http import origin_label, post

log = logging.getLogger("rota.notify")


class Notifier:
    """Filtering, payload, retries and backoff; subclasses send one attempt (`send`)."""

    def __init__(
        self,
        *,
        events: Sequence[str] | None = None,
        schedules: Sequence[str] | None = None,
        timeout: float = 5.0,
        retries: int = 3,
        backoff: float = 1.0,
        dashboard_url: str | None = None,
    ) -> None:
        if isinstance(events, str) or isinstance(schedules, str):
            raise ConfigurationError(f"events and schedules must be lists of names, got {events or schedules!r}")
        self.events = check_events(events if events is not None else ("run_failed",))
        self.schedules = frozenset(schedules) if schedules is not None else None
        self.timeout = _positive("timeout", timeout)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigurationError(f"retries must be an integer >= 0, got {retries!r}")
        self.retries = retries
        self.backoff = _positive("backoff", backoff)
        self.dashboard_url = (dashboard_url or os.environ.get("ROTA_DASHBOARD_URL") or "").rstrip("/") or None
        self.sent = 0
        self.given_up = 0

    def wants(self, event: Event, notify_on: Mapping[str, tuple[str, ...]]) -> bool:
        schedule = event.schedule_name
        if self.schedules is not None and schedule not in self.schedules:
            return False
        if schedule is not None and schedule in notify_on:
            return any(event.name in NOTIFY_ON[word] for word in notify_on[schedule])
        return event.name in self.events

    def payload(self, event: Event) -> dict[str, Any]:
        """The JSON object sent for an event."""
        run = event.run
        data: dict[str, Any] = {
            "event": event.name,
            "time": event.time.isoformat().replace("+00:00", "Z"),
            "worker": event.worker_id,
            "run_id": event.run_id,
            "task": run.task if run is not None else None,
            "schedule": event.schedule_name,
            "status": run.status if run is not None else None,
            "attempt": run.attempt if run is not None else None,
            "max_attempts": run.max_attempts if run is not None else None,
            "error": run.error if run is not None else None,
            "detail": event.detail,
        }
        if self.dashboard_url is not None:
            data["dashboard_url"] = self.dashboard_url
            if event.run_id is not None:
                data["run_url"] = f"{self.dashboard_url}/#/run/{event.run_id}"  # the run's page
                data["run_api_url"] = f"{self.dashboard_url}/api/runs/{event.run_id}"
        return data

    def summary(self, event: Event) -> str:
        what = f"run {event.run_id} ({event.task})" if event.run_id else f"schedule {event.schedule_name}"
        if event.name.startswith("worker_"):
            what = f"worker {event.worker_id}"
        return f"{what}: {event.name.replace('_', ' ')}"

    async def deliver(self, event: Event) -> None:
        """Send, retrying with backoff; log and give up after `retries` retries."""
        loop = asyncio.get_running_loop()
        for attempt in range(self.retries + 1):
            try:
                await loop.run_in_executor(None, self.send, event)
            except Exception as exc:
                if attempt == self.retries:
                    self.given_up += 1
                    log.error("%r: gave up on %s after %d attempt(s): %s", self, self.summary(event), attempt + 1, exc)
                    return
                delay = min(60.0, self.backoff * 2**attempt)
                log.warning("%r: %s not sent (%s); retrying in %.2g s", self, self.summary(event), exc, delay)
                await asyncio.sleep(delay)
            else:
                self.sent += 1
                return

    def send(self, event: Event) -> None:
        raise NotImplementedError


class Webhook(Notifier):
    """POST the event as JSON to `url`; any 2xx is success, anything else is retried.

    `timeout` bounds each attempt as a whole; a redirect is followed only to the same
    origin (as the same POST), any other redirect fails the attempt (rota.webhook_http)."""

    def __init__(self, url: str, *, headers: Mapping[str, str] | None = None, **options: Any) -> None:
        super().__init__(**options)
        if not isinstance(url, str) or not _http_url(url):
            shown = origin_label(url) if isinstance(url, str) and "://" in url else repr(url)
            raise ConfigurationError(f"Webhook url must be an http:// or https:// URL with a host, got {shown}")
        self.url = url
        self.headers = {"Content-Type": "application/json", "User-Agent": "rota", **(headers or {})}

    def __repr__(self) -> str:
        return f"Webhook({origin_label(self.url)!r})"

    def send(self, event: Event) -> None:
        body = json.dumps(self.payload(event), default=str).encode()
        post(self.url, body, self.headers, self.timeout)


class Email(Notifier):
    """Send a short plain-text mail per event through SMTP (stdlib smtplib).

    `starttls=True` upgrades a plain connection (port 587); `ssl=True` connects with TLS
    from the start (port 465); `username`/`password` log in when given."""

    def __init__(
        self,
        *,
        host: str,
        sender: str,
        to: Sequence[str],
        port: int | None = None,
        username: str | None = None,
        password: str | None = None,
        starttls: bool = False,
        ssl: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        if isinstance(to, str) or not to or not all(isinstance(a, str) and "@" in a for a in to):
            raise ConfigurationError(f"Email to= must be a non-empty list of addresses, got {to!r}")
        if starttls and ssl:
            raise ConfigurationError("Email: choose starttls=True (port 587) or ssl=True (port 465), not both")
        self.host = host
        self.port = port if port is not None else (465 if ssl else 587 if starttls else 25)
        self.sender = sender
        self.to = list(to)
        self.username = username
        self.password = password
        self.starttls = starttls
        self.use_ssl = ssl

    def __repr__(self) -> str:
        return f"Email({self.host}:{self.port} -> {', '.join(self.to)})"

    def message(self, event: Event) -> EmailMessage:
        msg = EmailMessage()
        msg["Subject"] = f"[rota] {escape_controls(self.summary(event))}"  # a header is one line
        msg["From"] = self.sender
        msg["To"] = ", ".join(self.to)
        # One line per field: a line break in a task name, an error or a detail (CR, LF, U+2028,
        # NEL...) is written escaped, so it cannot add a forged "status: succeeded" line.
        lines = [
            f"{key}: {escape_controls(str(value))}" for key, value in self.payload(event).items() if value is not None
        ]
        msg.set_content("\n".join(lines) + "\n")
        return msg

    def send(self, event: Event) -> None:
        context = tls.create_default_context()
        smtp: smtplib.SMTP
        if self.use_ssl:
            smtp = smtplib.SMTP_SSL(self.host, self.port, timeout=self.timeout, context=context)
        else:
            smtp = smtplib.SMTP(self.host, self.port, timeout=self.timeout)
        with smtp:
            if self.starttls:
                smtp.starttls(context=context)
            if self.username is not None:
                smtp.login(self.username, self.password or "")
            smtp.send_message(self.message(event))


def _http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return False
    clean = url.isprintable() and " " not in url
    return clean and parts.scheme in ("http", "https") and bool(parts.hostname)


def _positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigurationError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


__all__ = ["Email", "Notifier", "Webhook"]
