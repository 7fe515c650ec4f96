"""`/metrics` for the dashboard: what the database says, read at scrape time.

A worker's own counters live on its `--metrics-port` (rota.metrics); these are the shared
numbers any dashboard can read: runs by status, live workers and capacity, and each
schedule's counters, state and times. `rota_up` is 0 when the database could not be read.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from .. import config, quarantine
from ..app import App
from ..errors import RotaError
from ..metrics import vacuum_metrics
from ..models import ScheduleInfo

log = logging.getLogger("rota.web")

_SCHEDULE_COUNTERS = (
    ("runs", "run_count", "Runs started by the schedule"),
    ("successes", "success_count", "Schedule runs that succeeded"),
    ("failures", "failure_count", "Schedule runs that failed"),
    ("skips", "skip_count", "Schedule ticks skipped (overlap or misfire)"),
)


class StoreCollector:
    """Reads `app.stats()` and `app.list_schedules()` on every scrape."""

    def __init__(self, app: App) -> None:
        self.app = app

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        up = GaugeMetricFamily("rota_up", "1 if the dashboard could read the rota database, else 0")
        try:
            stats = self.app.stats()
            schedules = self.app.list_schedules()
        except (RotaError, *quarantine.UNDECODABLE) as exc:  # a scrape always answers (rota_up 0)
            reason = config.redact_text(
                str(exc) if isinstance(exc, RotaError) else quarantine.describe(exc),
                self.app.database_url,
                self.app.locks_url,
            )
            log.warning("metrics: cannot read the database: %s", reason)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        runs = GaugeMetricFamily("rota_runs", runs_help(stats.get("runs_estimated") or []), labels=["status"])
        for status, count in stats["runs"].items():
            runs.add_metric([status], count)
        yield runs
        yield GaugeMetricFamily("rota_workers_alive", "Workers with a recent heartbeat", value=stats["workers"])
        yield GaugeMetricFamily(
            "rota_workers_capacity", "Concurrency slots of the live workers", value=stats["capacity"]
        )
        yield from _schedule_metrics(schedules)
        yield from vacuum_metrics(self.app.store, self.app.database_url)


def runs_help(estimated: list[str]) -> str:
    """The help of rota_runs says whether the figures are exact (a big PostgreSQL table has its
    final statuses estimated from the planner's statistics, so a scrape never scans it)."""
    if not estimated:
        return "Runs in the database by status (exact counts)"
    return f"Runs in the database by status (estimated from the database's statistics: {', '.join(estimated)})"


def _schedule_metrics(schedules: list[ScheduleInfo]) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    labels = ["schedule"]
    for suffix, attr, doc in _SCHEDULE_COUNTERS:
        family = CounterMetricFamily(f"rota_schedule_{suffix}", doc, labels=labels)
        for s in schedules:
            family.add_metric([s.name], getattr(s, attr))
        yield family
    paused = GaugeMetricFamily("rota_schedule_paused", "1 if the schedule is paused", labels=labels)
    next_run = GaugeMetricFamily(
        "rota_schedule_next_run_timestamp_seconds", "When the schedule fires next (Unix time)", labels=labels
    )
    last_run = GaugeMetricFamily(
        "rota_schedule_last_run_timestamp_seconds", "When the schedule last fired (Unix time)", labels=labels
    )
    for s in schedules:
        paused.add_metric([s.name], 1 if s.paused else 0)
        if s.next_run_at is not None:
            next_run.add_metric([s.name], s.next_run_at.timestamp())
        if s.last_run_at is not None:
            last_run.add_metric([s.name], s.last_run_at.timestamp())
    yield from (paused, next_run, last_run)


def make_registry(app: App) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)  # no database read at registration
    registry.register(StoreCollector(app))
    return registry


async def metrics(request: Request) -> Response:
    registry: CollectorRegistry = request.app.state.registry
    body = await run_in_threadpool(generate_latest, registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
