"""Turning the end of a handler into an `Outcome`: succeeded, retry with backoff, failed,
cancelled, unknown task, a damaged row (rota.quarantine); and the log line of that transition."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from .. import config, quarantine
from ..durable import Parked
from ..errors import Cancelled, ConfigurationError
from ..logs import log_event
from ..serialization import encode, encode_error, error_payload, simple_error, storable
from ..stores.base import Claimed, Outcome
from ..stores.records import PARKED, REFUSED, UNKNOWN_TASK_GRACE
from ..tasks import Backoff
from ..tracing import end_attempt
from ..transactional import COMMITTED
from .active import Active
from .counters import WorkerCounters
from .sampling import SuccessSampler, emitter

log = logging.getLogger("rota.worker")

_STOPPED = ("cancelled", "error", "child_error", "timeout")

_EVENTS = {
    "succeeded": "run_succeeded",
    "pending": "run_retrying",
    "failed": "run_failed",
    "cancelled": "run_cancelled",
    REFUSED: "run_refused",
    PARKED: "run_parked",
}
_LEVELS = {
    "succeeded": logging.INFO,
    "pending": logging.INFO,
    "failed": logging.WARNING,
    "cancelled": logging.INFO,
    REFUSED: logging.WARNING,
    PARKED: logging.INFO,
}


class Decider:
    """Decides each attempt's Outcome (and counts it) for one worker."""

    def __init__(
        self, worker: str, counters: WorkerCounters, task_names: Any, db_offset: Callable[[], timedelta]
    ) -> None:
        self.worker = worker
        self.counters = counters
        self.task_names = task_names  # the app's tasks (a live mapping: names for the error)
        self.db_offset = db_offset  # database clock minus local clock (learned by each poll)
        every_run = config.from_env("log_every_run")  # ROTA_LOG_EVERY_RUN
        self.sampler = None if every_run else SuccessSampler(emitter(log, worker), later=_later)

    def flush(self) -> None:
        """Log the success summary of the current window (at shutdown)."""
        if self.sampler is not None:
            self.sampler.flush()

    def decide(self, active: Active, kind: str, value: Any) -> Outcome:
        outcome = self._decide(active, kind, value)
        if active.durable is not None and active.durable.deferred is not None:  # with the finish
            outcome.steps = [active.durable.deferred]
        if active.trace is not None:  # its span ends with the outcome (rota.tracing)
            end_attempt(active.trace, outcome.status, outcome.error)
            active.trace = None
        return outcome

    def _decide(self, active: Active, kind: str, value: Any) -> Outcome:
        c = active.claim
        if kind in ("ok", COMMITTED):  # even if cancellation was requested: the handler says it is done
            self.counters.succeeded += 1
            return Outcome(c.id, c.token, "succeeded", result=value)
        if kind == "unknown":
            return self._unknown_task(active)
        if (active.cancel_requested and kind in _STOPPED) or (kind == "error" and isinstance(value, Cancelled)):
            self.counters.cancelled += 1
            return Outcome(c.id, c.token, "cancelled", error=simple_error("Cancelled", "cancelled on request"))
        if kind == "error" and isinstance(value, Parked):  # ctx.sleep / ctx.wait_for (rota.durable)
            return Outcome(c.id, c.token, PARKED, result=value.stored(), retry_in=value.wake_in)
        error, retryable = self._error_of(active, kind, value)
        if c.attempt < c.max_attempts and retryable and _may_retry(active, value):
            try:
                delay = _backoff(active).delay(c.attempt)
            except (ConfigurationError, *quarantine.UNDECODABLE) as exc:  # a damaged stored backoff: decided
                reason = f"backoff {c.backoff!r} does not decode ({quarantine.describe(exc)})"
                return set_aside(c, f"{reason}; the attempt failed with {_error_text(error)}", self.counters)
            self.counters.retried += 1
            history = storable(encode(self._history(active, kind, error)))
            return Outcome(c.id, c.token, "pending", error=error, retry_in=delay, history=history)
        self.counters.failed += 1
        return Outcome(c.id, c.token, "failed", error=error)

    def _unknown_task(self, active: Active) -> Outcome:
        """A run of a task this worker does not register: given back for a worker that does
        (a release that adds a task, deployed worker by worker). The store fails it instead
        once it has been refused for UNKNOWN_TASK_GRACE since its first refusal."""
        c = active.claim
        self.counters.refused += 1
        known = ", ".join(sorted(self.task_names)) or "none"
        message = (
            f"task {c.task!r} is not registered in worker {self.worker} (registered: {known}): given back for a "
            f"worker that registers it; it fails if none takes it within {UNKNOWN_TASK_GRACE:g} s of its first "
            f"refusal (then deploy code that defines it and `rota retry {c.id}`)"
        )
        return Outcome(c.id, c.token, REFUSED, error=simple_error("TaskNotFound", message))

    def _history(self, active: Active, kind: str, error: str) -> dict[str, Any]:
        c = active.claim
        return {
            "attempt": c.attempt,
            "worker": self.worker,
            "started_at": _iso(c.started_at or datetime.now(UTC)),
            "finished_at": _iso(datetime.now(UTC) + self.db_offset()),  # the database's clock
            "status": "timed out" if kind == "timeout" else "failed",
            "error": json.loads(error),
        }

    def _error_of(self, active: Active, kind: str, value: Any) -> tuple[str, bool]:
        """(error JSON, whether a retry may help)."""
        c = active.claim
        if kind == "timeout":
            self.counters.timed_out += 1
            if c.default_timeout:
                why = f"the default timeout of {c.timeout:g} s (its task sets no timeout=; ROTA_DEFAULT_TIMEOUT)"
                return simple_error("Timeout", f"run {c.id} exceeded {why}"), True
            return simple_error("Timeout", f"run {c.id} exceeded its timeout of {c.timeout:g} s"), True
        if kind == "crashed":
            return simple_error("ChildCrashed", f"the isolated process of run {c.id} died with exit code {value}"), True
        if kind == "child_error":
            return storable(encode(value)), True
        if isinstance(value, quarantine.DamagedRun):  # retrying cannot repair the stored row
            quarantine.report(quarantine.RUN, c.id, str(value), task=c.task)
            return damaged_error(str(value)), False
        if isinstance(value, BaseException):
            return encode_error(value), True
        return storable(encode(error_payload(RuntimeError(str(value))))), True

    def log(self, active: Active, kind: str, record: Outcome) -> None:
        """One structured line per transition (run_timed_out first when it timed out)."""
        if not log.isEnabledFor(logging.WARNING if kind == "timeout" else _LEVELS[record.status]):
            return  # the hot path: build nothing nobody reads
        c = active.claim
        if record.status == "succeeded" and self.sampler is not None and not self.sampler.admit(c.task):
            return  # counted in the window's runs_succeeded line
        duration = round(time.monotonic() - active.started, 6)
        fields: dict[str, Any] = {
            "run_id": str(c.id),
            "task": c.task,
            "schedule": c.schedule,
            "attempt": c.attempt,
            "worker": self.worker,
            "duration": duration,
        }
        if record.error is not None:
            fields["error"] = _error_text(record.error)
        if kind == "timeout":
            said = (
                f" after the default timeout of {c.timeout:g} s (its task sets no timeout=)"
                if c.default_timeout
                else ""
            )
            log_event(log, logging.WARNING, "run_timed_out", f"run {c.id} {c.task} timed out{said}", **fields,
                      timeout=c.timeout, default_timeout=c.default_timeout)  # fmt: skip
        status = record.status
        attempt = f"(attempt {c.attempt}/{c.max_attempts})"
        if status == REFUSED:
            fields["attempt"] = c.attempt - (c.started_at is not None)  # this attempt is not counted
            message = f"run {c.id} {c.task} given back: its task is not registered here"
        elif status == PARKED:
            fields["attempt"] = c.attempt - (c.started_at is not None)  # a park is not an attempt's end
            fields["wake_in"] = round(record.retry_in, 3)
            message = f"run {c.id} {c.task} parked, {_parked(record.result)}, for up to {record.retry_in:g} s"
        elif status == "pending":  # the attempt's duration, then the backoff before the next one
            fields["retry_in"] = retry_in = round(record.retry_in, 3)
            message = f"run {c.id} {c.task} failed after {duration:.3f} s {attempt}; retrying in {retry_in:g} s"
        else:
            message = f"run {c.id} {c.task} {status} after {duration:.3f} s {attempt}"
        _line(_LEVELS[status], _EVENTS[status], message, fields)


