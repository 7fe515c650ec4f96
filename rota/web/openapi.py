"""The OpenAPI 3.1 description of the JSON API, served at `/api/openapi.json`.

Written by hand next to the handlers (rota.web.api); tests/test_web_contract.py checks the
API against it (schemathesis), so a change to one without the other fails there.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .openapi_ops import operator_paths, operator_schemas
from .schema_kit import (
    ANY,
    BOOL,
    CORRUPT,
    ERROR,
    FIELDS,
    ID,
    INT,
    NUM,
    SCHEDULE,
    STATUS,
    STORED_ERROR,
    STR,
    TIME,
    _array,
    _json,
    _null,
    _obj,
    _op,
    _path,
    _query,
    _ref,
)

RUN_COMMON = {
    "id": ID,
    "task": STR,
    "status": STATUS,
    "queue": STR,
    "priority": INT,
    "key": _null("string"),
    "schedule": _null("string"),
    "scheduled_for": _null(TIME),
    "attempt": INT,
    "max_attempts": INT,
    "worker": _null("string"),
    "token": _null("integer"),
    "lease_until": _null(TIME),
    "cancel_requested": BOOL,
    "held": BOOL,  # claimed by a worker, its handler not started (rota/lifecycle.py)
    "created_at": _null(TIME),
    "started_at": _null(TIME),
    "finished_at": _null(TIME),
    "retry_of": _null(ID),
    "backfill": BOOL,
    "corrupt": FIELDS,
}
ATTEMPT = {
    "type": "object",
    "properties": {
        "attempt": INT,
        "worker": _null("string"),
        "status": STR,
        "error": ANY,
        "started_at": _null(TIME),  # null on a held run's loss ("held": true)
        "finished_at": _null(TIME),
        "held": BOOL,
        "token": INT,
    },
}
# durable steps (rota/durable.py): a run's saved steps, what a pending run waits for, its progress
STEP = _obj({"name": STR, "seq": INT, "attempt": INT, "started_at": _null(TIME), "finished_at": _null(TIME),
             "outcome": STR, "error": ANY})  # fmt: skip
WAITING = _obj(
    {"kind": {"type": "string", "enum": ["sleep", "signal", "rate", "undeclared"]}, "until": _null(TIME)},
    # rate: its window; undeclared: the limit and/or rate no worker declared (rota/undeclared.py)
    {"signal": _null("string"), "since": _null(TIME), "rate": STR, "key": _null("string"), "limit": STR},
)
PROGRESS = _obj({"fraction": NUM, "message": _null("string"), "at": _null(TIME)})
SCHEMAS: dict[str, Any] = {
    "Error": ERROR,
    "RunSummary": _obj(
        {
            **RUN_COMMON,
            "args_preview": STR,
            "kwargs_preview": STR,
            "result_preview": _null("string"),
            "error": STORED_ERROR,
            "truncated": FIELDS,
        },
        {"waiting_on": INT, "waiting": WAITING},  # waiting: a parked run's sleep or signal
    ),
    "Run": _obj(
        {
            **RUN_COMMON,
            "args": ANY,
            "kwargs": ANY,
            "result": ANY,
            "error": ANY,
            "attempts": {"type": "array", "items": ATTEMPT},
            "raw": {"type": "object", "additionalProperties": STR},
        },
        {
            "parents": {"type": "array", "items": ID},
            "dependents": {"type": "array", "items": ID},
            "waiting_on": INT,
            "due_at": _null(TIME),
            "steps": {"type": "array", "items": STEP},
            "waiting": _null(WAITING),
            "progress": _null(PROGRESS),
        },
    ),
    "Schedule": _obj(
        {
            "name": STR,
            "task": STR,
            "cron": _null("string"),
            "every": _null("number"),
            "tz": STR,
            "overlap": STR,
            "misfire": STR,
            "paused": BOOL,
            "active": BOOL,
            "source": STR,
            "next_run_at": _null(TIME),
            "last_run_at": _null(TIME),
            "last_status": _null("string"),
            "run_count": INT,
            "success_count": INT,
            "failure_count": INT,
            "skip_count": INT,
            "args": {"type": "array"},
            "kwargs": {"type": "object"},
        },
        {
            "plan_error": _null("string"),
            "corrupt": FIELDS,
            "damage": _null("string"),
            "high_frequency": BOOL,
            "jitter": _null("number"),
        },
    ),
    "Worker": _obj(
        {
            "id": STR,
            "host": STR,
            "pid": INT,
            "concurrency": INT,
            "queues": _null({"type": "array", "items": STR}),
            "state": STR,
            "started_at": _null(TIME),  # null only in a damaged row (named in corrupt)
            "last_seen": _null(TIME),
            "alive": BOOL,
        },
        {"stuck": {"type": "integer", "minimum": 0}, "corrupt": FIELDS},
    ),
    "Lock": _obj(
        {
            "name": STR,
            "owner": _null("string"),
            "token": INT,
            "acquired_at": _null(TIME),
            "expires_at": _null(TIME),
            "held": BOOL,
        },
        {"corrupt": FIELDS},
    ),
    "Limits": _obj(
        {
            "limits": {
                "type": "array",
                "items": _obj(
                    {
                        "name": STR,
                        "max": INT,  # per key (a by= limit: each key has its own max slots)
                        "running": INT,  # over all its keys, as waiting and keys
                        "waiting": INT,
                        "keys": INT,
                        "keys_full": INT,  # its keys whose running runs fill max
                        "corrupt": CORRUPT,
                    }
                ),
            },
            "rates": {
                "type": "array",
                "items": _obj(
                    {
                        "name": STR,
                        "max": INT,
                        "per_seconds": _null(NUM),  # null: a damaged per that is not a number
                        "started_in_window": INT,
                        "waiting": INT,
                        "keys": INT,
                        "keys_full": INT,  # its keys whose starts in the window reach max
                        "corrupt": CORRUPT,
                    }
                ),
            },
            # runs made where their task is not declared, waiting for a declaring worker to key them
            "unresolved": INT,
            # stored task declarations that do not decode (their runs made elsewhere wait unresolved)
            "damaged_specs": {"type": "array", "items": _obj({"task": STR, "reason": STR})},
            # names pending runs use that no worker declared (they wait), with their waiting runs
            "unknown_limits": {"type": "array", "items": _obj({"name": STR, "waiting": INT})},
            "unknown_rates": {"type": "array", "items": _obj({"name": STR, "waiting": INT})},
        }
    ),
    "Stats": _obj(
        {
            "runs": {"type": "object", "additionalProperties": INT},
            "running": INT,
            "pending": INT,
            "workers": INT,
            "capacity": INT,
            "database": STR,
        }
    ),
    "TimelineEntry": _obj(
        {
            "id": ID,
            "task": STR,
            "schedule": _null("string"),
            "status": STATUS,
            "attempt": INT,
            "scheduled_for": _null(TIME),
            "started_at": _null(TIME),
            "finished_at": _null(TIME),
            "worker": _null("string"),
        }
    ),
    "Timeline": _obj(
        {
            "since": TIME,
            "until": TIME,
            "minutes": INT,
            "truncated": BOOL,
            "runs": {"type": "array", "items": {"$ref": "#/components/schemas/TimelineEntry"}},
        }
    ),
}
WINDOW_HEAD = {
    "window": {"type": "string", "enum": ["15m", "1h", "24h", "7d"]},
    "bucket_seconds": INT,
    "since": TIME,
    "until": TIME,
    "task": _null("string"),
    "queue": _null("string"),
    "cap": INT,
}
OUTCOME_NAMES = ("succeeded", "failed", "retried", "skipped", "cancelled")
PERCENTILES = _obj({"n": INT, "p50": _null("number"), "p95": _null("number")})
SCHEMAS.update(
    {
        "Throughput": _obj(
            {
                **WINDOW_HEAD,
                "estimated": BOOL,
                "totals": {"type": "object", "additionalProperties": INT},
                "buckets": {
                    "type": "array",
                    "items": _obj({"start": TIME, "estimated": BOOL, **{k: INT for k in OUTCOME_NAMES}}),
                },
            }
        ),
        "Lateness": _obj(
            {
                **WINDOW_HEAD,
                "sampled": BOOL,
                "lateness": PERCENTILES,
                "wait": PERCENTILES,
                "buckets": {
                    "type": "array",
                    "items": _obj({"start": TIME, "sampled": BOOL, "lateness": PERCENTILES, "wait": PERCENTILES}),
                },
            }
        ),
        "Backlog": _obj(
            {
                "at": TIME,
                "cap": INT,
                "truncated": BOOL,
                "pending": INT,
                "pending_estimated": BOOL,
                "queues": {
                    "type": "array",
                    "items": _obj({"queue": STR, "due": INT, "later": INT, "running": INT}),
                },
            }
        ),
        "Ticks": _obj(
            {
                "name": STR,
                "paused": BOOL,
                "next": {
                    "type": "array",
                    "items": _obj({"at": TIME, "local": _null("string"), "note": _null("string")}),
                },
                "recent": {"type": "array", "items": {"$ref": "#/components/schemas/TimelineEntry"}},
            }
        ),
        "WorkerPage": _obj(
            {
                "worker": {"$ref": "#/components/schemas/Worker"},
                "running": {"type": "array", "items": {"$ref": "#/components/schemas/TimelineEntry"}},
                "recent": {"type": "array", "items": {"$ref": "#/components/schemas/TimelineEntry"}},
                "looked_at": INT,
            }
        ),
    }
)


RUN_ID = _path("id", {"type": "string"})
TEXT = {"type": "string", "pattern": "^[^\\u0000]*$"}  # a NUL is refused (400), as the library does
RUN_QUERY = [
    _query("status", STATUS, "only runs in this status"),
    _query("task", TEXT, "only runs of this task"),
    _query("schedule", TEXT, "only runs of this schedule"),
    _query("queue", TEXT, "only runs on this queue"),
    _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 50}, "how many (newest first)"),
    _query("before", {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}, "only runs with a smaller id (paging)"),
    _query("damaged", {"type": "boolean"}, "only runs set aside as damaged (failed, error type DamagedRow)"),
]


def _paths() -> dict[str, Any]:
    """Every API route (a test checks the list against the router)."""
    schedule_action = _op(
        "", _json(_ref("Schedule"), "The schedule after the action"), params=[SCHEDULE], errors=("404", "409")
    )  # 409: a damaged schedule that a resume cannot plan (see the Concepts page "Damaged rows")
    ops = operator_paths()
    paths = {
        "/api/stats": {"get": _op("Counts by status, live workers and capacity", _json(_ref("Stats"), "Stats"))},
        "/api/schedules": {
            "get": _op(
                "Active schedules (all with all=1)",
                _json(_array("Schedule"), "Schedules"),
                params=[_query("all", {"type": "boolean"}, "include removed schedules")],
            ),
        },
        "/api/schedules/{name}": {
            "get": _op("One schedule", _json(_ref("Schedule"), "The schedule"), params=[SCHEDULE], errors=("404",))
        },
        "/api/schedules/{name}/pause": {"post": {**schedule_action, "summary": "Pause a schedule"}},
        "/api/schedules/{name}/resume": {"post": {**schedule_action, "summary": "Resume a schedule"}},
        "/api/schedules/{name}/trigger": {
            "post": _op(
                "Run a schedule now",
                _json(_ref("Run"), "The new run"),
                status="201",
                params=[SCHEDULE],
                errors=("404", "409"),
            )
        },
        "/api/schedules/{name}/ticks": {
            "get": _op(
                "A schedule's next fire times (with DST notes) and its recent ticks",
                _json(_ref("Ticks"), "Ticks"),
                params=[
                    SCHEDULE,
                    _query("count", {"type": "integer", "minimum": 1, "maximum": 100, "default": 10}, "next ticks"),
                    _query("recent", {"type": "integer", "minimum": 1, "maximum": 500, "default": 60}, "recent ticks"),
                ],
                errors=("404",),
            )
        },
        **_run_paths(),
        **_chart_paths(),
        **{k: v for k, v in ops.items() if k != "/api/schedules"},
    }
    paths["/api/schedules"] |= ops["/api/schedules"]  # POST: add
    return paths


CHART_QUERY = [
    _query("window", {"type": "string", "enum": ["15m", "1h", "24h", "7d"], "default": "1h"}, "the time window"),
    _query("task", TEXT, "only runs of this task"),
    _query("queue", TEXT, "only runs on this queue"),
]


def _chart_paths() -> dict[str, Any]:
    return {
        "/api/charts/throughput": {
            "get": _op(
                "Finished runs per bucket by outcome", _json(_ref("Throughput"), "Throughput"), params=CHART_QUERY
            )
        },
        "/api/charts/lateness": {
            "get": _op(
                "Start lateness and queue wait, p50/p95 per bucket",
                _json(_ref("Lateness"), "Lateness"),
                params=CHART_QUERY,
            )
        },
        "/api/charts/backlog": {
            "get": _op("Pending runs by queue, due now and later", _json(_ref("Backlog"), "Backlog"))
        },
        "/api/workers/{id}": {
            "get": _op(
                "A worker with its running and recent runs",
                _json(_ref("WorkerPage"), "The worker"),
                params=[_path("id", {"type": "string", "minLength": 1})],
                errors=("404",),
            )
        },
    }


def _run_paths() -> dict[str, Any]:
    return {
        "/api/runs": {"get": _op("Run summaries, newest first", _json(_array("RunSummary"), "Runs"), params=RUN_QUERY)},
        "/api/runs/{id}": {
            "get": _op("A run with every attempt", _json(_ref("Run"), "The run"), params=[RUN_ID], errors=("404",))
        },
        "/api/runs/bulk": {"post": _bulk()},
        "/api/runs/{id}/cancel": {
            "post": _op("Cancel a run", _json(_ref("Run"), "The run"), params=[RUN_ID], errors=("404", "409"))
        },
        "/api/runs/{id}/retry": {
            "post": _op(
                "Retry a finished run",
                _json(_ref("Run"), "The new run"),
                status="201",
                params=[RUN_ID],
                errors=("404", "409"),
            )
        },
        "/api/workers": {"get": _op("Workers seen recently", _json(_array("Worker"), "Workers"))},
        "/api/locks": {"get": _op("Named locks", _json(_array("Lock"), "Locks"))},
        "/api/limits": {
            "get": _op("Concurrency limits and rates with running and waiting runs", _json(_ref("Limits"), "Limits"))
        },
        "/api/timeline": {
            "get": _op(
                "Runs that started or finished in the window",
                _json(_ref("Timeline"), "Timeline"),
                params=[_query("minutes", {"type": "integer", "minimum": 1, "maximum": 1440}, "window")],
            )
        },
    }


BULK_FILTER = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"status": _null(STATUS), "task": _null(TEXT), "schedule": _null(TEXT), "queue": _null(TEXT)},
}
BULK_REQUEST = {"type": "object", "required": ["action"], "additionalProperties": False,
                "properties": {"action": {"type": "string", "enum": ["retry", "cancel"]}, "filter": BULK_FILTER,
                               "dry_run": BOOL, "expect": {"type": "integer", "minimum": 0}}}  # fmt: skip
BULK_RESULT = _obj(
    {
        "action": STR,
        "filter": {"type": "object", "additionalProperties": STR},
        "matched": INT,
        "limit": INT,
        "dry_run": BOOL,
        "done": INT,
        "skipped": INT,
        "ids": {"type": "array", "items": ID},
    }
)


def _bulk() -> dict[str, Any]:
    op = _op(
        "Retry (finished runs) or cancel (pending and running ones) every run a filter matches",
        _json(BULK_RESULT, "How many matched, were acted on and were skipped (or only counted: dry_run)"),
        errors=("409",),
    )  # 409: more runs match than one bulk action takes, or not as many as `expect`
    op["requestBody"] = {"required": True, "content": {"application/json": {"schema": BULK_REQUEST}}}
    return op


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "rota dashboard API", "version": "1"},
        "servers": [{"url": "/"}],
        "security": [{}, {"bearer": []}],
        "components": {
            "schemas": {**SCHEMAS, **operator_schemas()},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "paths": _paths(),
    }


async def describe(request: Request) -> Response:
    return JSONResponse(document())
