"""Prometheus metrics for a worker (`rota worker APP --metrics-port 9100`) and the dashboard.

Counters come straight from the worker's own totals (no per-run cost beyond the two
histogram observations: run duration and lateness of start versus scheduled time). On
PostgreSQL both also serve what holds back vacuum (`vacuum_metrics`), read at scrape time."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sized
from datetime import UTC, datetime
from typing import Any, Protocol

from .errors import ConfigurationError
from .stores.base import Claimed

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
    "refused": "Runs of tasks this worker does not register, given back for a worker that does",
    "stale_writes": "Outcomes discarded because their token no longer held the run",
    "written_with_claims": "Outcomes written in the same transaction as a claim",
    "skipped_at_capacity": "Polls that found every slot busy",
    "locked_out": "Schedule materializations lost to another instance",
    "ticks": "Schedule ticks materialized by this worker",
    "pruned": "Finished runs deleted by retention",
}


log = logging.getLogger("rota.metrics")
BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


class Counters(Protocol):
    def as_dict(self) -> dict[str, int]: ...


class MeteredWorker(Protocol):
    """What metrics read from a worker (rota.worker.Worker); no import of the worker."""

    id: str
    concurrency: int

    @property
    def counters(self) -> Counters: ...

    @property
    def inflight(self) -> Sized: ...

    @property
    def stuck(self) -> int: ...

    def observe(self, callback: Callable[[str, Claimed, float], None]) -> None: ...


def serve_worker_metrics(worker: MeteredWorker, port: int, host: str = "0.0.0.0") -> Any:
    """Start an HTTP server exposing /metrics for `worker`; returns the registry."""
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError as exc:  # pragma: no cover - depends on extras
        raise ConfigurationError("metrics need prometheus-client: pip install 'rota[web]'") from exc
    registry = CollectorRegistry()
    registry.register(WorkerCollector(worker))
    worker.observe(_run_observer(registry))
    start_http_server(port, addr=host, registry=registry)
    return registry


class WorkerCollector:
    """The worker's counters and gauges, read at each scrape."""

    def __init__(self, worker: MeteredWorker) -> None:
        self.worker = worker

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        w = self.worker
        for name, value in w.counters.as_dict().items():
            family = CounterMetricFamily(f"rota_worker_{name}", _DOCS.get(name, name), labels=["worker"])
            family.add_metric([w.id], value)
            yield family
        yield _gauge("rota_worker_inflight", "Runs executing now", w.id, len(w.inflight))
        yield _gauge("rota_worker_concurrency", "Concurrency slots", w.id, w.concurrency)
        stuck_doc = "Handler threads still running after a timeout or a lost lease"
        yield _gauge("rota_worker_stuck", stuck_doc, w.id, w.stuck)
        store = getattr(w, "store", None)
        yield from vacuum_metrics(store, getattr(store, "url", ""))


def vacuum_metrics(store: Any, url: str) -> Iterator[Any]:
    """PostgreSQL only: what holds back vacuum of rota's tables, read at scrape time
    (rota.stores.postgres.vacuum); nothing on SQLite, nothing (one warning) if it cannot be read."""
    from prometheus_client.core import GaugeMetricFamily

    from .config import redact_text
    from .errors import RotaError

    vacuum = getattr(store, "vacuum_health", None)
    if vacuum is None:
        return
    try:
        health = vacuum()
    except RotaError as exc:
        log.warning("metrics: cannot read the vacuum statistics: %s", redact_text(str(exc), url))
        return
    yield GaugeMetricFamily(
        "rota_db_oldest_xmin_age_seconds",
        "Age of the oldest transaction holding back vacuum in the database (0: none)",
        value=health.oldest_xmin_seconds,
    )
    yield GaugeMetricFamily(
        "rota_db_oldest_xmin_age_xids",
        "Transactions since the oldest one holding back vacuum began (sessions, prepared, slots)",
        value=health.oldest_xmin_xids,
    )
    yield GaugeMetricFamily("rota_db_autovacuum", "1 if autovacuum is on, else 0", value=int(health.autovacuum))
    dead = GaugeMetricFamily("rota_db_dead_tuples", "Dead row versions in rota's tables", labels=["table"])
    for table, count in health.dead_tuples.items():
        dead.add_metric([table], count)
    yield dead


def _gauge(name: str, doc: str, worker_id: str, value: float) -> Any:
    from prometheus_client.core import GaugeMetricFamily

    family = GaugeMetricFamily(name, doc, labels=["worker"])
    family.add_metric([worker_id], value)
    return family


def _run_observer(registry: Any) -> Callable[[str, Claimed, float], None]:
    """Per-run histograms: duration (by task and the attempt's status: succeeded, failed,
    retried, cancelled, ...) and lateness of the start."""
    from prometheus_client import Histogram

    duration = Histogram(
        "rota_run_duration_seconds", "Run duration", ["task", "status"], registry=registry, buckets=BUCKETS
    )
    lateness = Histogram(
        "rota_run_lateness_seconds", "Start minus scheduled time", ["task"], registry=registry, buckets=BUCKETS
    )
    started: dict[int, float] = {}

    def observe(event: str, claim: Claimed, at: float) -> None:
        if event == "started":
            started[claim.id] = at
            began_at = claim.started_at or datetime.now(UTC)
            lateness.labels(claim.task).observe(max(0.0, (began_at - claim.scheduled_for).total_seconds()))
            return
        began = started.pop(claim.id, None)
        if began is not None:  # an attempt that will be retried is recorded as "retried", not "pending"
            status = "retried" if event == "pending" else event
            duration.labels(claim.task, status).observe(max(0.0, at - began))

    return observe
