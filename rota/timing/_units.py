"""Units and small helpers shared by the timing modules: the epoch, UTC checks, durations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rota.errors import ConfigurationError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_ZERO = timedelta(0)
# The range of times ticks are computed from: a walk looks back up to a day (a zone's offset,
# a repeated hour), and no tick lies past the end of year 9999 (datetime's range).
EARLIEST = datetime(1, 1, 3, tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)


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


def computable(moment: datetime, name: str) -> datetime:
    """`moment` (aware) in UTC, to compute ticks from: refused before EARLIEST with one line,
    LATEST if it is past the end of year 9999 in UTC (no tick is later)."""
    if moment.tzinfo is not None and moment.utcoffset() is not None and moment < EARLIEST:
        raise ConfigurationError(
            f"{name} {moment.isoformat()} is too close to year 1: ticks are computed from "
            f"{EARLIEST.isoformat()} to the end of year 9999"
        )
    try:
        return _utc(moment, name)
    except OverflowError:
        return LATEST
