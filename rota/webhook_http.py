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

Plain http.client (standard library): a webhook POST needs nothing more. A proxy named by
HTTP_PROXY / HTTPS_PROXY (and not bypassed by NO_PROXY) is used as urllib would use it: an
http:// URL is sent through it, an https:// one through a CONNECT tunnel.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import socket
import threading
import time
import urllib.request
from collections.abc import Mapping
from typing import Any
from urllib.parse import SplitResult, unquote, urljoin, urlsplit

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
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError(f"no answer from {origin_label(url)} within {timeout:g} s")
    conn, target, extra = _connection(urlsplit(url), remaining)
    watch = _Watch(conn, remaining)
    try:
        conn.connect()
        watch.check()
        conn.request("POST", target, body=body, headers={**headers, **extra})
        response = conn.getresponse()
        response.read(ANSWER_LIMIT)
        watch.check()
        return response.status, response.getheader("location")
    except (OSError, http.client.HTTPException):
        if watch.fired.is_set():
            raise TimeoutError(f"no complete answer from {origin_label(url)} within {timeout:g} s") from None
        raise
    finally:
        watch.timer.cancel()
        conn.close()


def _connection(parts: SplitResult, timeout: float) -> tuple[http.client.HTTPConnection, str, dict[str, str]]:
    """The connection for `parts` (through the proxy that HTTP(S)_PROXY / NO_PROXY name, as
    urllib would), the request target, and the headers for the proxy."""
    host, port, https = parts.hostname or "", parts.port, parts.scheme == "https"
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    kind = http.client.HTTPSConnection if https else http.client.HTTPConnection
    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return kind(host, port, timeout=timeout), path, {}
    via = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    auth = {}
    if via.username is not None:
        pair = f"{unquote(via.username)}:{unquote(via.password or '')}".encode()
        auth["Proxy-Authorization"] = "Basic " + base64.b64encode(pair).decode()
    if https:  # a CONNECT tunnel: the proxy sees neither the path nor the headers
        conn = kind(via.hostname or "", via.port or 80, timeout=timeout)
        conn.set_tunnel(host, port, headers=auth)
        return conn, path, {}
    shown_host = f"[{host}]" if ":" in host else host
    absolute = f"http://{shown_host}{f':{port}' if port else ''}{path}"
    return http.client.HTTPConnection(via.hostname or "", via.port or 80, timeout=timeout), absolute, auth


class _Watch:
    """The attempt's deadline: when it passes, shut down every socket the connection opened
    (the plain socket, under any TLS), which wakes whatever call is blocked on it."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float) -> None:
        self.fired = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        create = conn._create_connection  # type: ignore[attr-defined]

        def created(*args: Any, **kwargs: Any) -> socket.socket:
            sock: socket.socket = create(*args, **kwargs)
            with self._lock:
                self._sockets.append(sock)
            if self.fired.is_set():
                _shutdown(sock)
            return sock

        conn._create_connection = created  # type: ignore[attr-defined]
        self.timer = threading.Timer(seconds, self._fire)
        self.timer.daemon = True
        self.timer.start()

    def check(self) -> None:
        if self.fired.is_set():
            raise TimeoutError

    def _fire(self) -> None:
        self.fired.set()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
