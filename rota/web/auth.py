"""Who may use the dashboard: a bearer token, a same-origin rule for actions, allowed hosts.

- With a token, every path except `/healthz` needs `Authorization: Bearer <token>` or the
  session cookie. A browser gets the cookie by signing in on the page (a form that POSTs
  the token to `/login`) or by opening `/?token=<token>` once, which redirects to `/` at
  once. The cookie holds an HMAC of the token, never the token; it is HttpOnly and
  SameSite=Lax. Tokens are compared with `hmac.compare_digest`.
- Actions (any method but GET/HEAD/OPTIONS) from another site are refused (403) whatever the
  credentials: browsers say where a request comes from (Sec-Fetch-Site, else Origin); a
  request that says nothing (curl, scripts) is not from a browser page and passes.
- `allowed_hosts` refuses other Host headers (403): `rota dashboard` sets it to the loopback
  names when it runs without a token, so a web page cannot reach the open dashboard through
  DNS rebinding.
- Every response carries nosniff, no-referrer, no-store and DENY framing headers.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable, Sequence
from urllib.parse import parse_qs, urlsplit

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import ConfigurationError
from .api import error_response

TOKEN_ENV = "ROTA_DASHBOARD_TOKEN"
COOKIE = "rota_dashboard"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_HEADERS = {
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


def resolve_token(token: str | None) -> str | None:
    """The token argument, else ROTA_DASHBOARD_TOKEN, else None (no auth)."""
    if token is None:
        token = os.environ.get(TOKEN_ENV) or None
    if token is not None and not token.strip():
        raise ConfigurationError(f"the dashboard token must not be empty; unset {TOKEN_ENV} to run without one")
    return token


class Credentials:
    def __init__(self, token: str) -> None:
        self._token = token.encode()
        self.cookie = hmac.new(self._token, b"rota dashboard session", hashlib.sha256).hexdigest()

    def token_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self._token)

    def request_ok(self, request: Request) -> bool:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self.token_ok(given.strip()):
            return True
        cookie = request.cookies.get(COOKIE)
        return cookie is not None and hmac.compare_digest(cookie.encode(), self.cookie.encode())

    def signed_in(self, request: Request) -> Response:
        """Redirect to the page (relative: works under a mount) with the session cookie set."""
        response = RedirectResponse("./", status_code=303)
        response.set_cookie(
            COOKIE,
            self.cookie,
            max_age=7 * 24 * 3600,
            path=(request.scope.get("root_path") or "") + "/",
            httponly=True,
            samesite="lax",
            secure=request.url.scheme == "https",
        )
        return response


def route_path(scope: Scope) -> str:
    """The path inside this app (without the prefix it may be mounted under)."""
    path: str = scope["path"]
    root: str = scope.get("root_path") or ""
    if root and path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/"):
        return path[len(root) :] or "/"
    return path


def cross_site(request: Request) -> bool:
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site not in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return False
    return urlsplit(origin).netloc.lower() != request.headers.get("host", "").lower()


def host_name(host_header: str) -> str:
    """'[::1]:8000' -> '[::1]', 'LocalHost:80' -> 'localhost'."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.rpartition(":")[0] if host.count(":") == 1 else host


class Guard:
    """ASGI middleware enforcing the rules in this module's docstring."""

    def __init__(self, app: ASGIApp, *, token: str | None, allowed_hosts: Sequence[str] | None = None) -> None:
        self.app = app
        self.credentials = Credentials(token) if token is not None else None
        self.allowed_hosts = _normalize_hosts(allowed_hosts) if allowed_hosts is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in _HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        request = Request(scope, receive)
        refusal = await self.refusal(request)
        if refusal is not None:
            await refusal(scope, receive, send_with_headers)
        else:
            await self.app(scope, receive, send_with_headers)

    async def refusal(self, request: Request) -> Response | None:
        """A response that ends the request here, or None to let it through."""
        if self.allowed_hosts is not None:
            host = host_name(request.headers.get("host", ""))
            if host not in self.allowed_hosts:
                return error_response(f"host {host!r} is not allowed here; open the dashboard on localhost", 403)
        if request.method not in SAFE_METHODS and cross_site(request):
            return error_response("cross-site request refused", 403)
        path = route_path(request.scope)
        if self.credentials is None or path == "/healthz":
            return None
        if path == "/login":
            return await self.login(request)
        if path == "/" and "token" in request.query_params:
            if self.credentials.token_ok(request.query_params["token"]):
                return self.credentials.signed_in(request)
            return login_page("That token is not right.")
        if self.credentials.request_ok(request):
            return None
        if path == "/":
            return login_page(None)
        return error_response(
            f"this dashboard needs a token: send Authorization: Bearer <token> (the value of {TOKEN_ENV})",
            401,
            {"www-authenticate": "Bearer"},
        )

    async def login(self, request: Request) -> Response:
        assert self.credentials is not None
        if request.method != "POST":
            return RedirectResponse("./", status_code=303)
        form = parse_qs((await request.body()).decode(errors="replace"))
        if self.credentials.token_ok((form.get("token") or [""])[0]):
            return self.credentials.signed_in(request)
        return login_page("That token is not right.")


def _normalize_hosts(hosts: Iterable[str]) -> frozenset[str]:
    result = set()
    for host in hosts:
        host = host.strip().lower()
        result.add(f"[{host}]" if ":" in host and not host.startswith("[") else host)
    return frozenset(result)


LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>rota: sign in</title>
<style>
body{font:15px/1.5 system-ui,sans-serif;display:grid;place-items:center;min-height:90vh;margin:0;
background:#fafafa;color:#1d1d1f}
form{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:1.5rem 2rem;display:grid;gap:.7rem;width:20rem}
input,button{font:inherit;padding:.35rem .5rem;border:1px solid #d1d5db;border-radius:5px}
button{background:#2563eb;color:#fff;border-color:#2563eb;cursor:pointer}
.note{color:#6b7280;font-size:.85rem}.bad{color:#dc2626}
</style></head><body>
<form method="post" action="login">
<strong>rota dashboard</strong>
<label for="token">Token</label>
<input id="token" name="token" type="password" autocomplete="current-password" autofocus required>
__MESSAGE__
<button type="submit">Sign in</button>
<span class="note">The token is the dashboard's ROTA_DASHBOARD_TOKEN (or --token).</span>
</form></body></html>
"""


def login_page(message: str | None) -> Response:
    """401 with a sign-in form. `message` is one of this module's constants, never user input."""
    note = f'<span class="bad">{message}</span>' if message else ""
    return HTMLResponse(
        LOGIN_PAGE.replace("__MESSAGE__", note),
        status_code=401,
        headers={
            "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
            "frame-ancestors 'none'; base-uri 'none'",
            "www-authenticate": "Bearer",
        },
    )
