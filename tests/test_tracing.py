"""Issue 44 item 12: OpenTelemetry (rota.tracing). The enqueue's trace context is stored with
the run; a worker makes a span per attempt, parented by (first attempt) or linked to it
(retries, ticks), with the run's attributes; on both stores, with the SDK's in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import rota
from rota import tracing

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


trace = pytest.importorskip("opentelemetry.trace")
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
export = pytest.importorskip("opentelemetry.sdk.trace.export")
in_memory = pytest.importorskip("opentelemetry.sdk.trace.export.in_memory_span_exporter")


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A tracer provider for this test only (the API's global is set back afterwards)."""
    exporter = in_memory.InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    yield exporter
    provider.shutdown()


def attempts(exporter: Any, task: str) -> list[Any]:
    return sorted(
        (s for s in exporter.get_finished_spans() if s.name == f"rota.run {task}"),
        key=lambda s: s.attributes["rota.attempt"],
    )


def test_an_attempt_span_continues_the_enqueue_and_a_retry_is_linked(app: rota.App, spans: Any) -> None:
    calls: list[int] = []

    @app.task(name="flaky", retries=1, backoff=0)
    def flaky() -> None:
        calls.append(1)
        with trace.get_tracer("handler").start_as_current_span("inside"):
            pass
        if len(calls) == 1:
            raise ConnectionError("first attempt fails")

    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("enqueue") as parent:
        handle = flaky.enqueue()
    enqueued = parent.get_span_context()
    assert app.store.run_traceparent(int(handle.id)) == (
        f"00-{enqueued.trace_id:032x}-{enqueued.span_id:016x}-{int(enqueued.trace_flags):02x}"
    )
    start_worker(app, poll_interval=0.05)
    assert handle.wait(20).status == "succeeded"
    wait_for(lambda: len(attempts(spans, "flaky")) == 2, what="two attempt spans")
    first, second = attempts(spans, "flaky")
    for span, attempt, status in ((first, 1, "retrying"), (second, 2, "succeeded")):
        assert dict(span.attributes) | {"rota.worker": "w"} == {
            "rota.run_id": handle.id, "rota.task": "flaky", "rota.attempt": attempt, "rota.max_attempts": 2,
            "rota.worker": "w", "rota.status": status,
        }  # fmt: skip
        assert span.kind == trace.SpanKind.CONSUMER
        assert [link.context.span_id for link in span.links] == [enqueued.span_id]
    # the first attempt is the enqueue span's child, in its trace; the retry starts its own
    assert first.parent is not None and first.parent.span_id == enqueued.span_id
    assert first.context.trace_id == enqueued.trace_id
    assert second.parent is None and second.context.trace_id != enqueued.trace_id
    assert first.status.status_code == trace.StatusCode.ERROR and "first attempt fails" in first.status.description
    # the handler's own spans are children of its attempt's span
    inside = [s for s in spans.get_finished_spans() if s.name == "inside"]
    assert {s.parent.span_id for s in inside} == {first.context.span_id, second.context.span_id}


def test_a_run_enqueued_outside_a_span_stores_nothing_and_gets_a_root_span(app: rota.App, spans: Any) -> None:
    @app.task(name="plain")
    async def plain() -> None: ...

    handle = plain.enqueue()
    assert app.store.run_traceparent(int(handle.id)) is None
    start_worker(app, poll_interval=0.05)
    assert handle.wait(20).status == "succeeded"
    wait_for(lambda: len(attempts(spans, "plain")) == 1, what="an attempt span")
    (span,) = attempts(spans, "plain")
    assert span.parent is None and not span.links and span.attributes["rota.status"] == "succeeded"


def test_a_schedules_run_starts_its_own_trace(app: rota.App, spans: Any) -> None:
    """A schedule's run (a tick, or a trigger: made by the store, not in the caller's span)
    gets a root span naming its schedule, never a child of whatever span was current."""

    @app.task(name="tick")
    def tick() -> None: ...

    app.add_schedule("every-hour", "tick", every=3600)
    with trace.get_tracer("test").start_as_current_span("operator"):
        triggered = app.trigger("every-hour")
    start_worker(app, poll_interval=0.05)
    assert triggered.wait(20).status == "succeeded"
    wait_for(lambda: len(attempts(spans, "tick")) >= 1, what="a tick's span")
    span = attempts(spans, "tick")[0]
    assert span.attributes["rota.schedule"] == "every-hour" and span.attributes["rota.status"] == "succeeded"
    assert span.parent is None and not span.links


def test_without_a_provider_the_worker_reads_nothing(app: rota.App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The API's default provider records nothing: the worker does not trace (no read per
    attempt), and an enqueue outside a recording span stores no context."""
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    assert not tracing.enabled()
    reads: list[int] = []
    monkeypatch.setattr(type(app.store), "run_traceparent", lambda self, run_id: reads.append(run_id))

    @app.task(name="quiet")
    def quiet() -> None: ...

    handle = quiet.enqueue()
    start_worker(app, poll_interval=0.05)
    assert handle.wait(20).status == "succeeded" and reads == []
