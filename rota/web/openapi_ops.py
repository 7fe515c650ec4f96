"""The OpenAPI description of the API's changes made as data (rota.web.operate), apart from
rota.web.openapi (which imports it) to keep each module short."""

from __future__ import annotations

from typing import Any

from .schema_kit import BOOL, FIELDS, ID, INT, SCHEDULE, STR, TIME, _array, _json, _null, _obj, _op, _path, _ref


def operator_schemas() -> dict[str, Any]:
    return {
        "Queue": _obj(
            {
                "name": STR,
                "paused": BOOL,
                "pending": INT,
                "running": INT,
                "paused_at": _null(TIME),
                "paused_by": _null("string"),
            }
        )
    }


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": False, "content": {"application/json": {"schema": schema}}}


def operator_paths() -> dict[str, Any]:
    """Changes made as data (rota.web.operate): queues, schedules, runs of a declared task."""
    num = {"type": "number", "minimum": 0}
    schedule_fields: dict[str, Any] = {
        "cron": STR, "every": num, "tz": STR, "args": {"type": "array"}, "kwargs": {"type": "object"},
        "overlap": {"type": "string", "enum": ["skip", "queue", "concurrent", "replace"]},
        "misfire": {"type": "string", "enum": ["coalesce", "all", "skip"]}, "misfire_grace": num,
        "run_immediately": {"type": "boolean"}, "jitter": num, "queue": STR, "priority": INT, "retries": INT,
        "timeout": num,
    }  # fmt: skip
    new_schedule = _obj({"name": STR, "task": STR}, {**schedule_fields, "notify_on": FIELDS})
    changes = {"type": "object", "properties": {**schedule_fields, "task": STR, "notify_on": FIELDS}}
    enqueue = {"type": "object", "properties": {"args": {"type": "array"}, "kwargs": {"type": "object"}, "queue": STR,
               "priority": INT, "retries": INT, "timeout": num, "delay": num, "key": STR, "unique_for": num,
               "after": {"type": "array", "items": {"type": ["string", "integer"]}}, "defaults": BOOL}}  # fmt: skip
    queue = _path("name", {"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,100}$"})  # rota.tasks.check_queue
    queue_action = _op("", _json(_ref("Queue"), "The queue after the action"), params=[queue])
    changed = _json(_ref("Schedule"), "The schedule after the change")
    enqueued = _op(
        "Enqueue a run of a declared task",
        _json(_obj({"id": ID, "created": BOOL}), "The run"),
        status="201",
        params=[_path("name", {"type": "string", "minLength": 1})],
        errors=("404",),  # a name no route matches (a newline in it): not found, as JSON
    )
    enqueued["responses"]["200"] = _json(_obj({"id": ID, "created": BOOL}), "The pending run of the same key")
    return {
        "/api/schedules": {  # (its GET is rota.web.openapi's)
            "post": {
                **_op("Add a stored schedule", _json(_ref("Schedule"), "The new schedule"), status="201"),
                "requestBody": _body(new_schedule),
            }
        },
        "/api/queues": {"get": _op("Queues with active runs, and the paused ones", _json(_array("Queue"), "Queues"))},
        "/api/queues/{name}/pause": {"post": {**queue_action, "summary": "Pause a queue for every worker"}},
        "/api/queues/{name}/resume": {"post": {**queue_action, "summary": "Resume a paused queue"}},
        "/api/schedules/{name}/update": {
            "post": {
                **_op("Change a stored schedule", changed, params=[SCHEDULE], errors=("404", "409")),
                "requestBody": _body(changes),
            }
        },
        "/api/schedules/{name}/remove": {
            "post": _op("Remove a schedule (history stays)", changed, params=[SCHEDULE], errors=("404",))
        },
        "/api/tasks": {
            "get": _op("The task names some worker declares", _json({"type": "array", "items": STR}, "Tasks"))
        },
        "/api/tasks/{name}/enqueue": {"post": {**enqueued, "requestBody": _body(enqueue)}},
    }
