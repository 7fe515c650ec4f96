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

import abc
import functools
import heapq
import itertools
import zoneinfo
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import NamedTuple
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from rota.errors import ConfigurationError, did_you_mean, one_of

__all__ = [
    "MISFIRE_POLICIES",
    "OVERLAP_POLICIES",
    "UTC",
    "CronTrigger",
    "FireTime",
    "IntervalTrigger",
    "TickPlan",
    "Trigger",
    "check_misfire",
    "check_overlap",
    "explain",
    "make_trigger",
    "next_fire_times",
    "plan_ticks",
    "resolve_zone",
]


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_ZERO = timedelta(0)

MISFIRE_POLICIES = ("coalesce", "all", "skip")
OVERLAP_POLICIES = ("skip", "queue", "concurrent", "replace")

CRON_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_CRON_FORMAT = (
    "use five fields: minute hour day-of-month month day-of-week (e.g. '30 2 * * *'), "
    "or @hourly/@daily/@midnight/@weekly/@monthly/@yearly/@annually"
)
_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_FIELD_VALUES = {
    "minute": "0-59",
    "hour": "0-23",
    "day-of-month": "1-31, L or LW",
    "month": "1-12 or JAN-DEC",
    "day-of-week": "0-7 or SUN-SAT, 5L for the last Friday, MON#2 for the second Monday",
}


# --- zones -----------------------------------------------------------------------------


def resolve_zone(name: str) -> ZoneInfo:
    """The IANA zone called `name`, or a ConfigurationError naming it (with a suggestion)."""
    if not isinstance(name, str):
        raise ConfigurationError(f"time zone must be a string such as 'UTC', got {name!r}")
    if name in _NOT_IANA or name.startswith(("posix/", "right/", "/")) or "\x00" in name:
        raise ConfigurationError(
            f"time zone {name!r} is not an IANA zone name: it means different things on different "
            "hosts; use an IANA name such as 'UTC' or 'Europe/Berlin'"
        )
    return _load_zone(name)


# Files in a tz database that are not zones: the host's own setting, build artefacts.
_NOT_IANA = frozenset({"localtime", "posixrules", "Factory"})


@functools.lru_cache(maxsize=512)
def _load_zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        pass
    raise ConfigurationError(
        f"unknown time zone {name!r}{_zone_hint(name)}; use an IANA name such as 'UTC' or 'Europe/Berlin'"
    )


@functools.cache
def _zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def _zone_hint(name: str) -> str:
    """' (did you mean ...?)', preferring a match that differs only in case."""
    names = _zone_names()
    same_but_case = {z.lower(): z for z in names}.get(name.lower())
    return f" (did you mean {same_but_case!r}?)" if same_but_case else did_you_mean(name, names)


# --- triggers --------------------------------------------------------------------------


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
            raise ConfigurationError(f"every must be positive, got {_seconds_number(self.every)} seconds")
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


# --- cron validation -------------------------------------------------------------------


def _expand_cron(cron: object) -> str:
    """The five-field form of `cron` (aliases mapped, whitespace normalised), or an error."""
    if not isinstance(cron, str):
        raise ConfigurationError(f"cron must be a string such as '0 3 * * *', got {cron!r}")
    text = cron.strip()
    if text.startswith("@"):
        return _expand_alias(text)
    fields = text.split()
    if len(fields) == 6:
        raise ConfigurationError(
            f"invalid cron expression {cron!r}: it has 6 fields, rota takes five (minute hour "
            "day-of-month month day-of-week); for schedules finer than a minute use "
            "every=timedelta(seconds=...)"
        )
    if len(fields) != 5:
        raise ConfigurationError(f"invalid cron expression {cron!r}: it has {len(fields)} fields; {_CRON_FORMAT}")
    return " ".join(fields)


def _expand_alias(alias: str) -> str:
    word = alias.lower()
    if word == "@reboot":
        raise ConfigurationError(
            "cron '@reboot' is not supported: rota schedules are tied to time, not to a "
            "machine's boot; use run_immediately=True to fire a schedule as soon as a worker "
            "first sees it"
        )
    if word not in CRON_ALIASES:
        raise ConfigurationError(
            f"unknown cron alias {alias!r}{did_you_mean(word, CRON_ALIASES)}; "
            f"valid aliases are {', '.join(CRON_ALIASES)}"
        )
    return CRON_ALIASES[word]


