"""Run records for the API, decoded from raw rows so that one bad row cannot break a listing.

The store's `web_*` queries return times as epoch seconds and JSON columns as text. A value
that cannot be decoded (a date past year 9999, corrupt JSON) becomes null and its field name
is listed in the record's `corrupt`; the detail record also carries the stored text under
`raw`. Listings are summaries: arguments, result and error cut to a preview, with the full
record at `/api/runs/{id}`.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from typing import Any

from ..models import iso

PREVIEW = 200  # characters of args/kwargs/result text (and of an error message) in a summary
ERROR_PREFIX = 2000  # characters of the error JSON read for a summary (type and message come first)
RAW_LIMIT = 10_000  # characters of an undecodable stored value shown in the detail record

COMMON = ("id", "task", "status", "queue", "priority", "key", "schedule", "scheduled_for", "attempt",
          "max_attempts", "worker", "token", "lease_until", "cancel_requested", "created_at", "started_at",
          "finished_at", "retry_of")  # fmt: skip
TIMES = frozenset({"scheduled_for", "lease_until", "created_at", "started_at", "finished_at"})
IDS = frozenset({"id", "retry_of"})
_MESSAGE = re.compile(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)')
_TYPE = re.compile(r'"type"\s*:\s*"((?:[^"\\]|\\.)*)"')


def epoch(value: Any) -> float | None:
    """Seconds since the epoch if `value` is a usable time (years 1..9999), else None."""
    if value is None:
        return None
    try:
        seconds = float(value)
        datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, ValueError, OSError, TypeError):
        return None
    return seconds if math.isfinite(seconds) else None


def time_field(value: Any, name: str, corrupt: list[str]) -> str | None:
    seconds = epoch(value)
    if seconds is None:
        if value is not None:
            corrupt.append(name)
        return None
    return iso(datetime.fromtimestamp(seconds, UTC))


def json_field(text: str | None, name: str, corrupt: list[str]) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        corrupt.append(name)
        return None


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _common(row: tuple[Any, ...], corrupt: list[str]) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for name, value in zip(COMMON, row, strict=False):
        if name in TIMES:
            value = time_field(value, name, corrupt)
        elif name in IDS:
            value = str(value) if value is not None else None
        elif name == "cancel_requested":
            value = bool(value)
        record[name] = value
    # claimed by a worker, its handler not started (rota/lifecycle.py)
    record["held"] = record.get("status") == "running" and row[COMMON.index("started_at")] is None
    return record


def summary(row: tuple[Any, ...]) -> dict[str, Any]:
    """A `web_run_summaries` row: the run without its payloads, which are previews."""
    corrupt: list[str] = []
    record = _common(row, corrupt)
    truncated = []
    for index, name in enumerate(("args", "kwargs", "result")):
        text, length = row[18 + 2 * index], row[19 + 2 * index]
        record[f"{name}_preview"] = None if text is None else cut(text, PREVIEW)
        if text is not None and length > PREVIEW:
            truncated.append(name)
        elif text is not None:
            json_field(text, name, corrupt)
    text, length = row[24], row[25]
    record["error"] = error_summary(text, length, corrupt)
    if text is not None and length > len(text):
        truncated.append("error")
    record["truncated"] = truncated
    record["backfill"] = bool(row[26])
    if len(row) > 27:  # parents it still waits for (after=); 0 once due
        record["waiting_on"] = int(row[27] or 0)
    record["corrupt"] = corrupt
    return record


def error_summary(text: str | None, length: int | None, corrupt: list[str]) -> dict[str, Any] | None:
    """{"type", "message"} of a stored error, from its whole text or from the prefix read."""
    if text is None:
        return None
    if length is not None and length <= len(text):
        value = json_field(text, "error", corrupt)
        if isinstance(value, dict):
            return {"type": str(value.get("type") or "error"), "message": cut(str(value.get("message") or ""), PREVIEW)}
        if "error" not in corrupt:
            corrupt.append("error")
        return {"type": "corrupt", "message": cut(text, PREVIEW)}
    kind, message = _TYPE.search(text), _MESSAGE.search(text)
    return {
        "type": _unescape(kind.group(1)) if kind else "error",
        "message": cut(_unescape(message.group(1)), PREVIEW) if message else "",
    }


def _unescape(fragment: str) -> str:
    try:
        return str(json.loads(f'"{fragment.rstrip(chr(92))}"'))
    except ValueError:
        return fragment


def detail(row: tuple[Any, ...]) -> dict[str, Any]:
    """A `web_run_detail` row: the whole run, as `Run.to_json()` plus `corrupt` and `raw`."""
    corrupt: list[str] = []
    record = _common(row, corrupt)
    raw: dict[str, str] = {}
    for index, name in enumerate(("args", "kwargs", "result", "error")):
        text = row[18 + index]
        record[name] = json_field(text, name, corrupt)
        if name in corrupt:
            raw[name] = cut(text, RAW_LIMIT)
    history = json_field(row[22] or "[]", "attempts", corrupt)
    if not isinstance(history, list) or not all(isinstance(h, dict) for h in history):
        if "attempts" not in corrupt:
            corrupt.append("attempts")
        raw["attempts"] = cut(str(row[22]), RAW_LIMIT)
        history = []
    if record["started_at"] is not None and record["status"] != "pending":
        history.append(
            {name: record[name] for name in ("attempt", "worker", "started_at", "finished_at", "status", "error")}
        )
    record["attempts"] = history
    record["backfill"] = bool(row[23])
    if len(row) > 24:  # when it is (or was last) due: the end of a retry's backoff
        record["due_at"] = time_field(row[24], "due_at", corrupt)
    record["corrupt"] = corrupt
    record["raw"] = raw
    return record
