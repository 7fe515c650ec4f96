"""Fire times: cron and interval triggers, time zones, daylight saving, misfire arithmetic.

Everything here is pure (no I/O, no clock unless a caller leaves ``after`` out), so every
worker computes the same ticks and the same misfire plan from the same inputs; that is what
lets any number of them agree on a schedule without a leader.

Daylight saving follows the Debian cron rule:

- A fixed-time job (neither the minute nor the hour field starts with ``*``) whose local
  time does not exist, because clocks jump forward, runs once at the moment of the jump:
  ``30 2 * * *`` in Europe/Berlin runs at 03:00 CEST on the spring-forward day.
- A fixed-time job whose local time happens twice, because clocks go back, runs once, at
  the first occurrence (02:30 CEST, not again at 02:30 CET).
- A job whose minute or hour field starts with ``*`` (``*/15 * * * *``, ``30 * * * *``)
  follows the wall clock: no run at wall times that do not exist, a run at both occurrences
  of a repeated wall time.

cronsim matches the expressions and applies the fixed-time rule; wall-clock jobs are matched
on naive wall times and mapped to instants here, because cronsim's own zone-aware walk skips
existing times around a shift that is not a whole hour (Australia/Lord_Howe).

``every=`` intervals are elapsed time, unaffected by zones. Their ticks are anchored on the
Unix epoch (1970-01-01T00:00:00Z): the fire times are ``epoch + k * every``, computed in whole
microseconds, so every instance computes the same grid and "every 5 minutes" fires at :00,
:05, :10 and so on.
"""

from __future__ import annotations

from datetime import UTC

from ._units import EPOCH as EPOCH
from .cron import CRON_ALIASES as CRON_ALIASES
from .explain import FireTime, explain, next_fire_times
from .jitter import check_jitter, jitter_offset, jittered, ticks_between
from .misfire import (
    COUNT_BOUND_PER_LIMIT as COUNT_BOUND_PER_LIMIT,
)
from .misfire import (
    MISFIRE_POLICIES,
    OVERLAP_POLICIES,
    TickPlan,
    check_misfire,
    check_overlap,
    judge_unclaimed,
    plan_ticks,
    tick_ahead,
)
from .misfire import (
    TICK_ROWS as TICK_ROWS,
)
from .triggers import CronTrigger, IntervalTrigger, Trigger, make_trigger
from .zones import resolve_zone

__all__ = [
    "MISFIRE_POLICIES",
    "OVERLAP_POLICIES",
    "UTC",
    "CronTrigger",
    "FireTime",
    "IntervalTrigger",
    "TickPlan",
    "Trigger",
    "check_jitter",
    "check_misfire",
    "check_overlap",
    "explain",
    "jitter_offset",
    "jittered",
    "judge_unclaimed",
    "make_trigger",
    "next_fire_times",
    "plan_ticks",
    "resolve_zone",
    "tick_ahead",
    "ticks_between",
]
