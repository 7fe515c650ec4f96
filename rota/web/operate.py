"""The API's changes made as data (issue 44): queues paused fleet-wide, schedules added,
updated and removed, and runs of a declared task enqueued (as its code enqueues them if the
dashboard's App declares the task; by name only with `"defaults": true`). Each is checked as the
CLI and the Python API check it (rota.operate: a task must be declared by some worker), passes the dashboard's token and cross-site checks like every POST (rota.web.auth),
and is logged in one line naming who (the dashboard and the client's address) and what."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from .. import operate
from ..errors import ConfigurationError
from .api import SafeJSONResponse, _app, _call, _name, _query, _text
from .auth import client_of

# The JSON types each field of a body may have (validated before the library sees it: a wrong
# type is a 400 naming the field, never a 500).
_NUMBER = (int, float)
FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,), "task": (str,), "cron": (str,), "every": _NUMBER, "tz": (str,), "args": (list,),
    "kwargs": (dict,), "overlap": (str,), "misfire": (str,), "misfire_grace": _NUMBER, "run_immediately": (bool,),
    "jitter": _NUMBER, "queue": (str,), "priority": (int,), "retries": (int,), "timeout": _NUMBER,
    "notify_on": (list,), "delay": _NUMBER, "key": (str,), "unique_for": _NUMBER, "after": (list,),
    "defaults": (bool,),
}  # fmt: skip
# The fields that are numbers of seconds in a body.
SECONDS = frozenset({"every", "misfire_grace", "jitter", "timeout", "delay", "unique_for"})


def who(request: Request) -> str:
    return f"dashboard:{client_of(request)}"


async def body(request: Request, allowed: frozenset[str]) -> dict[str, Any]:
    """The request's JSON object, each field of an allowed name and type (null: not given)."""
    raw = await request.body()
    try:
        data = json.loads(raw) if raw.strip() else {}
    except (ValueError, UnicodeDecodeError):
        raise ConfigurationError("the body must be a JSON object (Content-Type: application/json)") from None
    if not isinstance(data, dict):
        raise ConfigurationError(f"the body must be a JSON object, got {type(data).__name__}")
    operate.check_fields(data, allowed, "body")
    fields = {k: v for k, v in data.items() if v is not None}
    for name, value in fields.items():
        kinds = FIELD_TYPES[name]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = {"str": "a string", "int": "an integer", "float": "a number", "list": "an array",
                     "dict": "an object", "bool": "a boolean"}[kinds[-1].__name__]  # fmt: skip
            seconds = " of seconds (90, not '90s')" if name in SECONDS else ""
            raise ConfigurationError(f"{name} must be {names}{seconds}, got {value!r}")
        if isinstance(value, str):
            _text(name, value)
    if "notify_on" in fields:
        fields["notify_on"] = tuple(fields["notify_on"])
    return fields


async def queues(request: Request) -> Response:
    _query(request, set())
    return SafeJSONResponse([q.to_json() for q in await _call(_app(request).list_queues)])


async def _steer_queue(request: Request, action: str) -> Response:
    _query(request, set())
    app, name, by = _app(request), _text("queue", request.path_params["name"]), who(request)
    info = await _call(app.pause_queue if action == "pause" else app.resume_queue, name, by=by)
    operate.audit(by, f"queue_{action}", name)
    return SafeJSONResponse(info.to_json())


async def pause_queue(request: Request) -> Response:
    return await _steer_queue(request, "pause")


async def resume_queue(request: Request) -> Response:
    return await _steer_queue(request, "resume")


async def add_schedule(request: Request) -> Response:
    _query(request, set())
    fields = await body(request, operate.SCHEDULE_FIELDS)
    info = await _call(operate.add_schedule, _app(request), fields, who(request))
    return SafeJSONResponse(info.to_json(), status_code=201)


async def update_schedule(request: Request) -> Response:
    _query(request, set())
    name, changes = _name(request), await body(request, operate.UPDATE_FIELDS)
    info = await _call(operate.update_schedule, _app(request), name, changes, who(request))
    return SafeJSONResponse(info.to_json())


async def remove_schedule(request: Request) -> Response:
    _query(request, set())
    app, name = _app(request), _name(request)
    await _call(operate.remove_schedule, app, name, who(request))
    return SafeJSONResponse((await _call(app.get_schedule, name)).to_json())


async def tasks(request: Request) -> Response:
    """The task names some worker declares (what enqueue and a schedule may name)."""
    _query(request, set())
    store = await _call(lambda: _app(request).store)
    return SafeJSONResponse(await _call(store.declared_tasks))


async def enqueue(request: Request) -> Response:
    """As the code enqueues it if the dashboard's App declares the task (its options, its
    argument check); else refused unless `"defaults": true` (by name, the default options)."""
    _query(request, set())
    task = _text("task", request.path_params["name"])
    fields = await body(request, operate.ENQUEUE_FIELDS | {"defaults"})
    by_name = fields.pop("defaults", False)
    run_id, created = await _call(operate.enqueue, _app(request), task, fields, who(request), by_name=by_name)
    return SafeJSONResponse({"id": run_id, "created": created}, status_code=201 if created else 200)


def routes() -> list[BaseRoute]:
    """Before api.routes(): its `/api/schedules/{name:path}` would take `.../update`."""
    return [
        Route("/api/queues", queues),
        Route("/api/queues/{name}/pause", pause_queue, methods=["POST"]),
        Route("/api/queues/{name}/resume", resume_queue, methods=["POST"]),
        Route("/api/schedules", add_schedule, methods=["POST"]),
        Route("/api/schedules/{name:path}/update", update_schedule, methods=["POST"]),
        Route("/api/schedules/{name:path}/remove", remove_schedule, methods=["POST"]),
        Route("/api/tasks", tasks),
        Route("/api/tasks/{name:path}/enqueue", enqueue, methods=["POST"]),
    ]
