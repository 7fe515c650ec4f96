"""One webhook POST, bounded as a whole and kept on its origin (used by rota.notify.Webhook).

- **One deadline for the attempt.** `timeout` bounds connecting, sending, the answer's
  headers and its body together, not each socket read: a watchdog shuts the socket down when
  the deadline passes, so a server that drips one byte at a time cannot keep an attempt (and
  the notifier's later events, delivered one after another) waiting.
- **Redirects stay on the origin.** A redirect is followed only to the same scheme, host and
  port as the configured URL, at most MAX_REDIRECTS times, and always as the same POST with
  the same body and headers (a custom `Authorization` therefore never leaves the origin). A
  redirect elsewhere, or to anything but http(s), ends the attempt as failed.
- **URLs in messages show the origin only** (`origin_label`): Slack-style webhooks carry
  their secret in the path or the query, so neither is ever logged.

Plain http.client (standard library): a webhook POST needs nothing more.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Mapping
from urllib.parse import SplitResult, urljoin, urlsplit

MAX_REDIRECTS = 5
REDIRECTS = frozenset({301, 302, 303, 307, 308})
ANSWER_LIMIT = 64 * 1024  # bytes of an answer's body read (and thrown away)


class DeliveryFailed(Exception):
    """The attempt did not get a 2xx answer; the message names no path or query."""


def origin_label(url: str) -> str:
    """'https://hooks.slack.com/services/T0/B0/secret?x=1' -> 'https://hooks.slack.com/…'."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "(an unreadable URL)"
    shown_host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{shown_host}{port}/…"


def _origin(parts: SplitResult) -> tuple[str, str, int | None]:
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


def post(url: str, body: bytes, headers: Mapping[str, str], timeout: float) -> int:
    """POST `body` to `url` within `timeout` seconds in all; the 2xx status, else DeliveryFailed
    (or TimeoutError / OSError)."""
    deadline = time.monotonic() + timeout
    origin = _origin(urlsplit(url))
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        status, location = _post_once(current, body, headers, deadline, timeout)
        if 200 <= status < 300:
            return status
        if status not in REDIRECTS:
            raise DeliveryFailed(f"HTTP {status} from {origin_label(current)}")
        if not location:
            raise DeliveryFailed(f"HTTP {status} without a Location from {origin_label(current)}")
        target = urljoin(current, location)
        if not target.isprintable() or " " in target:
            raise DeliveryFailed(f"HTTP {status} redirect to a URL with spaces or control characters not followed")
        parts = urlsplit(target)
        if parts.scheme not in ("http", "https"):
            raise DeliveryFailed(f"HTTP {status} redirect to a {parts.scheme or 'relative'}: URL not followed")
        if _origin(parts) != origin:
            raise DeliveryFailed(
                f"HTTP {status} redirect to another origin ({origin_label(target)}) not followed; "
                f"configure the webhook with its final URL"
            )
        current = target
    raise DeliveryFailed(f"more than {MAX_REDIRECTS} redirects from {origin_label(url)}")


def _post_once(
    url: str, body: bytes, headers: Mapping[str, str], deadline: float, timeout: float
) -> tuple[int, str | None]:
    parts = urlsplit(url)
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError(f"no answer from {origin_label(url)} within {timeout:g} s")
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname or "", parts.port, timeout=remaining)
    fired = threading.Event()
    held: list[socket.socket] = []  # the socket, kept: the connection forgets it on "close"
    watchdog = threading.Timer(remaining, _abort, (conn, held, fired))
    watchdog.daemon = True
    watchdog.start()
    try:
        conn.connect()
        held.append(conn.sock)
        if fired.is_set():
            raise TimeoutError
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request("POST", path, body=body, headers=dict(headers))
        response = conn.getresponse()
        response.read(ANSWER_LIMIT)
        if fired.is_set():
            raise TimeoutError
        return response.status, response.getheader("location")
    except (OSError, http.client.HTTPException):
        if fired.is_set():
            raise TimeoutError(f"no complete answer from {origin_label(url)} within {timeout:g} s") from None
        raise
    finally:
        watchdog.cancel()
        conn.close()


def _abort(conn: http.client.HTTPConnection, held: list[socket.socket], fired: threading.Event) -> None:
    """The deadline passed: wake the blocked call (shut the plain socket down, under any TLS)."""
    fired.set()
    for sock in [*held, conn.sock]:
        if sock is not None:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
