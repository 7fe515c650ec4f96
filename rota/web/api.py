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

from .. import config, undeclared
from ..app import App
from ..client import damaged_status
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
from ..models import FINAL_STATUSES, STATUSES, iso
from ..quarantine import DamagedRowError
from ..serialization import check_text
from ..signals import durable_fields, parked_waits
from ..stores.base import RunFilter
from ..stores.flow_damage import damaged_specs
from . import records
from .params import integer as _int  # every numeric query parameter is parsed there

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
    if isinstance(exc, (TriggerRefused, DamagedRowError)):  # the state refuses it (a damaged row)
        return 409
    if isinstance(exc, ConfigurationError):
        return 400
    if isinstance(exc, DatabaseUnavailable):
        return 503
    return 500


async def rota_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RotaError)
    status = status_for(exc)
    message = shown(request, str(exc))
    if status >= 500:
        log.warning("%s %s: %s", request.method, request.url.path, message)
    return error_response(message, status)


def shown(request: Request, message: str) -> str:
    """`message` without passwords: the database URL as its label, then rota.config.redact_text
    (URL userinfo, password=... pairs, and the literal passwords of the App's URLs wherever a
    driver echoes them)."""
    app: App = request.app.state.rota
    url, label = app.database_url, app.database_label
    if url and url != label:
        message = message.replace(url, label)
    return config.redact_text(message, url, app.locks_url)


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


# -- input ----------------------------------------------------------------------------------
MAX_RUN_ID = 2**63 - 1


def _text(name: str, value: str) -> str:
    """A name or filter as the library takes it: a NUL or a lone surrogate (which an ASGI
    server may pass in a path) is a 400 naming the parameter, never a 500 from the driver."""
    if "\x00" in value:
        raise ConfigurationError(f"{name} must not contain a NUL character, got {value!r}")
    return check_text(name, value)


def _query(request: Request, allowed: set[str]) -> dict[str, str]:
    """The query parameters, empty ones dropped; an unknown name or a NUL is a 400 naming it."""
    params = {k: _text(k, v) for k, v in request.query_params.items() if v != ""}
    for name in request.query_params:
        if name not in allowed:
            valid = ", ".join(sorted(allowed)) or "none"
            raise ConfigurationError(f"unknown query parameter {name!r}{did_you_mean(name, allowed)}; valid: {valid}")
    return params


def _name(request: Request) -> str:
    return _text("schedule name", request.path_params["name"])


def _run_id(request: Request) -> int:
    """The path's run id; anything but an integer from 1 to 2**63-1 is an unknown run (404)."""
    raw: str = request.path_params["id"]
    if raw.isascii() and raw.isdigit() and len(raw) <= 19 and 1 <= int(raw) <= MAX_RUN_ID:
        return int(raw)
    raise RunNotFound(f"no run with id {raw!r}: run ids are integers from 1 to {MAX_RUN_ID}")


def _bool(params: Mapping[str, str], name: str) -> bool:
    raw = params.get(name, "0")
    if raw.lower() not in _BOOLEANS:
        raise ConfigurationError(f"{name} must be 1/true/yes or 0/false/no, got {raw!r}")
    return _BOOLEANS[raw.lower()]


def _status(params: Mapping[str, str]) -> str | None:
    status = params.get("status")
    if status is not None and status not in STATUSES:
        raise ConfigurationError(
            f"unknown status {status!r}{did_you_mean(status, STATUSES)}; valid: {', '.join(STATUSES)}"
        )
    return status


# -- reads ----------------------------------------------------------------------------------
async def stats(request: Request) -> Response:
    _query(request, set())
    return SafeJSONResponse(await _call(_app(request).stats))


async def schedules(request: Request) -> Response:
    params = _query(request, {"all"})
    items = await _call(_app(request).list_schedules, include_inactive=_bool(params, "all"))
    return SafeJSONResponse([s.to_json() for s in items])