def _check_cron_can_fire(cron: str, expanded: str, zone: ZoneInfo) -> None:
    """Parse with cronsim and find one fire time, or raise an error naming the expression."""
    try:
        next(CronSim(expanded, datetime(2000, 1, 1, tzinfo=zone)))
    except CronSimError as exc:
        raise ConfigurationError(
            f"invalid cron expression {cron!r}: {_cron_reason(expanded, str(exc))}; {_CRON_FORMAT}"
        ) from None
    except StopIteration:
        raise ConfigurationError(
            f"invalid cron expression {cron!r}: it can never fire (no match in 50 years)"
        ) from None


def _cron_reason(expanded: str, message: str) -> str:
    """cronsim's "Bad day-of-month" made specific: which field, what value, what is valid."""
    fields = expanded.split()
    name = message.removeprefix("Bad ").strip()
    if name not in _FIELDS:
        return message
    value = fields[_FIELDS.index(name)]
    if name == "day-of-month" and _parses_with_any_month(fields):
        return f"it can never fire: day-of-month {value!r} never occurs in month {fields[3]!r}"
    return f"bad {name} field {value!r} (valid: {_FIELD_VALUES[name]}, with lists, ranges and steps)"


def _parses_with_any_month(fields: list[str]) -> bool:
    try:
        CronSim(" ".join([*fields[:3], "*", fields[4]]), datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError:
        return False
    return True


# --- public helpers: next fire times, explain --------------------------------------------


@dataclass(frozen=True)
class FireTime:
    """One fire time of a cron expression, with a note when daylight saving moved it."""

    local: datetime
    utc: datetime
    note: str | None


def next_fire_times(cron: str, tz: str = "UTC", after: datetime | None = None, count: int = 5) -> list[datetime]:
    """The next `count` fire times of `cron` strictly after `after` (default: now), as aware
    datetimes in the zone `tz` (local wall time, correct offset). A naive `after` is read in
    `tz`."""
    return [fire.local for fire in explain(cron, tz, after, count)]


def explain(cron: str, tz: str = "UTC", after: datetime | None = None, count: int = 5) -> list[FireTime]:
    """Like next_fire_times, with a note on each fire time that daylight saving affects."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigurationError(f"count must be a positive integer, got {count!r}")
    trigger = CronTrigger(cron=cron, tz=tz)
    zone = trigger.zone
    if after is None:
        after = datetime.now(UTC)
    elif after.tzinfo is None or after.utcoffset() is None:
        after = after.replace(tzinfo=zone)
    fires: list[FireTime] = []
    previous = after.astimezone(zone)
    for tick in itertools.islice(trigger.ticks_after(after), count):
        local = tick.astimezone(zone)
        fires.append(FireTime(local=local, utc=tick, note=_dst_note(trigger, previous, local)))
        previous = local
    return fires


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


# --- policies and misfire arithmetic ---------------------------------------------------


def check_misfire(word: str) -> str:
    """`word` if it is a misfire policy, else a ConfigurationError listing the valid ones."""
    if word not in MISFIRE_POLICIES:
        raise one_of(word, MISFIRE_POLICIES, "misfire policy")
    return word


def check_overlap(word: str) -> str:
    """`word` if it is an overlap policy, else a ConfigurationError listing the valid ones."""
    if word not in OVERLAP_POLICIES:
        raise one_of(word, OVERLAP_POLICIES, "overlap policy")
    return word


@dataclass(frozen=True)
class TickPlan:
    """What to do with a schedule's due ticks; all times are aware UTC.

    `skipped_more_exact` is False only when a cron schedule missed so many ticks that
    counting stopped (see plan_ticks): `skipped_more` is then a lower bound.
    """

    run: tuple[datetime, ...]
    skipped: tuple[tuple[datetime, str], ...]
    skipped_more: int
    next_run_at: datetime
    skipped_more_exact: bool = True


COUNT_BOUND_PER_LIMIT = 20


def plan_ticks(
    trigger: Trigger,
    next_run_at: datetime,
    now: datetime,
    *,
    misfire: str,
    grace: timedelta,
    limit: int = 1000,
) -> TickPlan:
    """Decide which due ticks of a schedule run, which are skipped, and the next fire time.

    Deterministic: every worker computes the same plan from the same inputs. The due ticks
    are `next_run_at` itself (a tick even when it is off the trigger's grid, as for
    run_immediately) and then the trigger's fire times up to and including `now`. A tick is
    missed when ``now - tick > grace``; exactly `grace` late is on time. On-time ticks run.
    Missed ticks:

    - "all": run, oldest first.
    - "skip": recorded as skipped ("missed by 2h 03m (misfire=skip, grace 60s)").
    - "coalesce": if an on-time tick runs, all are skipped; else the newest missed tick runs
      and the older ones are skipped as coalesced into it.

    Bounded work: at most `limit` ticks go in `run`; when more are due, `next_run_at` is the
    tick after the last one planned (it is then <= now, and the next call carries on). At
    most `limit` skipped ticks are listed (the oldest); the rest are counted in
    `skipped_more` without being built. For an IntervalTrigger that count is arithmetic and
    exact. For a cron trigger it is counted by iteration up to ``COUNT_BOUND_PER_LIMIT *
    limit`` further ticks; past that, counting stops, the plan jumps to the first tick at or
    after ``now - grace``, `skipped_more` is a lower bound and `skipped_more_exact` is False.
    Otherwise the returned `next_run_at` is after `now`.
    """
    first = _utc(next_run_at, "next_run_at")
    now = _utc(now, "now")
    policy = check_misfire(misfire)
    if not isinstance(grace, timedelta) or grace < timedelta(0):
        raise ConfigurationError(f"misfire grace must be a timedelta >= 0, got {grace!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    if first > now:
        return TickPlan(run=(), skipped=(), skipped_more=0, next_run_at=first)
    if policy == "all":
        run, following = _collect(trigger, first, now, limit)
        return TickPlan(run=tuple(run), skipped=(), skipped_more=0, next_run_at=following)
    missed = _scan_missed(trigger, first, now - grace, limit)
    run, following = _collect(trigger, missed.resume, now, limit)
    if policy == "skip":
        return _plan_skip(missed, run, following, now, grace)
    return _plan_coalesce(missed, run, following)


@dataclass
class _Missed:
    """The missed ticks of one plan: the oldest ones listed, the rest only counted."""

    listed: list[datetime]
    more: int  # missed ticks after `listed` (a lower bound when not exact)
    exact: bool
    newest: datetime | None  # the newest missed tick
    resume: datetime  # the first tick at or after the grace boundary


def _collect(trigger: Trigger, first: datetime, now: datetime, limit: int) -> tuple[list[datetime], datetime]:
    """Ticks from `first` up to `now` (at most `limit`) and the tick that follows them."""
    ticks = trigger.ticks_after(first)
    run: list[datetime] = []
    tick = first
    while tick <= now and len(run) < limit:
        run.append(tick)
        tick = next(ticks)
    return run, tick


def _scan_missed(trigger: Trigger, first: datetime, boundary: datetime, limit: int) -> _Missed:
    """The ticks from `first` that are before `boundary`, listing at most `limit`."""
    ticks = trigger.ticks_after(first)
    listed: list[datetime] = []
    tick = first
    while tick < boundary and len(listed) < limit:
        listed.append(tick)
        tick = next(ticks)
    if tick >= boundary:
        return _Missed(listed, 0, True, listed[-1] if listed else None, tick)
    if isinstance(trigger, IntervalTrigger):
        return _count_on_grid(trigger, listed, tick, boundary)
    return _count_by_walking(trigger, listed, ticks, tick, boundary, COUNT_BOUND_PER_LIMIT * limit)


def _count_on_grid(trigger: IntervalTrigger, listed: list[datetime], tick: datetime, boundary: datetime) -> _Missed:
    """Count the grid ticks from `tick` (on the grid, missed) to `boundary` arithmetically."""
    resume_index = trigger.index_at_or_after(boundary)
    more = resume_index - trigger.index_after(tick) + 1
    return _Missed(listed, more, True, trigger.tick(resume_index - 1), trigger.tick(resume_index))


def _count_by_walking(
    trigger: Trigger,
    listed: list[datetime],
    ticks: Iterator[datetime],
    tick: datetime,
    boundary: datetime,
    bound: int,
) -> _Missed:
    """Count missed ticks one by one up to `bound`, then jump to the boundary."""
    counted, last = 0, tick
    while tick < boundary and counted < bound:
        counted, last = counted + 1, tick
        tick = next(ticks)
    if tick >= boundary:
        return _Missed(listed, counted, True, last, tick)
    resume = trigger.next_after(boundary - _US)  # ticks are whole seconds: first >= boundary
    newest = _newest_before(trigger, boundary, tick)
    # `tick` is missed and uncounted; `newest` is another one unless it is `tick` itself.
    exact = newest == tick
    return _Missed(listed, counted + (1 if exact else 2), exact, newest, resume)


def _newest_before(trigger: Trigger, boundary: datetime, known: datetime) -> datetime:
    """The newest tick before `boundary`, given a tick `known` before it.

    Looks back over doubling windows (1 min, 2 min, 4 min...), never before `known`, so the
    work is logarithmic in the distance plus the ticks in the last window.
    """
    span = timedelta(minutes=1)
    while True:
        start = max(boundary - span, known)
        newest = None
        for tick in trigger.ticks_after(start - _US):
            if tick >= boundary:
                break
            newest = tick
        if newest is not None:
            return newest
        span *= 2


def _plan_skip(missed: _Missed, run: list[datetime], following: datetime, now: datetime, grace: timedelta) -> TickPlan:
    grace_text = _seconds_number(grace) + "s"
    skipped = tuple(
        (tick, f"missed by {_rough_duration(now - tick)} (misfire=skip, grace {grace_text})") for tick in missed.listed
    )
    return TickPlan(tuple(run), skipped, missed.more, following, missed.exact)


def _plan_coalesce(missed: _Missed, run: list[datetime], following: datetime) -> TickPlan:
    if run or missed.newest is None:
        reason = "coalesced (misfire=coalesce): a later tick runs"
        skipped = tuple((tick, reason) for tick in missed.listed)
        return TickPlan(tuple(run), skipped, missed.more, following, missed.exact)
    newest = missed.newest
    reason = f"coalesced into the run for {newest.isoformat()}"
    older = [tick for tick in missed.listed if tick != newest]
    more = missed.more - 1 if missed.more else 0
    skipped = tuple((tick, reason) for tick in older)
    return TickPlan((newest,), skipped, more, following, missed.exact)


# --- small formatting helpers ----------------------------------------------------------


def _hm(moment: datetime) -> str:
    return moment.strftime("%H:%M:%S" if moment.second else "%H:%M")


def _wall_list(walls: list[datetime]) -> str:
    if len(walls) == 1:
        return _hm(walls[0])
    if len(walls) <= 4:
        return ", ".join(_hm(w) for w in walls[:-1]) + f" and {_hm(walls[-1])}"
    return f"{_hm(walls[0])} to {_hm(walls[-1])} ({len(walls)} scheduled times)"


def _seconds_number(span: timedelta) -> str:
    """'60', '0.5', '-5': a timedelta in seconds without float noise."""
    micros = span // _US
    whole, frac = divmod(abs(micros), 1_000_000)
    sign = "-" if micros < 0 else ""
    return f"{sign}{whole}" + (f".{frac:06d}".rstrip("0") if frac else "")


def _exact_duration(span: timedelta) -> str:
    """'30s', '1h 30m', '1d', '0.25s': every non-zero unit, exactly."""
    days, rest = divmod(span // _US, 86_400_000_000)
    hours, rest = divmod(rest, 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    parts = [f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if n]
    if rest or not parts:
        parts.append(_seconds_number(timedelta(microseconds=rest)) + "s")
    return " ".join(parts)


def _rough_duration(span: timedelta) -> str:
    """'2h 03m', '3d 04h', '45s': the two largest units, for lateness in messages."""
    if span < timedelta(minutes=1):
        return _seconds_number(span) + "s"
    total = int(span.total_seconds())
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {seconds:02d}s"


def _utc(moment: datetime, name: str) -> datetime:
    """`moment` in UTC; a naive datetime is a programming error here."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got naive {moment!r}")
    return moment.astimezone(UTC)
