"""The JSON API: reads and actions over an App, each store call in a worker thread.

Records have the CLI's `--json` shapes (`Run.to_json()`, `ScheduleInfo.to_json()`, ...).
Errors are `{"error": message}`: 400 for bad input (the message names the value), 404 for an
unknown run or schedule, 409 when the run's or schedule's state refuses the action, 503 when
the database is unreachable.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ..app import App
from ..errors import (
    ConfigurationError,
    DatabaseUnavailable,
    RotaError,
    RunNotFound,
    ScheduleNotFound,
    TaskNotFound,
    TriggerRefused,
    did_you_mean,
)
from ..models import Run, iso

T = TypeVar("T")
log = logging.getLogger("rota.web")

TIMELINE_LIMIT = 2000  # the newest runs a timeline looks at (plus every running one)
_BOOLEANS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


class SafeJSONResponse(JSONResponse):
    """JSON with `<`, `>` and `&` written as \\u escapes: user data (run arguments, error
    messages) stays inert even if a response is ever sniffed or embedded as HTML."""

    def render(self, content: Any) -> bytes:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()


def error_response(message: str, status: int, headers: Mapping[str, str] | None = None) -> Response:
    return SafeJSONResponse({"error": message}, status_code=status, headers=headers)


def status_for(exc: RotaError) -> int:
    if isinstance(exc, (RunNotFound, ScheduleNotFound, TaskNotFound)):
        return 404
    if isinstance(exc, TriggerRefused):
        return 409
    if isinstance(exc, ConfigurationError):
        return 400
    if isinstance(exc, DatabaseUnavailable):
        return 503
    return 500


async def rota_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RotaError)
    status = status_for(exc)
    if status >= 500:
        log.warning("%s %s: %s", request.method, request.url.path, exc)
    return error_response(str(exc), status)


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error_response(exc.detail, exc.status_code, exc.headers)


async def server_error(request: Request, exc: Exception) -> Response:
    return error_response("internal error (see the dashboard's log)", 500)


def _app(request: Request) -> App:
    app: App = request.app.state.rota
    return app


async def _call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Blocking store work runs in a worker thread, never on the event loop."""
    return await run_in_threadpool(fn, *args, **kwargs)


# -- query parameters ---------------------------------------------------------------------
def _query(request: Request, allowed: set[str]) -> dict[str, str]:
    """The query parameters, empty ones dropped; an unknown name is a 400 naming it."""
    params = {k: v for k, v in request.query_params.items() if v != ""}
    for name in request.query_params:
        if name not in allowed:
            valid = ", ".join(sorted(allowed)) or "none"
            raise ConfigurationError(f"unknown query parameter {name!r}{did_you_mean(name, allowed)}; valid: {valid}")
    return params


def _int(params: Mapping[str, str], name: str, default: int | None, low: int, high: int) -> int | None:
    raw = params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise ConfigurationError(f"{name} must be an integer from {low} to {high}, got {raw!r}")
    return value


def _bool(params: Mapping[str, str], name: str) -> bool:
    raw = params.get(name, "0")
    if raw.lower() not in _BOOLEANS:
        raise ConfigurationError(f"{name} must be 1/true/yes or 0/false/no, got {raw!r}")
    return _BOOLEANS[raw.lower()]


# -- reads ----------------------------------------------------------------------------------
async def stats(request: Request) -> Response:
    _query(request, set())
    return SafeJSONResponse(await _call(_app(request).stats))


async def schedules(request: Request) -> Response:
    params = _query(request, {"all"})
    items = await _call(_app(request).list_schedules, include_inactive=_bool(params, "all"))
    return SafeJSONResponse([s.to_json() for s in items])


async def schedule(request: Request) -> Response:
    info = await _call(_app(request).get_schedule, request.path_params["name"])
    return SafeJSONResponse(info.to_json())


async def runs(request: Request) -> Response:
    params = _query(request, {"status", "task", "schedule", "queue", "limit", "before"})
    items = await _call(
        _app(request).list_runs,
        params.get("status"),
        params.get("task"),
        params.get("schedule"),
        _int(params, "limit", 50, 1, 1000),
        queue=params.get("queue"),
        before=_int(params, "before", None, 1, 2**63 - 1),
    )
    return SafeJSONResponse([r.to_json() for r in items])


