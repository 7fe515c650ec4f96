"""The dashboard's charts: throughput by outcome, start lateness and queue wait, backlog by queue.

Every number comes from the database through bounded, indexed queries (the `web_throughput`,
`web_throughput_where`, `web_lateness`, `web_backlog` and `web_queue_running` named queries
of each store; docs/reference/dashboard.md says more):

- A window (15m, 1h, 24h, 7d) is cut into buckets aligned to the bucket width (1 min, 1 min,
  15 min, 1 h), the last one holding now. Each bucket is one range read of the index
  `rota_runs_finished` (migration 0007) that reads at most `cap` rows, the cap being a share
  of a budget per chart (THROUGHPUT_BUDGET, LATENESS_BUDGET rows), all in one read
  transaction. A task or queue filter is applied to the rows read, after the cap, so it
  never makes a bucket read more. A bucket that hits its cap is scaled to its width from the
  rate of the rows read, and marked `estimated` (lateness: `sampled`).
- Throughput counts the runs that finished in each bucket by final status, and `retried`:
  the attempts that were retried before those runs finished (counted when their run
  finished; a run still waiting for its retry is counted once it ends).
- Lateness is start minus scheduled_for of first attempts; queue wait is start minus the
  moment the run was both due and created, for the last attempt of every run that
  finished; p50 and p95 by nearest rank over the bucket's sample.
- Backlog reads the first BACKLOG_CAP pending runs in due_at order (the rota_runs_due
  index): due now and due later by queue; `truncated` says there were more.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..app import App
from ..errors import ConfigurationError
from ..models import iso
from .api import SafeJSONResponse, _app, _call, _query
from .records import epoch

WINDOWS = {"15m": (900, 60), "1h": (3600, 60), "24h": (86400, 900), "7d": (7 * 86400, 3600)}
# Rows one chart may read, shared by its buckets (each at least MIN_CAP). Unfiltered
# throughput reads only the covering index; a filter and the lateness chart read the table
# for each row, so they get less (p95 at most 73 ms at 1M runs on a loaded 2-core machine).
THROUGHPUT_BUDGET = 30_000
FILTERED_BUDGET = 6_000
LATENESS_BUDGET = 5_000
MIN_CAP = 30
BACKLOG_CAP = 10_000
OUTCOMES = ("succeeded", "failed", "retried", "skipped", "cancelled")


@dataclass(frozen=True)
class Window:
    name: str
    width: int  # seconds per bucket
    starts: list[float]  # each bucket's start, epoch seconds
    now: float
    task: str | None
    queue: str | None

    @property
    def since(self) -> float:
        return self.starts[0]

    def params(self, cap: int, filtered: bool = True) -> list[dict[str, Any]]:
        where = {"task": self.task, "queue": self.queue} if filtered else {}
        return [{"lo": lo, "hi": lo + self.width, "cap": cap, **where} for lo in self.starts]

    def head(self) -> dict[str, Any]:
        return {
            "window": self.name,
            "bucket_seconds": self.width,
            "since": iso_at(self.since),
            "until": iso_at(self.now),
            "task": self.task,
            "queue": self.queue,
        }


def iso_at(seconds: float) -> str | None:
    return iso(datetime.fromtimestamp(seconds, UTC))


def window(app: App, params: Mapping[str, str]) -> Window:
    name = params.get("window", "1h")
    if name not in WINDOWS:
        raise ConfigurationError(f"unknown window {name!r}; valid: {', '.join(WINDOWS)}")
    span, width = WINDOWS[name]
    now = app.store.now().timestamp()
    last = math.floor(now / width) * width
    count = span // width
    starts = [float(last - width * (count - 1 - i)) for i in range(count)]
    return Window(name, width, starts, now, params.get("task"), params.get("queue"))


def cap_for(budget: int, buckets: int) -> int:
    return max(MIN_CAP, budget // buckets)


def throughput_data(app: App, w: Window) -> dict[str, Any]:
    filtered = w.task is not None or w.queue is not None
    cap = cap_for(FILTERED_BUDGET if filtered else THROUGHPUT_BUDGET, len(w.starts))
    query = "web_throughput_where" if filtered else "web_throughput"
    results = app.store.web_rows(query, w.params(cap, filtered=filtered))
    buckets = [_throughput_bucket(w, lo, rows[0], cap) for lo, rows in zip(w.starts, results, strict=True)]
    totals = {k: sum(b[k] for b in buckets) for k in OUTCOMES}
    return {**w.head(), "cap": cap, "buckets": buckets, "totals": totals,
            "estimated": any(b["estimated"] for b in buckets)}  # fmt: skip


def _throughput_bucket(w: Window, lo: float, row: Any, cap: int) -> dict[str, Any]:
    n, last, _matched, ok, failed, skipped, cancelled, retried = row
    counts = {"succeeded": int(ok), "failed": int(failed), "retried": int(retried or 0), "skipped": int(skipped),
              "cancelled": int(cancelled)}  # fmt: skip
    estimated = int(n) >= cap
    if estimated:
        covered = (epoch(last) or lo) - lo
        span = min(lo + w.width, w.now) - lo
        scale = span / covered if covered > 0 else 1.0
        counts = {k: round(v * scale) for k, v in counts.items()}
    return {"start": iso_at(lo), **counts, "estimated": estimated}


def percentile(values: list[float], p: float) -> float | None:
    """Nearest rank: the smallest value with at least p% of the values at or below it."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def _stats(values: list[float]) -> dict[str, Any]:
    p50, p95 = percentile(values, 50), percentile(values, 95)
    return {"n": len(values), "p50": _round(p50), "p95": _round(p95)}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def lateness_data(app: App, w: Window) -> dict[str, Any]:
    cap = cap_for(LATENESS_BUDGET, len(w.starts))
    results = app.store.web_rows("web_lateness", w.params(cap))
    buckets, all_late, all_wait = [], [], []
    for lo, rows in zip(w.starts, results, strict=True):
        # (a damaged row's infinite time gives no figure: left out, not a chart that fails)
        late = [float(r[1]) for r in rows if r[3] and r[0] == 1 and r[1] is not None and math.isfinite(r[1])]
        wait = [float(r[2]) for r in rows if r[3] and r[2] is not None and math.isfinite(r[2])]
        all_late += late
        all_wait += wait
        buckets.append({"start": iso_at(lo), "lateness": _stats(late), "wait": _stats(wait),
                        "sampled": len(rows) >= cap})  # fmt: skip
    return {**w.head(), "cap": cap, "buckets": buckets, "lateness": _stats(all_late), "wait": _stats(all_wait),
            "sampled": any(b["sampled"] for b in buckets)}  # fmt: skip


