"""The `rota` command: run workers, inspect and steer runs and schedules.

`base` holds the group and its error handling, `display` the tables and time formats; the
commands live in `running` (worker, enqueue, dashboard, demo), `inspect` (read-only) and
`steer` (trigger, pause, resume, cancel, retry), `limits` (flow control).
"""

from __future__ import annotations

from . import inspect, limits, running, steer
from .base import load_app, main

__all__ = ["inspect", "limits", "load_app", "main", "running", "steer"]
