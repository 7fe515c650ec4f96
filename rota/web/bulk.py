"""Bulk actions: retry or cancel every run a filter matches, in one POST.

    POST /api/runs/bulk  {"action": "retry" | "cancel",
                          "filter": {"status": ..., "task": ..., "schedule": ..., "queue": ...},
                          "dry_run": false, "expect": 12}

The filter is the runs list's (GET /api/runs). At most BULK_LIMIT runs are acted on: a
filter matching more is refused (409) and must be narrowed. `dry_run` only counts (the page
asks first, to say how many in its confirmation); `expect` makes the action refuse (409) if
the filter no longer matches that many runs. Retry acts on finished runs and cancel on
pending and running ones; the others are counted as `skipped`, and so is a run whose own
action is refused (a damaged row, an overlap policy). The Guard (rota.web.auth) checks the
token, the same-origin rule and the read-only role as for any action; each bulk action is
logged (logger `rota.web`, INFO) with its filter, counts and client.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..app import App
from ..errors import ConfigurationError, RotaError, did_you_mean
from ..models import FINAL_STATUSES
from ..stores.base import RunFilter
from . import records
from .api import SafeJSONResponse, _app, _call, _status, _text, error_response
from .auth import ROLE_KEY

BULK_LIMIT = 500  # runs one bulk action may touch
ACTIONS = ("retry", "cancel")
FILTERS = ("status", "task", "schedule", "queue")
FIELDS = {"action", "filter", "dry_run", "expect"}
log = logging.getLogger("rota.web")


def _body(raw: bytes) -> dict[str, Any]:
    """The request's JSON object, checked; a bad one is a 400 naming what is wrong."""
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"the body must be a JSON object: {exc}") from None
    if not isinstance(body, dict):
        raise ConfigurationError(f"the body must be a JSON object, got {type(body).__name__}")
    for name in body:
        if name not in FIELDS:
            raise ConfigurationError(
                f"unknown field {name!r}{did_you_mean(name, FIELDS)}; valid: {', '.join(sorted(FIELDS))}"
            )
    if body.get("action") not in ACTIONS:
        raise ConfigurationError(f"action must be one of {', '.join(ACTIONS)}, got {body.get('action')!r}")
    if not isinstance(body.get("dry_run", False), bool):
        raise ConfigurationError(f"dry_run must be true or false, got {body['dry_run']!r}")
    expect = body.get("expect")
    if isinstance(expect, float) and expect.is_integer():  # JSON's 3.0 is the integer 3
        expect = body["expect"] = int(expect)
    if expect is not None and (isinstance(expect, bool) or not isinstance(expect, int) or expect < 0):
        raise ConfigurationError(f"expect must be a count of runs (an integer from 0), got {expect!r}")
    return body


def _filter(raw: Any) -> dict[str, str]:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigurationError(f"filter must be an object with {', '.join(FILTERS)}, got {raw!r}")
    for name, value in raw.items():
        if name not in FILTERS:
            raise ConfigurationError(
                f"unknown filter {name!r}{did_you_mean(name, FILTERS)}; valid: {', '.join(FILTERS)}"
            )
        if value is not None and not isinstance(value, str):
            raise ConfigurationError(f"filter {name} must be a string, got {value!r}")
    flt = {k: _text(k, v) for k, v in raw.items() if v}
    _status(flt)
    return flt


def matching(app: App, flt: dict[str, str]) -> list[tuple[int, str]]:
    """(id, status) of the runs the filter matches, newest first, at most BULK_LIMIT + 1."""
    where = RunFilter(flt.get("status"), flt.get("task"), flt.get("schedule"), flt.get("queue"), BULK_LIMIT + 1)
    rows = app.store.run_rows("web_run_summaries", where, preview=1, error_prefix=1)
    return [(int(s["id"]), str(s["status"])) for s in (records.summary(tuple(r)) for r in rows)]


def act(app: App, action: str, runs: list[tuple[int, str]]) -> tuple[list[str], int]:
    """Do `action` on each run it applies to: (ids acted on or created, how many skipped)."""
    done: list[str] = []
    for run_id, status in runs:
        if (status in FINAL_STATUSES) != (action == "retry"):
            continue
        try:
            if action == "retry":
                done.append(app.retry(str(run_id)).id)
            elif app.store.cancel(run_id, "cancelled on request (bulk)") is not None:
                done.append(str(run_id))
        except RotaError as exc:
            log.info("bulk %s skipped run %s: %s", action, run_id, exc)
    return done, len(runs) - len(done)


async def bulk(request: Request) -> Response:
    body = _body(await request.body())
    action, flt = body["action"], _filter(body.get("filter"))
    app = _app(request)
    runs = await _call(matching, app, flt)
    shown = json.dumps(flt, sort_keys=True)
    if len(runs) > BULK_LIMIT:
        return error_response(
            f"more than {BULK_LIMIT} runs match {shown}: narrow the filter (a bulk action takes at most {BULK_LIMIT})",
            409,
        )
    answer: dict[str, Any] = {"action": action, "filter": flt, "matched": len(runs), "limit": BULK_LIMIT}
    if body.get("dry_run", False):
        return SafeJSONResponse({**answer, "dry_run": True, "done": 0, "skipped": 0, "ids": []})
    expect = body.get("expect")
    if expect is not None and expect != len(runs):
        return error_response(f"the filter now matches {len(runs)} runs, not {expect}: confirm again", 409)
    ids, skipped = await _call(act, app, action, runs)
    client = request.client.host if request.client is not None else "unknown"
    log.info("dashboard bulk %s on %d of %d runs matching %s (%d skipped) from %s (%s)", action, len(ids),
             len(runs), shown, skipped, client, request.scope.get(ROLE_KEY, "open"))  # fmt: skip
    return SafeJSONResponse({**answer, "dry_run": False, "done": len(ids), "skipped": skipped, "ids": ids})


def routes() -> list[BaseRoute]:
    return [Route("/api/runs/bulk", bulk, methods=["POST"])]