def backlog_data(app: App) -> dict[str, Any]:
    pending, running = app.store.web_rows("web_backlog", [{"cap": BACKLOG_CAP}]) + app.store.web_rows(
        "web_queue_running", [{}]
    )
    queues: dict[str, dict[str, int]] = {}
    for queue, due, later, _ in pending:
        queues[queue] = {"due": int(due), "later": int(later), "running": 0}
    for queue, n in running:
        queues.setdefault(queue, {"due": 0, "later": 0, "running": 0})["running"] = int(n)
    read = sum(int(r[3]) for r in pending)
    counts = app.store.run_counts()  # kept cheaply by the store (estimated on a big PostgreSQL table)
    return {
        "at": iso_at(app.store.now().timestamp()),
        "queues": [{"queue": q, **v} for q, v in sorted(queues.items())],
        "cap": BACKLOG_CAP,
        "truncated": read >= BACKLOG_CAP,
        "pending": counts.counts.get("pending", 0),
        "pending_estimated": "pending" in counts.estimated,
    }


CHART_PARAMS = {"window", "task", "queue"}


async def throughput(request: Request) -> Response:
    app = _app(request)
    w = await _call(window, app, _query(request, CHART_PARAMS))
    return SafeJSONResponse(await _call(throughput_data, app, w))


async def lateness(request: Request) -> Response:
    app = _app(request)
    w = await _call(window, app, _query(request, CHART_PARAMS))
    return SafeJSONResponse(await _call(lateness_data, app, w))


async def backlog(request: Request) -> Response:
    _query(request, set())
    return SafeJSONResponse(await _call(backlog_data, _app(request)))


def routes() -> list[BaseRoute]:
    return [
        Route("/api/charts/throughput", throughput),
        Route("/api/charts/lateness", lateness),
        Route("/api/charts/backlog", backlog),
    ]
