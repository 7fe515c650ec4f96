"""Cron expressions: aliases, field checks, and whether an expression can ever fire."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from rota.errors import ConfigurationError, did_you_mean

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
