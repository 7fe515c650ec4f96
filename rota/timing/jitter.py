"""Jitter: each tick of a schedule starts a stable offset late, the same on every host.

The offset of a tick is ``fraction * min(jitter, gap)`` where `gap` is the time from the
tick to the schedule's next tick and `fraction`, in [0, 1), comes from a BLAKE2b hash of
the schedule's name and the tick (its instant, in whole microseconds since the epoch). So
it lies in [0, jitter), never reaches the next tick (its due time stays before the next
tick's), and every worker computes the same from the same inputs: no coordination needed.
`rota explain`, which has no schedule name, hashes the expression instead (`seed`).
"""

from __future__ import annotations

import functools
import hashlib
import math
from datetime import datetime, timedelta

from rota.errors import ConfigurationError, shown

from ._units import _US, _ZERO, EPOCH, _exact_duration, _utc, computable
from .triggers import IntervalTrigger, Trigger, make_trigger

_MAX_JITTER = 366 * 86400.0  # longer is a typo (and past a few thousand years, not a timedelta)


def check_jitter(jitter: object, trigger: Trigger | None = None) -> timedelta | None:
    """`jitter` as a timedelta (None or 0: no jitter); seconds (int/float) are accepted.
    Refused with one line: a negative value, and for an interval (every=) one that is not
    shorter than the interval (a cron schedule's gaps vary: there the offset is clamped)."""
    if jitter is None:
        return None
    if isinstance(jitter, bool) or not isinstance(jitter, (int, float, timedelta)):
        raise ConfigurationError(f"jitter must be a timedelta or seconds, got {jitter!r}")
    seconds = jitter.total_seconds() if isinstance(jitter, timedelta) else jitter
    if not (math.isfinite(seconds) and abs(seconds) <= _MAX_JITTER):
        raise ConfigurationError(
            f"jitter must be seconds from 0 to a year ({_MAX_JITTER:.0f}) or a timedelta, got {shown(jitter)}"
        )
    span = jitter if isinstance(jitter, timedelta) else timedelta(seconds=jitter)
    if span < _ZERO:
        raise ConfigurationError(f"jitter must be >= 0 (a delay after each tick), got {shown(jitter)}")
    if isinstance(trigger, IntervalTrigger) and span >= trigger.every:
        raise ConfigurationError(
            f"jitter {_exact_duration(span)} must be shorter than the schedule's interval "
            f"(every={_exact_duration(trigger.every)}): a tick would start at or after the next one"
        )
    return span if span > _ZERO else None


def fraction(seed: str, tick: datetime) -> float:
    """A stable number in [0, 1) from `seed` and the tick's instant."""
    micros = (_utc(tick, "tick") - EPOCH) // _US
    digest = hashlib.blake2b(f"{seed}\x00{micros}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def jitter_offset(trigger: Trigger, seed: str, tick: datetime, jitter: timedelta | None) -> timedelta:
    """How late the run of `tick` starts: in [0, jitter), and below the gap to the next tick."""
    if jitter is None or jitter <= _ZERO:
        return _ZERO
    gap = trigger.next_after(tick) - tick
    spread = min(jitter, gap)
    offset = (spread // _US) * fraction(seed, tick)
    return min(timedelta(microseconds=int(offset)), spread - _US)


def jittered(trigger: Trigger, seed: str, tick: datetime, jitter: timedelta | None) -> datetime:
    """The due time of `tick`'s run: the tick plus its offset."""
    return tick + jitter_offset(trigger, seed, tick, jitter)


def jitter_boundary(
    trigger: Trigger, seed: str, first: datetime, boundary: datetime, jitter: timedelta | None
) -> datetime:
    """The misfire boundary for a jittered schedule: a tick is missed when its due time
    (tick + offset) is before `boundary` (``now - grace``). Due times increase with the
    ticks (an offset stays below the gap), so at most one tick before `boundary` is due at or
    after it: the newest one. Returns that tick (ticks before it are missed, it is not), or
    `boundary` unchanged. Looks at the ticks in [boundary - jitter, boundary) only."""
    if jitter is None or jitter <= _ZERO or first >= boundary:
        return boundary
    low = max(first, boundary - jitter)
    tick = first if first >= low else trigger.next_after(low - _US)
    newest = None
    while tick < boundary:
        newest, tick = tick, trigger.next_after(tick)
    if newest is not None and jittered(trigger, seed, newest, jitter) >= boundary:
        return newest
    return boundary


def ticks_between(trigger: Trigger, start: datetime, end: datetime, cap: int) -> list[datetime]:
    """The trigger's ticks in [start, end), oldest first; more than `cap` is refused, and a
    start too close to year 1 to compute from (none lies past the end of year 9999)."""
    start, end = computable(start, "start"), computable(end, "end")
    if end <= start:
        raise ConfigurationError(f"end ({end.isoformat()}) must be after start ({start.isoformat()})")
    ticks: list[datetime] = []
    tick = _next_tick(trigger, start - _US)
    while tick is not None and tick < end:
        if len(ticks) >= cap:
            raise ConfigurationError(
                f"[{start.isoformat()}, {end.isoformat()}) holds more than {cap:,} ticks of "
                f"{trigger.description}; backfill at most {cap:,} at a time (split the range)"
            )
        ticks.append(tick)
        tick = _next_tick(trigger, tick)
    return ticks


def _next_tick(trigger: Trigger, after: datetime) -> datetime | None:
    """The tick after `after` (at least EARLIEST), or None past the end of year 9999."""
    try:
        return trigger.next_after(after)
    except OverflowError:
        return None


@functools.lru_cache(maxsize=1024)
def _stored_trigger(cron: str | None, every: float | None, tz: str) -> Trigger:
    span = timedelta(seconds=every) if every is not None else None
    return make_trigger(cron=cron, every=span, tz=tz)


def stored_due(
    name: str, tick: datetime, jitter: float | None, cron: str | None, every: float | None, tz: str
) -> datetime:
    """The due time of a stored schedule's `tick` (its columns as stored): the one function
    that maps a tick to when its run may start, where ticks are inserted and where
    next_run_at is shown. A timing that cannot be planned (a zone this host lacks) gets no
    offset here; its worker records the plan error."""
    if not jitter:
        return tick
    try:
        trigger = _stored_trigger(cron, every, tz)
    except ConfigurationError:
        return tick
    return jittered(trigger, name, tick, timedelta(seconds=jitter))
