"""Who may use the dashboard: a bearer token or a session, a same-origin rule for actions,
allowed hosts, a limit on request bodies.

- With a token, every path except `/healthz` needs `Authorization: Bearer <token>` or a
  session cookie. A browser gets the cookie by signing in on the page (a form that POSTs
  the token to `/login`) or by opening `/?token=<token>` once, which redirects to `/` at
  once; `POST /logout` ends the session. The cookie is signed, expires and never holds the
  token (rota.web.sessions); it is HttpOnly and SameSite=Lax. A sign-out is kept in the
  database, so it holds across restarts and for every dashboard on that database. Failed
  sign-ins are logged and throttled per client (429 with Retry-After); the client is the TCP
  peer unless `rota dashboard --forwarded-allow-ips` names trusted proxies. Tokens are
  compared with `hmac.compare_digest`.
- Actions (any method but GET/HEAD/OPTIONS) from another site are refused (403) whatever the
  credentials: browsers say where a request comes from (Sec-Fetch-Site, else Origin); a
  request that says nothing (curl, scripts) is not from a browser page and passes.
- A second, read-only token (`readonly_token`, else ROTA_DASHBOARD_READONLY_TOKEN) signs in
  the same ways but can only look: every action (any method but GET/HEAD/OPTIONS, sign-in
  and sign-out aside) is refused with 403, and the page hides its buttons. Its sessions are
  signed with a key derived from it, so they never pass as full sessions.
- `allowed_hosts` refuses other Host headers (403). Without a token the default is the
  loopback names, so a web page cannot reach an open dashboard through DNS rebinding.
- A request body larger than `max_body` bytes is refused with 413 before it is read (from
  its Content-Length) or as soon as it grows past the limit (chunked); `/login` reads at most
  LOGIN_BODY_LIMIT bytes.
- Every response carries nosniff, no-referrer, no-store and DENY framing headers.
"""

from __future__ import annotations

import hmac
import logging
import math
import os
from collections.abc import Iterable
from urllib.parse import parse_qs, urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..config import redact_text
from ..errors import ConfigurationError, RotaError
from .api import error_response
from .sessions import LoginThrottle, Sessions

TOKEN_ENV = "ROTA_DASHBOARD_TOKEN"
READONLY_ENV = "ROTA_DASHBOARD_READONLY_TOKEN"
ROLE_KEY = "rota.role"  # in the ASGI scope: "admin" or "readonly" (absent: no token configured)
COOKIE = "rota_dashboard"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
MAX_BODY = 64 * 1024  # bytes; the API's actions take no body, the sign-in form a few bytes
LOGIN_BODY_LIMIT = 4096
_HEADERS = {
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}
log = logging.getLogger("rota.web")


def resolve_token(token: str | None) -> str | None:
    """The token argument, else ROTA_DASHBOARD_TOKEN, else None (no auth)."""
    if token is None:
        token = os.environ.get(TOKEN_ENV) or None
    if token is not None and not token.strip():
        raise ConfigurationError(f"the dashboard token must not be empty; unset {TOKEN_ENV} to run without one")
    return token


def resolve_readonly(readonly: str | None, token: str | None) -> str | None:
    """The read-only token argument, else ROTA_DASHBOARD_READONLY_TOKEN, else None. It needs a
    (different) full token: without one the dashboard is open and a read-only role means nothing."""
    if readonly is None:
        readonly = os.environ.get(READONLY_ENV) or None
    if readonly is None:
        return None
    if not readonly.strip():
        raise ConfigurationError(f"the read-only token must not be empty; unset {READONLY_ENV} to have none")
    if token is None:
        raise ConfigurationError(f"a read-only token ({READONLY_ENV}) needs a full token too: set {TOKEN_ENV}")
    if hmac.compare_digest(readonly.encode(), token.encode()):
        raise ConfigurationError(f"the read-only token must differ from the full token ({TOKEN_ENV})")
    return readonly


class BodyTooLarge(Exception):
    pass


