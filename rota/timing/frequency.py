"""How often a schedule fires: the shortest gap between two of its ticks, for the
high-frequency warning (ROTA_HIGH_FREQUENCY, default 60 s; 0 turns it off).

A schedule firing more often than the threshold is usually a typo (`every=6` meant minutes)
or a job that belongs in a loop inside one long-running task: each tick is a run row, a
transaction and a history entry. An `every=` schedule's gap is its interval; a cron
expression's is the shortest gap among its next ticks (five-field cron fires at most once a
minute, so with a threshold of 60 s or less it is never high-frequency)."""

from __future__ import annotations

import functools
import itertools
from datetime import UTC, datetime, timedelta

from ..errors import ConfigurationError
from .triggers import make_trigger

CRON_SAMPLE = 48  # ticks looked at: a day's pattern of an hourly-or-faster expression
_CRON_FASTEST = 60.0  # seconds: five-field cron fires at most once a minute


def is_high_frequency(cron: str | None, every: timedelta | float | None, tz: str, threshold: float) -> bool:
    """True when the schedule fires more often than every `threshold` seconds (0: never).
    A schedule this host cannot read (an unknown zone, a bad cron) is not judged here."""
    if threshold <= 0:
        return False
    if every is not None:
        seconds = every.total_seconds() if isinstance(every, timedelta) else float(every)
        return seconds < threshold
    if cron is None or threshold <= _CRON_FASTEST:
        return False
    gap = shortest_cron_gap(cron, tz)
    return gap is not None and gap < threshold


@functools.lru_cache(maxsize=1024)
def shortest_cron_gap(cron: str, tz: str) -> float | None:
    """The shortest gap, in seconds, among the next CRON_SAMPLE ticks of `cron` in `tz`
    (None if it cannot be read here)."""
    try:
        trigger = make_trigger(cron=cron, tz=tz)
    except ConfigurationError:
        return None
    ticks = list(itertools.islice(trigger.ticks_after(datetime.now(UTC)), CRON_SAMPLE))
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(ticks)]
    return min(gaps) if gaps else None
