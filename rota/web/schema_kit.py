"""The building blocks of rota's OpenAPI document, shared by rota.web.openapi and rota.web.openapi_ops:
the common types and the parts of an operation (responses, parameters)."""

from __future__ import annotations

from typing import Any

from ..models import STATUSES


def _null(kind: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(kind, dict):
        return {"anyOf": [kind, {"type": "null"}]}
    return {"type": [kind, "null"]}


def _obj(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "object", "required": sorted(required), "properties": {**required, **(optional or {})}}


STR, INT, BOOL, NUM = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}, {"type": "number"}
# the damaged fields of a stored limit or rate (its runs wait; docs/concepts/flow-control.md)
CORRUPT: dict[str, Any] = {"type": "array", "items": STR}
TIME = {"type": "string", "format": "date-time"}
ID = {"type": "string", "pattern": "^[1-9][0-9]*$"}
STATUS = {"type": "string", "enum": list(STATUSES)}
ANY: dict[str, Any] = {}
FIELDS = {"type": "array", "items": STR}

ERROR = _obj({"error": STR})
STORED_ERROR = _null(_obj({"type": STR, "message": STR}, {"traceback": _null("string")}))


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


ERRORS = {
    "400": _json(_ref("Error"), "Bad input; the message names the value and what is valid"),
    "401": _json(_ref("Error"), "A token is needed"),
    "403": _json(_ref("Error"), "Host not allowed, a cross-site action, or an action with the read-only token"),
    "503": _json(_ref("Error"), "The database is unreachable"),
}


def _op(
    summary: str,
    ok: dict[str, Any],
    *,
    status: str = "200",
    params: list[dict[str, Any]] | None = None,
    errors: tuple[str, ...] = (),
) -> dict[str, Any]:
    responses = {status: ok, **ERRORS}
    for code in errors:
        responses[code] = _json(_ref("Error"), {"404": "Not found", "409": "The state refuses the action"}[code])
    return {"summary": summary, "parameters": params or [], "responses": responses}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": description}


def _path(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": schema}


def _array(name: str) -> dict[str, Any]:
    return {"type": "array", "items": _ref(name)}


SCHEDULE = _path("name", {"type": "string", "minLength": 1})