async def run(request: Request) -> Response:
    found = await _call(_app(request).get_run, request.path_params["id"])
    return SafeJSONResponse(found.to_json())


async def workers(request: Request) -> Response:
    _query(request, set())
    return SafeJSONResponse([w.to_json() for w in await _call(_app(request).list_workers)])


async def locks(request: Request) -> Response:
    _query(request, set())
    return SafeJSONResponse([lk.to_json() for lk in await _call(_app(request).list_locks)])


async def timeline(request: Request) -> Response:
    params = _query(request, {"minutes"})
    minutes = _int(params, "minutes", 60, 1, 24 * 60)
    assert minutes is not None
    return SafeJSONResponse(await _call(recent_runs, _app(request), minutes))


def recent_runs(app: App, minutes: int) -> dict[str, Any]:
    """Runs that started or finished in the last `minutes`, or are running, oldest first.

    Looks at the newest TIMELINE_LIMIT runs and every running one; `truncated` says the
    window reaches further back than that. A skipped tick has no start: it is an instant
    at its finish."""
    now = app.store.now()
    since = now - timedelta(minutes=minutes)
    newest = app.list_runs(limit=TIMELINE_LIMIT)
    running = app.list_runs(status="running", limit=TIMELINE_LIMIT)
    picked: dict[str, Run] = {}
    for r in (*running, *newest):
        start = r.started_at or r.finished_at
        if start is not None and start <= now and (r.finished_at or now) >= since:
            picked[r.id] = r
    oldest = newest[-1] if newest else None
    truncated = len(newest) == TIMELINE_LIMIT and oldest is not None and oldest.created_at >= since
    ordered = sorted(picked.values(), key=lambda r: (r.started_at or r.finished_at or now, int(r.id)))
    return {
        "since": iso(since),
        "until": iso(now),
        "minutes": minutes,
        "truncated": truncated,
        "runs": [_timeline_entry(r) for r in ordered],
    }


def _timeline_entry(r: Run) -> dict[str, Any]:
    data = r.to_json()
    fields = ("id", "task", "schedule", "status", "attempt", "scheduled_for", "started_at", "finished_at", "worker")
    return {name: data[name] for name in fields}


# -- actions --------------------------------------------------------------------------------
async def pause(request: Request) -> Response:
    info = await _call(_app(request).pause, request.path_params["name"])
    return SafeJSONResponse(info.to_json())


async def resume(request: Request) -> Response:
    info = await _call(_app(request).resume, request.path_params["name"])
    return SafeJSONResponse(info.to_json())


async def trigger(request: Request) -> Response:
    app = _app(request)
    handle = await _call(app.trigger, request.path_params["name"])
    created = await _call(handle.refresh)
    return SafeJSONResponse(created.to_json(), status_code=201)


async def cancel(request: Request) -> Response:
    cancelled = await _call(_app(request).cancel, request.path_params["id"])
    return SafeJSONResponse(cancelled.to_json())


async def retry(request: Request) -> Response:
    app = _app(request)
    original = await _call(app.get_run, request.path_params["id"])
    if not original.is_final:
        return error_response(
            f"run {original.id} is still {original.status}; wait for it or cancel it before retrying",
            409,
        )
    handle = await _call(app.retry, original.id)
    created = await _call(handle.refresh)
    return SafeJSONResponse(created.to_json(), status_code=201)


def routes() -> list[BaseRoute]:
    """Schedule names may contain '/', hence `:path` (actions are matched first)."""
    return [
        Route("/api/stats", stats),
        Route("/api/schedules", schedules),
        Route("/api/schedules/{name:path}/pause", pause, methods=["POST"]),
        Route("/api/schedules/{name:path}/resume", resume, methods=["POST"]),
        Route("/api/schedules/{name:path}/trigger", trigger, methods=["POST"]),
        Route("/api/schedules/{name:path}", schedule),
        Route("/api/runs", runs),
        Route("/api/runs/{id}", run),
        Route("/api/runs/{id}/cancel", cancel, methods=["POST"]),
        Route("/api/runs/{id}/retry", retry, methods=["POST"]),
        Route("/api/workers", workers),
        Route("/api/locks", locks),
        Route("/api/timeline", timeline),
    ]
