"""Reads for the dashboard's detail pages: a schedule's ticks (next fire times with DST notes,
as `rota explain` prints them, and its recent ticks by outcome) and a worker's runs.

    GET /api/schedules/{name}/ticks?count=10&recent=60
    GET /api/workers/{id}
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..app import App
from ..errors import RotaError
from ..models import ScheduleInfo, iso
from ..stores.base import RunFilter
from ..timing.explain import explain
from .api import SafeJSONResponse, _app, _call, _name, _query, _timeline_entry, error_response
from .params import integer as _int

RECENT_BY_WORKER = 500  # the newest runs looked at for a worker's recent runs (no index on owner)


def next_ticks(info: ScheduleInfo, now: datetime, count: int) -> list[dict[str, Any]]:
    """The next `count` fire times from the schedule's next run (now if it has none, or is
    paused): UTC, local wall time and the DST note."""
    first = info.next_run_at if info.next_run_at is not None and not info.paused else now
    if info.cron is not None:
        try:
            fires = explain(info.cron, info.tz, after=first - timedelta(microseconds=1), count=count)
        except RotaError:
            return []
        return [{"at": iso(f.utc), "local": f.local.isoformat(), "note": f.note} for f in fires]
    if info.every is None:
        return []
    step: timedelta = info.every
    return [{"at": iso(first + step * i), "local": None, "note": None} for i in range(count)]


def schedule_ticks(app: App, name: str, count: int, recent: int) -> dict[str, Any]:
    info = app.get_schedule(name)
    now = app.store.now().astimezone(UTC)
    rows = app.store.run_rows("web_timeline", RunFilter(schedule=name, limit=recent))
    return {
        "name": name,
        "paused": info.paused,
        "next": next_ticks(info, now, count),
        "recent": [_timeline_entry(tuple(r)) for r in reversed(rows)],
    }


def worker_page(app: App, worker_id: str) -> dict[str, Any] | None:
    found = [w for w in app.list_workers() if w.id == worker_id]
    if not found:
        return None
    running = app.store.run_rows("web_timeline", RunFilter(status="running", limit=1000))
    newest = app.store.run_rows("web_timeline", RunFilter(limit=RECENT_BY_WORKER))
    mine = [_timeline_entry(tuple(r)) for r in running if r[8] == worker_id]
    recent = [_timeline_entry(tuple(r)) for r in newest if r[8] == worker_id and r[3] != "running"]
    return {"worker": found[0].to_json(), "running": mine, "recent": recent[:25], "looked_at": RECENT_BY_WORKER}


async def ticks(request: Request) -> Response:
    params = _query(request, {"count", "recent"})
    count = _int(params, "count", 10, 1, 100)
    recent = _int(params, "recent", 60, 1, 500)
    assert count is not None and recent is not None
    return SafeJSONResponse(await _call(schedule_ticks, _app(request), _name(request), count, recent))


async def worker(request: Request) -> Response:
    _query(request, set())
    worker_id: str = request.path_params["id"]
    page = await _call(worker_page, _app(request), worker_id)
    if page is None:
        return error_response(f"no worker with id {worker_id!r} seen recently", 404)
    return SafeJSONResponse(page)


def routes() -> list[BaseRoute]:
    return [
        Route("/api/schedules/{name:path}/ticks", ticks),
        Route("/api/workers/{id:path}", worker),
    ]
