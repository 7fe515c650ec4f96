"""The web dashboard, JSON API and Prometheus metrics (`pip install 'rota[web]'`).

    web = rota.web.create_app(app, token="...")   # any ASGI server; or `rota dashboard APP`

Routes (JSON unless said otherwise; records shaped as the CLI's `--json`):

    GET  /                      the dashboard page (HTML; renders from the API in the browser)
    GET  /healthz               {"status": "ok"}, never needs the token
    POST /login, /logout        sign in with the token (a form field), sign out
    GET  /api/openapi.json      the OpenAPI 3.1 description of the API below
    GET  /metrics               Prometheus text (rota.web.metrics)
    GET  /api/stats             counts by status, live workers, capacity
    GET  /api/schedules[?all=1]             GET /api/schedules/{name}
    GET  /api/runs?status=&task=&schedule=&queue=&limit=&before=  (summaries)  GET /api/runs/{id}
    GET  /api/workers           GET /api/locks      GET /api/limits (limits and rates, as `rota limits --json`)
    GET  /api/timeline?minutes=60           runs that started/finished in the window
    GET  /api/charts/throughput|lateness?window=15m|1h|24h|7d&task=&queue=    (rota.web.charts)
    GET  /api/charts/backlog    GET /api/schedules/{name}/ticks?count=    GET /api/workers/{id}
    GET  /static/NAME           the page's scripts and style sheet (rota.web.static)
    POST /api/schedules/{name}/pause|resume|trigger
    POST /api/runs/{id}/cancel|retry
    POST /api/runs/bulk         retry or cancel every run a filter matches (rota.web.bulk)
    GET  /api/queues, /api/tasks
    POST /api/queues/{name}/pause|resume, /api/schedules (add), /api/schedules/{name}/update|remove,
         /api/tasks/{name}/enqueue

Auth (token argument, else ROTA_DASHBOARD_TOKEN; a read-only second token, else
ROTA_DASHBOARD_READONLY_TOKEN), allowed hosts and the body limit are
described in rota.web.auth; sessions and the sign-in throttle in rota.web.sessions.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from functools import cache
from importlib import resources

try:
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
    from starlette.routing import BaseRoute, Route
except ImportError as exc:  # pragma: no cover - depends on extras
    raise ImportError(f"rota.web needs the web extra: pip install 'rota[web]' ({exc})") from exc

from ..app import App
from ..errors import ConfigurationError, RotaError
from . import api, bulk, charts, openapi, operate, pages
from .auth import LOGIN_BODY_LIMIT, MAX_BODY, ROLE_KEY, TOKEN_ENV, Guard, resolve_readonly, resolve_token
from .metrics import make_registry, metrics
from .sessions import SESSION_TTL, LoginThrottle, Sessions
from .static import static_file

__all__ = ["MIN_TOKEN", "check_open", "check_token_length", "create_app", "is_loopback", "serve"]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def create_app(
    app: App,
    *,
    token: str | None = None,
    allowed_hosts: Sequence[str] | None = None,
    max_body: int = MAX_BODY,
    session_ttl: float = SESSION_TTL,
    readonly_token: str | None = None,
) -> Starlette:
    """An ASGI app serving the dashboard for `app`.

    `token` (else ROTA_DASHBOARD_TOKEN) guards every route but /healthz; a browser signs in
    for `session_ttl` seconds. `allowed_hosts` are the Host names answered: by default the
    loopback names without a token and any name with one; `["*"]` answers any name.
    Request bodies over `max_body` bytes are refused (413). `readonly_token` (else
    ROTA_DASHBOARD_READONLY_TOKEN) signs in a role that can look but not act."""
    token = resolve_token(token)
    readonly = resolve_readonly(readonly_token, token)
    hosts = _allowed_hosts(token, allowed_hosts)
    if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < LOGIN_BODY_LIMIT:
        raise ConfigurationError(f"max_body must be an integer of at least {LOGIN_BODY_LIMIT} bytes, got {max_body!r}")
    if (
        isinstance(session_ttl, bool)
        or not isinstance(session_ttl, (int, float))
        or not 60 <= session_ttl <= 366 * 86400
    ):
        raise ConfigurationError(f"session_ttl must be from 60 to {366 * 86400} seconds, got {session_ttl!r}")
    sessions = Sessions(token, ttl=session_ttl, store=lambda: app.store) if token is not None else None
    viewers = Sessions(readonly, ttl=session_ttl, store=lambda: app.store) if readonly is not None else None
    throttle = LoginThrottle()
    guard = Middleware(Guard, token=token, allowed_hosts=hosts, max_body=max_body, sessions=sessions, throttle=throttle,
                       readonly=viewers)  # fmt: skip
    web = Starlette(
        routes=_routes(),
        middleware=[guard],
        exception_handlers={
            RotaError: api.rota_error,
            HTTPException: api.http_error,
            Exception: api.server_error,
        },
    )
    web.state.rota = app
    web.state.registry = make_registry(app)
    web.state.sessions = sessions
    web.state.throttle = throttle
    return web


def _routes() -> list[BaseRoute]:
    """Every route; the page's own ones first, then the API (charts and detail pages before
    api.routes(), whose `/api/schedules/{name:path}` would take `.../ticks`)."""
    return [
        Route("/", page),
        Route("/healthz", healthz),
        Route("/login", signed_in, methods=["GET", "POST"]),
        Route("/logout", signed_in, methods=["GET", "POST"]),
        Route("/metrics", metrics),
        Route("/api/openapi.json", openapi.describe),
        Route("/static/{name}", static_file),
        *charts.routes(),
        *pages.routes(),
        *bulk.routes(),
        *operate.routes(),
        *api.routes(),
    ]


def _allowed_hosts(token: str | None, hosts: Sequence[str] | None) -> list[str] | None:
    """None answers any Host; bad entries are refused here, not at the first request."""
    if hosts is None:
        return None if token is not None else list(LOOPBACK_NAMES)
    if isinstance(hosts, str):
        raise ConfigurationError(f"allowed_hosts must be a list of host names, got the string {hosts!r}")
    for host in hosts:
        if not isinstance(host, str) or not host.strip() or any(c in host for c in "/ @\x00"):
            raise ConfigurationError(f"allowed_hosts entries must be host names like 'localhost', got {host!r}")
    return None if "*" in hosts else list(hosts)


SIGNOUT = '<form class="signout" method="post" action="logout"><button type="submit">sign out</button></form>'


@cache
def _page_source() -> str:
    return resources.files(__package__).joinpath("dashboard.html").read_text(encoding="utf-8")


PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


async def page(request: Request) -> Response:
    """The page has no server-side data and no inline code in it: its scripts and style sheet
    are the package's own files under /static/ (rota.web.static), the only ones the CSP admits."""
    signed = request.app.state.sessions is not None
    role = request.scope.get(ROLE_KEY, "admin")  # set by the Guard; no token: the open dashboard acts
    html = _page_source().replace("__SIGNOUT__", SIGNOUT if signed else "").replace("__ROLE__", role)
    csp = PAGE_CSP
    return HTMLResponse(html, headers={"content-security-policy": csp})


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def signed_in(request: Request) -> Response:
    """/login and /logout without a token configured (with one, rota.web.auth answers them)."""
    return RedirectResponse("./", status_code=303)


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve(
    app: App,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    token: str | None = None,
    allowed_hosts: Sequence[str] | None = None,
    forwarded_allow_ips: Sequence[str] | None = None,
) -> None:
    """Run the dashboard with uvicorn until interrupted. Without a token it only binds to a
    loopback address, and only answers requests addressed to a loopback name (or to
    `allowed_hosts`, which otherwise defaults as in create_app; `*` needs a token).
    X-Forwarded-For/-Proto are believed only from the proxies in `forwarded_allow_ips`
    (addresses, networks or `*`); by default the client is the peer itself."""
    import uvicorn

    token = resolve_token(token)
    check_open(token, host, allowed_hosts)
    allowed = allowed_hosts if allowed_hosts is not None else None if token else (*LOOPBACK_NAMES, host)
    web = create_app(app, token=token, allowed_hosts=allowed)
    proxies = list(forwarded_allow_ips or ())
    print(
        f"rota dashboard for {app.database_label} on {_banner(host, port, token, allowed_hosts, proxies)}", flush=True
    )
    # No access log: a browser's first visit may carry ?token= in its URL.
    uvicorn.run(
        web,
        host=host,
        port=port,
        access_log=False,
        log_level="info",
        proxy_headers=bool(proxies),  # uvicorn's default believes any loopback peer
        forwarded_allow_ips=proxies or None,
    )