def _parked(result: str | None) -> str:
    """What a park waits for, in its log line (its result: [kind, signal name, since, until])."""
    kind, name = json.loads(result or "[null, null]")[:2]
    return f"waiting for signal {name!r}" if kind == "signal" else "sleeping"


def damaged_error(reason: str) -> str:
    """The stored error of a run set aside as damaged (type DamagedRow)."""
    error = quarantine.run_error(reason)
    return simple_error(error["type"], error["message"])


def set_aside(c: Claimed, reason: str, counters: WorkerCounters) -> Outcome:
    """A claimed run that cannot be worked (rota.quarantine): named once in the log, and
    failed as damaged (never retried)."""
    quarantine.report(quarantine.RUN, c.id, reason, task=c.task)
    counters.failed += 1
    return Outcome(c.id, c.token, "failed", error=damaged_error(reason))


def _line(level: int, event: str, message: str, fields: dict[str, Any]) -> None:
    """rota.logs.log_event for the line of every run, without the logging module's search
    for the calling frame (a fifth of a line's cost; the formats do not show it)."""
    extra = {"event": event, "fields": fields}
    log.handle(log.makeRecord(log.name, level, __file__, 0, message, (), None, "log", extra))


def _later(delay: float, fn: Callable[[], None]) -> None:
    """Call fn after `delay` seconds on the running event loop (none: the next success or
    the shutdown flush ends the window)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    loop.call_later(delay, fn)


def _error_text(error: str) -> str:
    try:
        data = json.loads(error)
    except ValueError:
        return error
    if isinstance(data, dict):
        return f"{data.get('type', 'Error')}: {data.get('message', '')}"
    return error


def _may_retry(active: Active, value: Any) -> bool:
    retry_on = active.task.opts.retry_on if active.task is not None else None
    return retry_on is None or _matches(value, retry_on)


def _matches(value: Any, retry_on: tuple[type[BaseException], ...]) -> bool:
    return isinstance(value, retry_on) if isinstance(value, BaseException) else True


def _backoff(active: Active) -> Backoff:
    if active.claim.backoff:
        return Backoff.from_json(json.loads(active.claim.backoff))
    return active.task.opts.backoff if active.task is not None else Backoff()


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
