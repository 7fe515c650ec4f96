"""The shapes shared by the runner, the registry and the measurement functions."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Backend = Literal["postgres", "sqlite", "mysql"]
DEFAULT_MYSQL_URL = "mysql://root@127.0.0.1:3306/mysql"
Kind = Literal["rota", "peer", "ceiling"]
Metrics = dict[str, float]


class Unsupported(RuntimeError):
    """A measurement cannot run here (missing API or server); reported as skipped, not failed."""


@dataclass(frozen=True)
class Ctx:
    """What every measurement function receives (serialised to the child process as JSON)."""

    key: str  # the system's key, used to name its database
    run: int  # 1-based run number
    workdir: str  # a fresh directory for this run (SQLite files, probe, logs)
    pg_url: str  # admin URL of the PostgreSQL server (any database; bench_* are created)
    quick: bool
    jobs: int  # W1 drain size
    enqueue_single: int  # W1 single-enqueue calls
    samples: int  # W2 pickup samples
    ticks: int  # W3 schedule ticks
    idle_seconds: float  # W4 measuring window
    idle_schedules: int  # W4 schedules registered
    backlog: int  # W5 rows in the table besides the due ones
    backlog_due: int  # W5 due runs drained in both halves
    real_jobs: int = 10_000  # W7 drain size (small real job)
    memory_backlog: int = 1_000_000  # W9 runs drained while the worker's memory is watched
    mysql_url: str = DEFAULT_MYSQL_URL  # admin URL of the MySQL/MariaDB server (bench_* are created)

    @property
    def dir(self) -> Path:
        return Path(self.workdir)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


MeasureFn = Callable[..., Metrics]


@dataclass(frozen=True)
class Table:
    """One result table: the systems measured the same way, side by side."""

    key: str  # e.g. "W1.drain"
    title: str
    unit: str
    primary: str  # the metric shown with its spread and used for ratios
    extras: tuple[tuple[str, str], ...] = ()  # (metric, column header), medians only
    lower_is_better: bool = False
    # backend -> system key whose primary metric is the reference for the "vs" columns
    peer: dict[str, str] = field(default_factory=dict)
    ceiling: dict[str, str] = field(default_factory=dict)
    definition: str = ""
    peer_label: str = "vs peer"  # header of the column dividing by the `peer` system

    @property
    def workload(self) -> str:
        return self.key.split(".", 1)[0]


@dataclass(frozen=True)
class System:
    """One row of a table: a system measured by a function run in a fresh child process."""

    key: str
    table: str
    label: str
    backend: Backend
    kind: Kind
    func: str  # "module:function" taking (ctx, **params) and returning Metrics
    params: dict[str, Any] = field(default_factory=dict)
    settings: str = ""  # human-readable configuration, printed under the table
    max_jobs: int | None = None  # cap on Ctx.jobs for slow systems (rates are flat)
    max_runs: int | None = None  # cap on runs for workloads that take minutes per run
    timeout: float = 900.0  # seconds for one run's child process


@dataclass
class Summary:
    median: float
    low: float
    high: float
    n: int


def summarise(values: Sequence[float]) -> Summary:
    return Summary(statistics.median(values), min(values), max(values), len(values))


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear-interpolated percentile (pct in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * pct / 100.0
    lo = int(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def latency_metrics(seconds: Sequence[float]) -> Metrics:
    """p50/p95/p99/max in milliseconds of a list of durations in seconds."""
    ms = [s * 1000.0 for s in seconds]
    return {
        "p50_ms": percentile(ms, 50),
        "p95_ms": percentile(ms, 95),
        "p99_ms": percentile(ms, 99),
        "max_ms": max(ms),
        "samples": float(len(ms)),
    }