async def schedule(request: Request) -> Response:
    info = await _call(_app(request).get_schedule, _name(request))
    return SafeJSONResponse(info.to_json())


async def runs(request: Request) -> Response:
    """Summaries, newest first: payloads cut to a preview (the full record is at /api/runs/{id})."""
    params = _query(request, {"status", "task", "schedule", "queue", "limit", "before", "damaged"})
    limit = _int(params, "limit", 50, 1, 1000)
    assert limit is not None
    damaged = _bool(params, "damaged")  # the runs set aside as damaged (rota.quarantine)
    flt = RunFilter(
        damaged_status(_status(params), damaged),
        params.get("task"),
        params.get("schedule"),
        params.get("queue"),
        limit,
        _int(params, "before", None, 1, MAX_RUN_ID),
        damaged,
    )
    store = await _call(lambda: _app(request).store)
    rows = await _call(store.run_rows, "web_run_summaries", flt, preview=records.PREVIEW + 1,
                       error_prefix=records.ERROR_PREFIX)  # fmt: skip
    items = [records.summary(tuple(r)) for r in rows]
    pending = {int(i["id"]): i for i in items if i.get("status") == "pending"}
    waits = await _call(parked_waits, store, list(pending))  # the parked ones' waits: one statement for the page
    for run_id, wait in waits.items():
        pending[run_id]["waiting"] = wait  # (a run parked: its sleep or signal; absent otherwise)
    return SafeJSONResponse(items)


async def run(request: Request) -> Response:
    return SafeJSONResponse(await _detail(request, _run_id(request)))


async def _detail(request: Request, run_id: int) -> dict[str, Any]:
    """The whole run as rota.web.records.detail reads it (tolerant of damaged values)."""
    store = await _call(lambda: _app(request).store)
    rows = await _call(store.run_rows, "web_run_detail", run_id=run_id)
    if not rows:
        raise RunNotFound(f"no run with id '{run_id}'")
    parents, dependents = await _call(store.run_links, run_id)
    waiting = await _call(store.run_rows, "web_run_waiting", run_id=run_id)
    detail = records.detail(tuple(rows[0]))
    durable = await _call(durable_fields, store, run_id, detail.get("status"))  # steps, a park's wait, progress
    durable = {k: v for k, v in durable.items() if v}  # as Run.to_json: only what the run has
    return (
        detail
        | durable
        | {
            "parents": [str(i) for i in parents],
            "dependents": [str(i) for i in dependents],
            "waiting_on": int(waiting[0][0]) if waiting else 0,
        }
    )


async def workers(request: Request) -> Response:
    _query(request, set())
    return SafeJSONResponse([w.to_json() for w in await _call(_app(request).list_workers)])


async def locks(request: Request) -> Response:
    _query(request, set())
    return SafeJSONResponse([lk.to_json() for lk in await _call(_app(request).list_locks)])


async def limits(request: Request) -> Response:
    """Concurrency limits and rates with their running and waiting counts: `rota limits --json`."""
    _query(request, set())
    return SafeJSONResponse(await _call(limit_records, _app(request)))


def limit_records(app: App) -> dict[str, Any]:
    """A store without flow control (no `list_limits`) has none to show."""
    store: Any = app.store
    if not hasattr(store, "list_limits"):
        return {"limits": [], "rates": [], "unresolved": 0, "damaged_specs": [], **undeclared.to_json([])}
    limits, rates = [i.to_json() for i in store.list_limits()], [r.to_json() for r in store.list_rates()]
    return {
        "limits": limits,
        "rates": rates,
        "unresolved": store.count_unresolved(),
        "damaged_specs": damaged_specs(store),
        **undeclared.to_json(store.undeclared_flow()),  # names runs use that no worker declared
    }


async def timeline(request: Request) -> Response:
    params = _query(request, {"minutes"})
    minutes = _int(params, "minutes", 60, 1, 24 * 60)
    assert minutes is not None
    return SafeJSONResponse(await _call(recent_runs, _app(request), minutes))


