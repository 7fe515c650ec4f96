"""The `rota` command: run workers, inspect and steer runs and schedules.

`base` holds the group and its error handling, `display` the tables and time formats; the
commands live in `running` (worker, enqueue, dashboard, demo), `inspect` (read-only) and
`steer` (trigger, pause, resume, cancel, retry), `operate` (schedules and queues changed as
data), `flow` (backfill, bulk retry) and `limits`
(concurrency limits and rates).
"""

from __future__ import annotations

from . import flow, inspect, limits, operate, running, steer
from .base import load_app, main

__all__ = ["flow", "inspect", "limits", "load_app", "main", "operate", "running", "steer"]
