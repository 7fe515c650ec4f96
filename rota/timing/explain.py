"""Next fire times and `explain`: each time with a note where daylight saving moves it."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import NamedTuple
from zoneinfo import ZoneInfo

from cronsim import CronSim

from rota.errors import ConfigurationError

from ._units import _exact_duration, _hm, _wall_list, computable
from .jitter import check_jitter, jitter_offset
from .triggers import CronTrigger, _instants, _offset


@dataclass(frozen=True)
class FireTime:
    """One fire time of a cron expression, with a note when daylight saving moved it."""

    local: datetime
    utc: datetime
    note: str | None
    offset: timedelta | None = None  # with jitter: how late the tick's run is due (see .jitter)

    @property
    def due(self) -> datetime:
        """When the tick's run may start: the tick plus its jitter offset."""
        return self.utc + (self.offset or timedelta(0))


def next_fire_times(
    cron: str,
    tz: str = "UTC",
    after: datetime | None = None,
    count: int = 5,
    *,
    jitter: timedelta | float | None = None,
    name: str | None = None,
) -> list[datetime]:
    """The next `count` fire times of `cron` strictly after `after` (default: now), as aware
    datetimes in the zone `tz` (local wall time, correct offset). A naive `after` is read in
    `tz`. With `jitter`, each is the time the tick's run is due (tick + offset) for a
    schedule named `name` (offsets are hashed from the schedule's name and the tick; without
    a name, from the expression and zone: see `explain`)."""
    return [
        fire.due.astimezone(fire.local.tzinfo) for fire in explain(cron, tz, after, count, jitter=jitter, name=name)
    ]


def explain(
    cron: str,
    tz: str = "UTC",
    after: datetime | None = None,
    count: int = 5,
    *,
    jitter: timedelta | float | None = None,
    name: str | None = None,
) -> list[FireTime]:
    """Like next_fire_times, with a note on each fire time that daylight saving affects, and
    with `jitter` each tick's `offset`: the one a schedule named `name` gets (hashed from
    the name and the tick), or, without a name, one hashed from ``"<cron> <tz>"`` (a
    schedule's own offsets differ; all lie in [0, jitter) and before the next tick)."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigurationError(f"count must be a positive integer, got {count!r}")
    trigger = CronTrigger(cron=cron, tz=tz)
    zone = trigger.zone
    if after is None:
        after = datetime.now(UTC)
    elif after.tzinfo is None or after.utcoffset() is None:
        after = after.replace(tzinfo=zone)
    computable(after, "after")
    spread = check_jitter(jitter)
    fires: list[FireTime] = []
    try:
        _fires(trigger, after, count, spread, name if name is not None else f"{cron} {tz}", fires)
    except OverflowError:  # past the end of year 9999: the fire times before it are all there are
        if not fires:
            raise ConfigurationError(
                f"cron {cron!r} in {tz} has no fire time after {after.isoformat()} before the end of year 9999"
            ) from None
    return fires


def _fires(
    trigger: CronTrigger, after: datetime, count: int, spread: timedelta | None, seed: str, fires: list[FireTime]
) -> None:
    """Append up to `count` fire times after `after` to `fires`."""
    zone = trigger.zone
    previous = after.astimezone(zone)
    for tick in itertools.islice(trigger.ticks_after(after), count):
        local = tick.astimezone(zone)
        offset = jitter_offset(trigger, seed, tick, spread) if spread is not None else None
        fires.append(FireTime(local=local, utc=tick, note=_dst_note(trigger, previous, local), offset=offset))
        previous = local


def _dst_note(trigger: CronTrigger, previous: datetime, local: datetime) -> str | None:
    """Why daylight saving moved, dropped or repeated a fire time, or None."""
    notes = []
    gap = _nonexistent_times(trigger, previous, local)
    if gap:
        notes.append(_gap_note(trigger, gap, local))
    if _is_ambiguous(local):
        notes.append(_repeat_note(trigger, local))
    return "; ".join(notes) or None


def _nonexistent_times(trigger: CronTrigger, previous: datetime, local: datetime) -> list[datetime]:
    """Wall times the expression names between two consecutive fires that do not exist."""
    start, end = previous.replace(tzinfo=None), local.replace(tzinfo=None)
    missing = []
    # Naive cronsim walks the wall clock as if there were no zone; bounded for safety.
    for wall in itertools.islice(CronSim(trigger.expanded, start), 10_000):
        if wall >= end:
            break
        if not _instants(wall, trigger.zone):
            missing.append(wall)
    return missing


def _gap_note(trigger: CronTrigger, gap: list[datetime], local: datetime) -> str:
    zone = trigger.zone
    change = _transition(zone, gap[0])
    verb = "does" if len(gap) == 1 else "do"
    head = (
        f"{_wall_list(gap)} {verb} not exist on {gap[0].date()} in {trigger.tz} "
        f"(clocks jump from {_hm(change.old_wall)} to {_hm(change.new_wall)})"
    )
    if trigger.follows_wall_clock:
        return f"{head}; this schedule follows the wall clock, so it does not run then"
    named = _names(trigger, local)
    if len(gap) == 1 and not named:
        return f"{head}; runs at {_hm(local)} {local.tzname()}"
    together = f", together with the {_hm(local)} run" if named else ""
    return f"{head}; runs once, at {_hm(local)} {local.tzname()}{together}"


def _repeat_note(trigger: CronTrigger, local: datetime) -> str:
    change = _transition(trigger.zone, local.replace(tzinfo=None))
    clocks = f"clocks go back at {_hm(change.old_wall)} {change.old_name} to {_hm(change.new_wall)} {change.new_name}"
    where = f"on {local.date()} in {trigger.tz}"
    if not trigger.follows_wall_clock:
        return f"{_hm(local)} happens twice {where} ({clocks}); runs once, at the first ({local.tzname()})"
    if local.fold == 0:
        return (
            f"{_hm(local)} happens twice {where} ({clocks}); this schedule follows the wall "
            f"clock, so it runs at both: this is the first ({local.tzname()})"
        )
    shift = change.old_wall - change.new_wall
    what = "hour" if shift == timedelta(hours=1) else f"{_exact_duration(shift)} of wall time"
    return f"repeated {what}: {_hm(local)} again, now {local.tzname()} after {change.old_name} ({clocks} {where})"


def _names(trigger: CronTrigger, local: datetime) -> bool:
    """Whether the expression itself names this wall time (not only the jump moved it here)."""
    wall = local.replace(tzinfo=None)
    return next(CronSim(trigger.expanded, wall - timedelta(seconds=1))) == wall


def _is_ambiguous(local: datetime) -> bool:
    return local.replace(fold=0).utcoffset() != local.replace(fold=1).utcoffset()


class _Change(NamedTuple):
    """A change of UTC offset, as the clocks read it: "from 02:00 CET to 03:00 CEST"."""

    old_wall: datetime
    old_name: str
    new_wall: datetime
    new_name: str


def _transition(zone: ZoneInfo, wall: datetime) -> _Change:
    """The offset change that makes the naive `wall` time skipped or repeated in `zone`."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    lo, hi = min(first, second), max(first, second)
    old = lo.astimezone(zone)
    while hi - lo > timedelta(seconds=1):  # binary search: the first second of the new offset
        mid = lo + (hi - lo) // 2
        if _offset(mid.astimezone(zone)) == _offset(old):
            lo = mid
        else:
            hi = mid
    new = hi.astimezone(zone)
    old_wall = hi.replace(tzinfo=None) + _offset(old)
    return _Change(old_wall, old.tzname() or "", new.replace(tzinfo=None), new.tzname() or "")
