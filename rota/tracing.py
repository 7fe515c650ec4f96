"""OpenTelemetry tracing (`pip install 'rota[otel]'`): the enqueue's trace context stored with
the run, and a span per attempt linked to it.

- At enqueue, the current span's W3C `traceparent` is stored with each new run (column
  `traceparent`, migration 0019), if a span is recording there.
- A worker makes one span per attempt, named `rota.run <task>` (kind CONSUMER), from the
  handler's start to the attempt's outcome, current while the handler runs (the handler's own
  spans are its children). It carries `rota.run_id`, `rota.task`, `rota.attempt`,
  `rota.max_attempts`, `rota.schedule` (if any), `rota.worker` and, at its end, `rota.status`
  (succeeded, failed, retrying, cancelled, lost, refused); a failure sets the span's status
  to ERROR. Every attempt span is linked to the stored context; the first attempt of a run of
  no schedule is also its child (it continues the enqueuer's trace), while retries and
  schedule ticks start their own trace, linked to it.

Without opentelemetry-api installed, or with no tracer provider configured (the API's
default, which records nothing), this costs a None check per enqueue and per attempt: the
import is tried once, here, and the worker reads the stored context only when a provider is
set.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import context as _context
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - depends on extras
    _trace = None  # type: ignore[assignment]
    _context = None  # type: ignore[assignment]
API = _trace  # None without opentelemetry-api: callers check this before anything else

if TYPE_CHECKING:
    from .stores.base import Claimed

__all__ = ["attempt_span", "current_traceparent", "enabled", "end_attempt"]

INSTRUMENTATION = "rota"
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")
# rota's outcome names as span statuses: a retried attempt's run goes back to pending
_STATUS = {"pending": "retrying"}


def current_traceparent() -> str | None:
    """The W3C traceparent of the span current here, or None (no API, no valid span)."""
    if _trace is None:
        return None
    ctx = _trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def enabled() -> bool:
    """A tracer provider is configured (the API's proxy/no-op default records nothing)."""
    if _trace is None:
        return False
    provider = _trace.get_tracer_provider()
    return not isinstance(provider, (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider))


def _span_context(traceparent: str | None) -> Any:
    """The stored traceparent as a remote SpanContext, or None (absent or not one we wrote)."""
    assert _trace is not None
    match = _TRACEPARENT.match(traceparent or "")
    if match is None:
        return None
    trace_id, span_id, flags = int(match.group(1), 16), int(match.group(2), 16), int(match.group(3), 16)
    if not trace_id or not span_id:
        return None
    return _trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=_trace.TraceFlags(flags))


class AttemptSpan:
    """An attempt's span and the context token that made it current (detached by `leave`)."""

    __slots__ = ("span", "token")

    def __init__(self, span: Any, token: Any) -> None:
        self.span = span
        self.token = token

    def leave(self) -> None:
        """Make the span no longer current (in the thread or task that entered it)."""
        if self.token is not None and _context is not None:
            _context.detach(self.token)
            self.token = None


def attempt_span(claim: Claimed, traceparent: str | None, worker: str) -> AttemptSpan | None:
    """Start the span of `claim`'s attempt and make it current here, or None if tracing is off."""
    if _trace is None or _context is None:
        return None
    linked = _span_context(traceparent)
    parent = None
    if linked is not None and claim.attempt <= 1 and claim.schedule is None:
        parent = _trace.set_span_in_context(_trace.NonRecordingSpan(linked))
    attributes: dict[str, Any] = {
        "rota.run_id": str(claim.id),
        "rota.task": claim.task,
        "rota.attempt": claim.attempt,
        "rota.max_attempts": claim.max_attempts,
        "rota.worker": worker,
    }
    if claim.schedule is not None:
        attributes["rota.schedule"] = claim.schedule
    tracer = _trace.get_tracer(INSTRUMENTATION)
    span = tracer.start_span(
        f"rota.run {claim.task}",
        context=parent if parent is not None else _context.Context(),  # else a new trace, not the caller's
        kind=_trace.SpanKind.CONSUMER,
        links=[_trace.Link(linked)] if linked is not None else None,
        attributes=attributes,
    )
    token = _context.attach(_trace.set_span_in_context(span))
    return AttemptSpan(span, token)


def end_attempt(attempt: AttemptSpan, status: str, error: str | None = None) -> None:
    """End the attempt's span with rota's outcome (`status`) and, for a failure, its error."""
    assert _trace is not None
    span = attempt.span
    shown = _STATUS.get(status, status)
    span.set_attribute("rota.status", shown)
    if shown in ("failed", "retrying", "lost"):
        span.set_status(_trace.Status(_trace.StatusCode.ERROR, (error or shown)[:500]))
    span.end()
