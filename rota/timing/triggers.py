"""Triggers: cron (with the Debian DST rule, see rota.timing) and fixed intervals."""

from __future__ import annotations

import abc
import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from cronsim import CronSim

from rota.errors import ConfigurationError

from ._units import _US, _ZERO, EPOCH, _exact_duration, _seconds_number, _utc
from .cron import _check_cron_can_fire, _expand_cron
from .zones import resolve_zone


class Trigger(abc.ABC):
    """When a schedule fires. Immutable and hashable: equal triggers fire at equal times."""

    tz: str

    @abc.abstractmethod
    def next_after(self, after: datetime) -> datetime:
        """The first fire time strictly after `after` (aware, any zone), as aware UTC."""

    @property
    @abc.abstractmethod
    def description(self) -> str:
        """A short human description, e.g. "cron '30 2 * * *' in Europe/Berlin"."""

    def ticks_after(self, after: datetime) -> Iterator[datetime]:
        """The fire times strictly after `after`, oldest first, as aware UTC; endless."""
        tick = after
        while True:
            tick = self.next_after(tick)
            yield tick


@dataclass(frozen=True)
class CronTrigger(Trigger):
    """A five-field cron expression (or an @-alias) read in the IANA zone `tz`."""

    cron: str
    tz: str = "UTC"
    expanded: str = field(init=False)
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        zone = resolve_zone(self.tz)
        expanded = _expand_cron(self.cron)
        _check_cron_can_fire(self.cron, expanded, zone)
        object.__setattr__(self, "expanded", expanded)
        object.__setattr__(self, "_zone", zone)

    @property
    def zone(self) -> ZoneInfo:
        return self._zone

    @property
    def follows_wall_clock(self) -> bool:
        """True when the minute or hour field starts with '*' (Debian's "wildcard job")."""
        minute, hour = self.expanded.split()[:2]
        return minute.startswith("*") or hour.startswith("*")

    @property
    def description(self) -> str:
        shown = repr(self.cron) if self.cron == self.expanded else f"{self.cron!r} ({self.expanded})"
        return f"cron {shown} in {self.tz}"

    def next_after(self, after: datetime) -> datetime:
        return next(self.ticks_after(after))

    def ticks_after(self, after: datetime) -> Iterator[datetime]:
        start = _utc(after, "after")
        walk = _wall_clock_walk if self.follows_wall_clock else _fixed_time_walk
        yield from walk(self.expanded, self._zone, start)
        raise ConfigurationError(  # cronsim looks 50 years ahead at most
            f"cron {self.cron!r} in {self.tz} has no fire time in the 50 years after {start.isoformat()}"
        )


def _fixed_time_walk(expanded: str, zone: ZoneInfo, start: datetime) -> Iterator[datetime]:
    """Fire times of a fixed-time job after `start` (UTC): cronsim's Debian rule as is.

    One CronSim iterator serves the whole walk (a new one per tick costs ~8x more).
    """
    for local in CronSim(expanded, start.astimezone(zone)):
        tick = local.astimezone(UTC)
        # Restarted inside a repeated hour (02:15 CET, fold=1), cronsim returns the first
        # 02:30 (CEST), which is before `start`: the rule says it ran already.
        if tick > start:
            yield tick


def _wall_clock_walk(expanded: str, zone: ZoneInfo, start: datetime) -> Iterator[datetime]:
    """Fire times of a wall-clock job after `start` (UTC): every instant whose local time
    matches, so none for a wall time that does not exist and two for one that repeats.

    cronsim's own zone-aware walk gets this wrong for shifts that are not a whole hour (on
    Lord Howe's spring-forward day, ``30 * * * *`` skips 02:30, which exists), so the match is
    done on naive wall times and each is mapped to its instants here. A repeated time's second
    instant comes out of order; the heap holds it until a later wall time's first instant,
    which is a lower bound for everything still to come, has passed it.
    """
    local = start.astimezone(zone)
    # Inside a repeated stretch, wall times before `start`'s may have their second instant
    # still ahead: begin the walk one shift earlier.
    back = abs(_offset(local.replace(fold=0)) - _offset(local.replace(fold=1)))
    pending: list[datetime] = []
    for wall in CronSim(expanded, local.replace(tzinfo=None) - back - timedelta(seconds=1)):
        instants = _instants(wall, zone)
        for tick in instants:
            if tick > start:
                heapq.heappush(pending, tick)
        while instants and pending and pending[0] <= instants[0]:
            yield heapq.heappop(pending)
    while pending:
        yield heapq.heappop(pending)


