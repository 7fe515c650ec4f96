"""Prometheus metrics for a worker (`rota worker APP --metrics-port 9100`) and the dashboard.

Counters come straight from the worker's own totals (no per-run cost beyond the two
histogram observations: run duration and lateness of start versus scheduled time)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError

if TYPE_CHECKING:
    from .stores.base import Claimed
    from .worker import Worker

_DOCS = {
    "polls": "Housekeeping passes (rescue, due check, schedule materialization)",
    "rescued": "Runs taken back from lost workers",
    "claimed": "Runs claimed",
    "dispatched": "Runs handed to an executor",
    "succeeded": "Attempts that succeeded",
    "failed": "Runs that failed for good",
    "retried": "Attempts that failed and were scheduled for retry",
    "cancelled": "Runs cancelled while running",
    "timed_out": "Attempts stopped by their timeout",
    "lost": "Runs whose lease this worker lost",
    "stale_writes": "Outcomes discarded because their token no longer held the run",
    "skipped_at_capacity": "Polls that found every slot busy",
    "locked_out": "Schedule materializations lost to another instance",
    "ticks": "Schedule ticks materialized by this worker",
    "pruned": "Finished runs deleted by retention",
}


def serve_worker_metrics(worker: Worker, port: int, host: str = "0.0.0.0") -> Any:
    """Start an HTTP server exposing /metrics for `worker`; returns the registry."""
    try:
        from prometheus_client import CollectorRegistry, Histogram, start_http_server
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    except ImportError as exc:  # pragma: no cover - depends on extras
        raise ConfigurationError("metrics need prometheus-client: pip install 'rota[web]'") from exc

    registry = CollectorRegistry()

    class WorkerCollector:
        def collect(self) -> Iterator[Any]:
            labels = ["worker"]
            for name, value in worker.counters.as_dict().items():
                family = CounterMetricFamily(f"rota_worker_{name}", _DOCS.get(name, name), labels=labels)
                family.add_metric([worker.id], value)
                yield family
            inflight = GaugeMetricFamily("rota_worker_inflight", "Runs executing now", labels=labels)
            inflight.add_metric([worker.id], len(worker.inflight))
            yield inflight
            capacity = GaugeMetricFamily("rota_worker_concurrency", "Concurrency slots", labels=labels)
            capacity.add_metric([worker.id], worker.concurrency)
            yield capacity
            stuck = GaugeMetricFamily(
                "rota_worker_stuck", "Handler threads still running after a timeout or a lost lease", labels=labels
            )
            stuck.add_metric([worker.id], worker.stuck)
            yield stuck

    registry.register(WorkerCollector())
    buckets = (
        0.001,
        0.005,
        0.01,
        0.025,
        0.05,
        0.1,
        0.25,
        0.5,
        1,
        2.5,
        5,
        10,
        30,
        60,
        300,
        900,
        3600,
    )
    duration = Histogram(
        "rota_run_duration_seconds",
        "Run duration",
        ["task", "status"],
        registry=registry,
        buckets=buckets,
    )
    lateness = Histogram(
        "rota_run_lateness_seconds",
        "Start minus scheduled time",
        ["task"],
        registry=registry,
        buckets=buckets,
    )
    started: dict[int, float] = {}

    def observe(event: str, claim: Claimed, at: float) -> None:
        if event == "started":
            started[claim.id] = at
            lateness.labels(claim.task).observe(max(0.0, (claim.started_at - claim.scheduled_for).total_seconds()))
            return
        began = started.pop(claim.id, None)
        if began is not None:
            duration.labels(claim.task, event).observe(max(0.0, at - began))

    worker.observe(observe)
    start_http_server(port, addr=host, registry=registry)
    return registry