class Credentials:
    def __init__(self, token: str, sessions: Sessions, readonly: Sessions | None = None) -> None:
        self._tokens = {"admin": token.encode()}
        self.sessions = sessions
        self.by_role = {"admin": sessions}
        if readonly is not None:
            self._tokens["readonly"] = readonly.token.encode()
            self.by_role["readonly"] = readonly

    def role_of_token(self, given: str | None) -> str | None:
        """ "admin", "readonly" or None; every token is compared (constant time each)."""
        if given is None:
            return None
        raw = given.encode(errors="replace")
        matched = [role for role, token in self._tokens.items() if hmac.compare_digest(raw, token)]
        return matched[0] if matched else None

    def token_ok(self, given: str | None) -> bool:
        return self.role_of_token(given) is not None

    def bearer_role(self, request: Request) -> str | None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return self.role_of_token(given.strip()) if scheme.lower() == "bearer" else None

    def bearer_ok(self, request: Request) -> bool:
        return self.bearer_role(request) is not None

    async def request_role(self, request: Request) -> str | None:
        """The bearer token's role, else a session's (checked in a worker thread: it asks the
        database), else None."""
        role = self.bearer_role(request)
        if role is not None:
            return role
        cookie = request.cookies.get(COOKIE)
        if cookie is None:
            return None
        for role, sessions in self.by_role.items():
            if await run_in_threadpool(sessions.valid, cookie):
                return role
        return None

    async def request_ok(self, request: Request) -> bool:
        return await self.request_role(request) is not None

    def signed_in(self, request: Request, role: str = "admin") -> Response:
        """Redirect to the page (relative: works under a mount) with a new session cookie."""
        response = RedirectResponse("./", status_code=303)
        response.set_cookie(
            COOKIE,
            self.by_role[role].issue(),
            max_age=int(self.sessions.ttl),
            path=_cookie_path(request),
            httponly=True,
            samesite="lax",
            secure=request.url.scheme == "https",
        )
        return response

    async def signed_out(self, request: Request) -> Response:
        """Forget the cookie in the browser, and the session here and in the database; if the
        database cannot record it, say so (503): other dashboards may still accept it."""
        response: Response = RedirectResponse("./", status_code=303)
        try:
            for sessions in self.by_role.values():  # a cookie is signed by one of them at most
                await run_in_threadpool(sessions.revoke, request.cookies.get(COOKIE))
        except RotaError as exc:
            log.error("dashboard sign-out not recorded in the database: %s", redact_text(str(exc)))
            response = error_response(
                "signed out of this dashboard, but the database could not record the sign-out: another "
                "dashboard on this database would still accept a copy of this cookie until it expires",
                503,
            )
        response.delete_cookie(COOKIE, path=_cookie_path(request), httponly=True, samesite="lax")
        return response


def _cookie_path(request: Request) -> str:
    return (request.scope.get("root_path") or "") + "/"


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


def client_of(request: Request) -> str:
    return request.client.host if request.client is not None else "unknown"


def declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class Guard:
    """ASGI middleware enforcing the rules in this module's docstring."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None,
        allowed_hosts: Iterable[str] | None = None,
        max_body: int = MAX_BODY,
        sessions: Sessions | None = None,
        throttle: LoginThrottle | None = None,
        readonly: Sessions | None = None,
    ) -> None:
        self.app = app
        self.credentials = Credentials(token, sessions or Sessions(token), readonly) if token is not None else None
        self.allowed_hosts = normalize_hosts(allowed_hosts) if allowed_hosts is not None else None
        self.max_body = max_body
        self.throttle = throttle or LoginThrottle()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = MutableHeaders(scope=message)
                for name, value in _HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        limited = self.limited(receive)
        request = Request(scope, limited)
        try:
            refusal = await self.refusal(request)
            if refusal is not None:
                await refusal(scope, limited, send_with_headers)
            else:
                await self.app(scope, limited, send_with_headers)
        except BodyTooLarge:
            if not started:
                await self.too_large()(scope, receive, send_with_headers)

    def too_large(self) -> Response:
        return error_response(f"request body too large: at most {self.max_body} bytes", 413, {"connection": "close"})

    def limited(self, receive: Receive) -> Receive:
        """`receive`, raising BodyTooLarge once the body passes max_body bytes."""
        seen = 0

        async def receive_limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise BodyTooLarge
            return message

        return receive_limited

    async def refusal(self, request: Request) -> Response | None:
        """A response that ends the request here, or None to let it through."""
        if self.allowed_hosts is not None:
            host = host_name(request.headers.get("host", ""))
            if host not in self.allowed_hosts:
                shown = ", ".join(sorted(self.allowed_hosts))
                return error_response(f"host {host!r} is not allowed here; open the dashboard as one of: {shown}", 403)
        length = declared_length(request.scope)
        if length is not None and length > self.max_body:
            return self.too_large()
        if request.method not in SAFE_METHODS and cross_site(request):
            return error_response("cross-site request refused", 403)
        path = route_path(request.scope)
        if self.credentials is None or path == "/healthz":
            return None
        if path == "/login":
            return await self.login(request)
        if path == "/logout":
            return await self.credentials.signed_out(request) if request.method == "POST" else None
        if path == "/" and "token" in request.query_params:
            return self.attempt(request, request.query_params["token"])
        bearer = "authorization" in request.headers
        if bearer and (wait := self.throttle.wait(client_of(request))) > 0:
            seconds = math.ceil(wait)
            return error_response(
                f"too many wrong tokens: try again in {seconds} s", 429, {"retry-after": str(seconds)}
            )
        try:
            role = await self.credentials.request_role(request)
        except RotaError as exc:
            log.warning("dashboard session not checked: %s", redact_text(str(exc)))
            return error_response("database unavailable: cannot check the session", 503)
        if role is not None:
            if bearer:
                self.throttle.succeeded(client_of(request))
            request.scope[ROLE_KEY] = role
            if role == "readonly" and request.method not in SAFE_METHODS:
                return error_response("read-only token: this dashboard session can look but not act", 403)
            return None
        if bearer:
            self.failed(request)
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
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > LOGIN_BODY_LIMIT:
                return error_response(f"sign-in form too large: at most {LOGIN_BODY_LIMIT} bytes", 413)
        form = parse_qs(body.decode(errors="replace"))
        return self.attempt(request, (form.get("token") or [""])[0])

    def attempt(self, request: Request, given: str) -> Response:
        """A sign-in attempt: throttled per client, logged when it fails."""
        assert self.credentials is not None
        client = client_of(request)
        wait = self.throttle.wait(client)
        if wait > 0:
            seconds = math.ceil(wait)
            return login_page(f"Too many wrong tokens. Try again in {seconds} s.", 429, {"retry-after": str(seconds)})
        role = self.credentials.role_of_token(given)
        if role is not None:
            self.throttle.succeeded(client)
            log.info("dashboard sign-in from %s (%s)", client, role)
            return self.credentials.signed_in(request, role)
        self.failed(request)
        return login_page("That token is not right.")

    def failed(self, request: Request) -> None:
        client = client_of(request)
        failures = self.throttle.failed(client)
        log.warning("dashboard sign-in failed from %s (%d in a row)", client, failures)


def normalize_hosts(hosts: Iterable[str]) -> frozenset[str]:
    result = set()
    for host in hosts:
        host = host.strip().lower()
        result.add(f"[{host}]" if ":" in host and not host.startswith("[") else host)
    return frozenset(result)


LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>rota: sign in</title><link rel="icon" href="data:,">
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


def login_page(message: str | None, status: int = 401, headers: dict[str, str] | None = None) -> Response:
    """A sign-in form. `message` is made here from constants and numbers, never user input."""
    note = f'<span class="bad">{message}</span>' if message else ""
    return HTMLResponse(
        LOGIN_PAGE.replace("__MESSAGE__", note),
        status_code=status,
        headers={
            **(headers or {}),
            "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; "
            "frame-ancestors 'none'; base-uri 'none'",
            "www-authenticate": "Bearer",
        },
    )