def recent_runs(app: App, minutes: int) -> dict[str, Any]:
    """Runs that started or finished in the last `minutes`, or are running, oldest first.

    Looks at the newest TIMELINE_LIMIT runs and every running one, reading only the columns
    drawn; `truncated` says the window reaches further back than that. A skipped tick has no
    start: it is an instant at its finish. A run whose times cannot be read is left out."""
    now = app.store.now()
    since = now - timedelta(minutes=minutes)
    end, start = now.timestamp(), since.timestamp()
    newest = app.store.run_rows("web_timeline", RunFilter(limit=TIMELINE_LIMIT))
    running = app.store.run_rows("web_timeline", RunFilter(status="running", limit=TIMELINE_LIMIT))
    picked: dict[int, tuple[float, dict[str, Any]]] = {}
    for row in (*running, *newest):
        began, finished = records.epoch(row[6]), records.epoch(row[7])
        first = began if began is not None else finished
        if first is not None and first <= end and (finished if finished is not None else end) >= start:
            picked[int(row[0])] = (first, _timeline_entry(tuple(row)))
    truncated = len(newest) == TIMELINE_LIMIT and _created_after(app, int(newest[-1][0]), start)
    ordered = sorted(picked.items(), key=lambda item: (item[1][0], item[0]))
    return {
        "since": iso(since),
        "until": iso(now),
        "minutes": minutes,
        "truncated": truncated,
        "runs": [entry for _, (_, entry) in ordered],
    }


def _created_after(app: App, run_id: int, start: float) -> bool:
    rows = app.store.run_rows("web_run_summaries", run_id=run_id, preview=1, error_prefix=1)
    created = records.epoch(rows[0][14]) if rows else None
    return created is not None and created >= start


def _timeline_entry(row: tuple[Any, ...]) -> dict[str, Any]:
    corrupt: list[str] = []
    return {
        "id": str(row[0]),
        "task": row[1],
        "schedule": row[2],
        "status": row[3],
        "attempt": row[4],
        "scheduled_for": records.time_field(row[5], "scheduled_for", corrupt),
        "started_at": records.time_field(row[6], "started_at", corrupt),
        "finished_at": records.time_field(row[7], "finished_at", corrupt),
        "worker": row[8],
    }


# -- actions --------------------------------------------------------------------------------
async def pause(request: Request) -> Response:
    info = await _call(_app(request).pause, _name(request))
    return SafeJSONResponse(info.to_json())


async def resume(request: Request) -> Response:
    info = await _call(_app(request).resume, _name(request))
    return SafeJSONResponse(info.to_json())


async def trigger(request: Request) -> Response:
    handle = await _call(_app(request).trigger, _name(request))
    return SafeJSONResponse(await _detail(request, int(handle.id)), status_code=201)


async def cancel(request: Request) -> Response:
    """Through the store (not App.cancel, which reads the run back as a Run): a damaged row
    can still be cancelled, and the answer is the tolerant detail record."""
    run_id = _run_id(request)
    store = await _call(lambda: _app(request).store)
    if await _call(store.cancel, run_id, "cancelled on request") is None:
        raise RunNotFound(f"no run with id '{run_id}'")
    return SafeJSONResponse(await _detail(request, run_id))


async def retry(request: Request) -> Response:
    run_id = _run_id(request)
    original = await _detail(request, run_id)
    if original["status"] not in FINAL_STATUSES:
        message = f"run {run_id} is still {original['status']}; wait for it or cancel it before retrying"
        return error_response(message, 409)
    unreadable = [name for name in ("args", "kwargs") if name in original["corrupt"]]
    if unreadable:
        message = f"run {run_id} cannot be retried: its stored {' and '.join(unreadable)} are not valid JSON"
        return error_response(message, 409)
    handle = await _call(_app(request).retry, str(run_id))
    return SafeJSONResponse(await _detail(request, int(handle.id)), status_code=201)


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
        Route("/api/limits", limits),
        Route("/api/timeline", timeline),
    ]