def check_open(token: str | None, host: str, allowed_hosts: Sequence[str] | None) -> None:
    """Refuse what an open dashboard (no token) must not do: a public bind, or any Host name."""
    if token is not None:
        return
    how = (
        f"Set {TOKEN_ENV} (e.g. export {TOKEN_ENV}=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')) "
        "or pass --token"
    )
    if not is_loopback(host):
        raise ConfigurationError(
            f"refusing to serve the dashboard on {host!r} without a token: anyone who can reach it could "
            f"trigger and cancel runs. {how}, or bind to 127.0.0.1"
        )
    if allowed_hosts is not None and "*" in allowed_hosts:
        raise ConfigurationError(
            "refusing --allowed-host '*' (ROTA_DASHBOARD_ALLOWED_HOSTS=*) without a token: any web page you "
            f"visit could reach the dashboard through DNS rebinding and trigger or cancel runs. {how}, "
            "or name the hosts (e.g. --allowed-host dash.internal)"
        )


MIN_TOKEN = 16  # characters: the shortest token `rota dashboard` serves with


def check_token_length(token: str | None, source: str) -> None:
    """Refuse a token shorter than MIN_TOKEN (`source`: the flag or variable that gave it;
    the token itself is never shown)."""
    if token is not None and len(token) < MIN_TOKEN:
        raise ConfigurationError(
            f"the token from {source} is {len(token)} characters long; a dashboard token needs at least "
            f"{MIN_TOKEN} (e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )


def _banner(host: str, port: int, token: str | None, allowed: Sequence[str] | None, proxies: list[str]) -> str:
    shown = f"[{host}]" if ":" in host else host
    if token:
        how = "sign in with the token"
    elif allowed is None:
        how = "no token: loopback only"
    else:
        how = f"no token: loopback only, answering Host {', '.join(allowed)}"
    if proxies:
        how += f"; believing X-Forwarded-For from {', '.join(proxies)}"
    return f"http://{shown}:{port}/ ({how})"