def _offset(local: datetime) -> timedelta:
    return local.utcoffset() or _ZERO


def _instants(wall: datetime, zone: ZoneInfo) -> tuple[datetime, ...]:
    """The UTC instants at which a zone's clocks read the naive `wall`: none, one or two."""
    first = wall.replace(tzinfo=zone, fold=0)
    second = wall.replace(tzinfo=zone, fold=1)
    if first.utcoffset() == second.utcoffset():
        return (first.astimezone(UTC),)
    if first.astimezone(UTC).astimezone(zone).replace(tzinfo=None) != wall:
        return ()  # skipped by a jump forward
    return first.astimezone(UTC), second.astimezone(UTC)


@dataclass(frozen=True)
class IntervalTrigger(Trigger):
    """Every `every` of elapsed time, on a grid anchored at the Unix epoch (UTC).

    `tz` is kept for display only: elapsed time does not depend on a zone.
    """

    every: timedelta
    tz: str = "UTC"

    def __post_init__(self) -> None:
        if not isinstance(self.every, timedelta):
            raise ConfigurationError(f"every must be a timedelta, got {self.every!r}")
        if self.every <= timedelta(0):
            raise ConfigurationError(
                f"every={_seconds_number(self.every)} seconds is not positive: a schedule's interval is from 1 "
                "second to 3650 days"
            )
        resolve_zone(self.tz)

    @property
    def step_us(self) -> int:
        """The interval in whole microseconds."""
        return self.every // _US

    @property
    def description(self) -> str:
        return f"every {_exact_duration(self.every)}"

    def index_after(self, after: datetime) -> int:
        """k of the first grid tick epoch + k*every strictly after `after`."""
        return (_utc(after, "after") - EPOCH) // _US // self.step_us + 1

    def index_at_or_after(self, moment: datetime) -> int:
        """k of the first grid tick at or after `moment`."""
        return -(-((_utc(moment, "moment") - EPOCH) // _US) // self.step_us)

    def tick(self, k: int) -> datetime:
        """The k-th grid tick, epoch + k*every."""
        return EPOCH + timedelta(microseconds=k * self.step_us)

    def next_after(self, after: datetime) -> datetime:
        return self.tick(self.index_after(after))


def make_trigger(
    *,
    cron: str | None = None,
    every: timedelta | float | int | None = None,
    tz: str | None = None,
) -> Trigger:
    """A CronTrigger or an IntervalTrigger; exactly one of `cron` / `every` (seconds or a
    timedelta) must be given. `tz` defaults to "UTC"."""
    if (cron is None) == (every is None):
        got = "both" if cron is not None else "neither"
        raise ConfigurationError(
            f"give exactly one of cron= (e.g. '0 3 * * *') or every= (e.g. "
            f"timedelta(minutes=5) or 300 seconds), got {got}"
        )
    zone_name = "UTC" if tz is None else tz
    if cron is not None:
        return CronTrigger(cron=cron, tz=zone_name)
    return IntervalTrigger(every=_as_timedelta(every), tz=zone_name)


def _as_timedelta(every: object) -> timedelta:
    if isinstance(every, timedelta):
        return every
    if isinstance(every, bool) or not isinstance(every, int | float):
        raise ConfigurationError(
            f"every must be a timedelta or a number of seconds, got {every!r} ({type(every).__name__})"
        )
    try:
        return timedelta(seconds=every)
    except (ValueError, OverflowError):
        raise ConfigurationError(f"every must be a finite number of seconds, got {every!r}") from None
