"""Logging: plain text or one JSON object per line, with stable event names.

`configure(level, fmt)` sets up the `rota` loggers (the `rota` command calls it from
--log-level/--log-format or ROTA_LOG_LEVEL/ROTA_LOG_FORMAT). `log_event(logger, level,
event, message, **fields)` logs `message` with `event` and `fields` attached, so that the
JSON formatter writes them as keys:

    {"ts": "2026-11-30T18:02:11.103Z", "level": "info", "logger": "rota.worker",
     "event": "run_succeeded", "message": "run 42 demo.fetch succeeded in 0.21 s",
     "run_id": "42", "task": "demo.fetch", "attempt": 1, "worker": "host:123:ab", "duration": 0.21}

Event names (stable; operators alert on them):

- worker_started, worker_stopping, worker_stopped: a worker's life (fields: worker, and
  concurrency/queues at start).
- run_claimed, run_succeeded, run_failed, run_retrying, run_rescued, run_cancelled,
  run_timed_out: run transitions (run_id, task, schedule, attempt, worker, duration, error).
- runs_succeeded: info, at most once a second: successes beyond the first 20 of that second,
  counted instead of logged one by one (count, window, by_task: the top tasks, worker).
  ROTA_LOG_EVERY_RUN=1 logs every success. Failures, retries, timeouts, cancellations are
  always logged one by one.
  run_retrying also has retry_in: the backoff in seconds before the next attempt (duration
  is the failed attempt's own).
- run_refused: warning, a run of a task this worker does not register, given back for a
  worker that registers it (no attempt counted; attempt: the last one counted). Refused for
  longer than UNKNOWN_TASK_GRACE (600 s) since its first refusal, the database fails it
  instead (run_failed, TaskNotFound).
- run_parked: info, a handler called ctx.sleep or ctx.wait_for (rota.durable): its run is
  pending until its wait ends or its signal comes (wake_in: seconds at most), no attempt counted.
- lease_lost: a worker lost a run's lease (run_id, worker).
- run_missing: warning, as lease_lost, when the database has no row for the run at all
  (deleted, or a write lost in a failover to an asynchronous replica): stopped, result
  discarded, the worker goes on (run_id, worker).
- claim_reply_lost: warning, a claim of this worker committed but its reply was lost (the
  connection failed just then): the runs it took were given back as they were, no attempt
  counted, when the worker reached the database again (runs, worker).
- run_handed_back: a run a stopping worker gave back for another worker to take at once, the
  attempt not counted (run_id, worker): warning if its handler had started, info if it was
  only claimed ahead; hand_back_failed: error, the hand-back could not be written, the runs
  wait for their lease (run_ids, worker).
- run_still_running: warning, a run whose handler still runs at the end of a worker's
  shutdown (a thread cannot be killed): never handed back while this process can run it
  (run_id, task, worker). `rota worker` ends its process after its last write, which makes
  the run's lease end 2 s later; the rescue then takes it. In a process that goes on, the
  stopped worker keeps it until the handler returns, then hands it back.
- tick_materialized, tick_locked_out: a schedule tick written by this instance, or lost to
  another instance that wrote it first (schedule).
- database_unavailable, database_back: one line each per outage (error, duration).
- poll_summary: debug, once per poll, counts since the previous one: swept (rescued),
  claimed, dispatched, locked_out, skipped_at_capacity (and worker).
- flag_ignored: a `rota` flag lost to a value the App was given in code (argument > flag).
- schedule_high_frequency: warning, once per schedule when a worker starts: it fires more
  often than the high_frequency threshold (ROTA_HIGH_FREQUENCY, default 60 s; 0: off)
  (schedule, interval: its shortest gap in seconds, threshold).
- row_damaged: warning, once per row and reason in a process: a stored row that cannot be
  used (a run, schedule, worker, lock, task spec or counter that does not decode or plan) is
  set aside and the rest goes on (kind, key, reason; a schedule's also has schedule). It
  replaces schedule_corrupt (no release shipped it). See rota.quarantine.
- flow_undeclared: warning, from a worker's check (about once a minute), once per name in a
  process (again after an hour while it lasts): pending runs wait for a limit or a rate that
  no worker declared (kind limit or rate, name, waiting). See rota.undeclared.

Both formatters take passwords out of URLs in the message (rota.config.redact_text).
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from .config import LOG_FORMATS, LOG_LEVELS, redact_text

EVENTS = (
    "worker_started",
    "worker_stopping",
    "worker_stopped",
    "run_claimed",
    "run_succeeded",
    "run_failed",
    "run_retrying",
    "run_rescued",
    "run_cancelled",
    "run_timed_out",
    "run_refused",
    "run_parked",
    "runs_succeeded",
    "lease_lost",
    "run_missing",
    "claim_reply_lost",
    "run_handed_back",
    "hand_back_failed",
    "run_still_running",
    "tick_materialized",
    "tick_locked_out",
    "database_unavailable",
    "database_back",
    "poll_summary",
    "flag_ignored",
    "schedule_high_frequency",
    "row_damaged",
    "flow_undeclared",
)
FIELDS = ("run_id", "task", "schedule", "attempt", "worker", "duration", "error")
_RESERVED = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "event", "fields"}


def log_event(logger: logging.Logger, level: int, event: str, message: str, **fields: Any) -> None:
    """Log `message` with a stable `event` name and structured `fields` (JSON keys)."""
    if logger.isEnabledFor(level):
        logger.log(level, message, extra={"event": event, "fields": fields}, stacklevel=2)


def _record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """`fields` from log_event, plus plain `extra` keys that are not LogRecord attributes."""
    fields: dict[str, Any] = dict(getattr(record, "fields", None) or {})
    for key, value in vars(record).items():
        if key not in _RESERVED and not key.startswith("_"):
            fields.setdefault(key, value)
    return fields


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, event, message, then the fields."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": getattr(record, "event", None) or "log",
            "message": redact_text(record.getMessage()),
        }
        for key, value in _record_fields(record).items():
            data.setdefault(key, redact_text(value) if isinstance(value, str) else value)
        if record.exc_info:
            data.setdefault("error", redact_text(self.formatException(record.exc_info)))
        return json.dumps(data, default=str, ensure_ascii=False)


# Control characters (newline, carriage return, escape...), DEL, C1 and the Unicode line
# separators: in a message they would forge or hide log lines, so a text log shows them escaped.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def escape_controls(text: str) -> str:
    """`text` on one line: each control character as a visible escape (\\n, \\r, \\t, \\x1b,
    \\u2028), wherever it came from (a task name, an error message, an argument)."""
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(lambda m: m[0].encode("unicode_escape").decode("ascii"), text)


class TextFormatter(logging.Formatter):
    """`time level logger: message`, passwords taken out, control characters in the message
    escaped (a traceback appended to the line keeps its own newlines)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.message)
        return super().formatMessage(record)

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to `stream`, or to whatever sys.stderr is at the time of each record (so that a
    replaced and closed stderr, as in click's test runner, is never written to)."""

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__(stream or sys.stderr)
        self.follow_stderr = stream is None

    def emit(self, record: logging.LogRecord) -> None:
        if self.follow_stderr:
            self.stream = sys.stderr
        super().emit(record)


def configure(level: str = "info", fmt: str = "text", stream: TextIO | None = None) -> None:
    """Send the `rota` loggers (and the root logger) to `stream` (stderr) in `fmt` at `level`."""
    if level not in LOG_LEVELS or fmt not in LOG_FORMATS:
        raise ValueError(f"log level {level!r} / format {fmt!r}: valid {LOG_LEVELS} / {LOG_FORMATS}")
    handler = _Handler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_rota", False)]:
        root.removeHandler(old)
    handler._rota = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("rota").setLevel(getattr(logging, level.upper()))


__all__ = ["EVENTS", "FIELDS", "JsonFormatter", "TextFormatter", "configure", "log_event"]
