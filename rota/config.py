"""Settings: one table of every App, worker and dashboard setting and its ROTA_* variable.

Precedence is argument > flag > variable > default: a value passed in code (`App(...)`)
wins, then a `rota` command-line flag, then the environment, then the default below.
`App.__init__` resolves the arguments it was not given through `value()`; the `rota`
commands render `help_line()` into their --help and the README table comes from
`markdown_table()`. A bad variable stops the start with one line naming the variable, the
value and what is valid: `check_environment()` parses every variable that is set when a
worker or the dashboard starts, also those whose setting was given in code or by a flag.

Also here: `redact_url()` and `redact_text()`, which take passwords out of URLs (userinfo
and `?password=`) and out of any text that echoes one (driver messages), for every place
that shows a database or locks URL.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .errors import ConfigurationError
from .redaction import redact_text as redact_text
from .redaction import redact_url as redact_url
from .redaction import remember_secrets as remember_secrets

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("text", "json")
FINAL = ("succeeded", "failed", "cancelled", "skipped")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_QUEUE = re.compile(r"\A[A-Za-z0-9_.:-]{1,100}\Z")  # \Z: "$" would pass "q\n"


class _Invalid(ValueError):
    """A parser's complaint: what is valid (the caller adds variable name and value)."""


def _int(low: int, high: int | None = None) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            raise _Invalid(f"a whole number from {low}" + (f" to {high}" if high is not None else ""))
        return value

    return parse


# Lower bounds of the worker's timings: a smaller poll interval or lease only spins the
# worker and the database at full CPU (a heartbeat comes every third of the lease).
MIN_POLL_INTERVAL = 0.01
MIN_LEASE = 0.5
MIN_HEARTBEAT = 0.01
MAX_SECONDS = 86400 * 365


def check_seconds(name: str, value: Any, low: float) -> float:
    """`value` (an argument in code) as a number of seconds from `low` to a year, else a
    ConfigurationError naming it and the bounds."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= MAX_SECONDS:
        raise ConfigurationError(
            f"{name} must be a number of seconds from {low:g} to a year ({MAX_SECONDS:.0f}), got {value!r}"
        )
    return float(value)


def _seconds(low: float, *, inclusive: bool = False) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            value = math.nan
        ok = math.isfinite(value) and (value >= low if inclusive else value > low) and value <= MAX_SECONDS
        if not ok:
            floor = f">= {low:g}" if inclusive else f"> {low:g}"
            raise _Invalid(f"a number of seconds {floor} and at most one year")
        return value

    return parse


def _switch(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise _Invalid("1 or 0 (true/false, yes/no, on/off)")


def parse_duration(raw: str) -> timedelta:
    """`90`, `90s`, `15m`, `12h`, `7d` (a plain number is seconds)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", raw)
    if not match or float(match[1]) <= 0:
        raise _Invalid("a positive duration such as 90s, 15m, 12h or 7d")
    seconds = float(match[1]) * _UNITS[match[2] or "s"]
    if seconds > 86400 * 36500:
        raise _Invalid("a positive duration of at most 36500d")
    return timedelta(seconds=seconds)


def _retention(raw: str) -> dict[str, timedelta]:
    valid = "'none' or status=duration pairs such as succeeded=7d,failed=30d (statuses: " + ", ".join(FINAL) + ")"
    if raw.strip().lower() in ("none", "off", "keep"):
        return {}
    result = {}
    for item in raw.split(","):
        status, eq, keep = item.partition("=")
        status = status.strip()
        if not eq or status not in FINAL:
            raise _Invalid(valid)
        try:
            result[status] = parse_duration(keep)
        except _Invalid:
            raise _Invalid(valid) from None
    return result


def _queues(raw: str) -> list[str] | None:
    names = [q.strip(" ") for q in raw.split(",") if q.strip(" ")]  # "q\n" stays invalid
    if not names or not all(_QUEUE.match(q) for q in names):
        raise _Invalid("comma-separated queue names of 1-100 letters, digits, '_', '-', '.' or ':'")
    return names


def _choice(options: tuple[str, ...]) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in options:
            raise _Invalid("one of " + ", ".join(options))
        return value

    return parse


def _url(example: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if "://" not in raw:
            raise _Invalid(f"a URL such as {example}")
        return raw.strip()

    return parse


def _hosts(raw: str) -> list[str]:
    names = [h.strip() for h in raw.split(",") if h.strip()]
    if not names or any(c in h for h in names for c in "/ @\x00"):
        raise _Invalid("comma-separated host names such as rota.example.com,localhost (or * for any)")
    return names


def _peers(raw: str) -> list[str]:
    """Addresses or networks of proxies whose X-Forwarded-For/-Proto are believed, or *."""
    names = [p.strip() for p in raw.split(",") if p.strip()]
    try:
        if not names:
            raise ValueError(raw)
        return [_peer(name) for name in names]
    except ValueError:
        raise _Invalid(
            "comma-separated proxy IP addresses or networks such as 127.0.0.1,10.0.0.0/8 (or * for any)"
        ) from None


def _peer(name: str) -> str:
    if name == "*":
        return name
    if "/" in name:
        return str(ipaddress.ip_network(name, strict=False))
    return str(ipaddress.ip_address(name))


def _text(raw: str) -> str:
    if not raw.strip():
        raise _Invalid("a non-empty string")
    return raw.strip()


@dataclass(frozen=True)
class Setting:
    name: str
    env: str
    parse: Callable[[str], Any]
    default: Any
    help: str
    shown_default: str
    secret: bool = False


def _s(name: str, parse: Callable[[str], Any], default: Any, help: str, shown: str, secret: bool = False) -> Setting:
    return Setting(name, "ROTA_" + name.upper(), parse, default, help, shown, secret)


DEFAULT_RETENTION = {
    "succeeded": timedelta(days=7),
    "skipped": timedelta(days=7),
    "cancelled": timedelta(days=30),
    "failed": timedelta(days=30),
}

SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        _s("database_url", _url("sqlite:///rota.db"), "sqlite:///rota.db", "Database URL", "sqlite:///rota.db"),
        _s("locks_url", _url("redis://host:6379/0"), None, "Redis URL for named locks", "the run store"),
        _s("concurrency", _int(1, 10000), 5, "Runs a worker executes at a time", "5"),
        _s("queues", _queues, None, "Queues a worker serves (comma-separated)", "all"),
        _s(
            "lease",
            _seconds(MIN_LEASE, inclusive=True),
            30.0,
            "Lease seconds, at least 0.5 (heartbeat every third)",
            "30",
        ),
        _s(
            "poll_interval",
            _seconds(MIN_POLL_INTERVAL, inclusive=True),
            1.0,
            "Seconds between polls, at least 0.01",
            "1",
        ),
        _s("shutdown_timeout", _seconds(0, inclusive=True), 30.0, "Seconds to drain on SIGTERM", "30"),
        _s(
            "default_timeout",
            _seconds(0, inclusive=True),
            3600.0,
            "Timeout in seconds of a run whose task sets no timeout= (0: none)",
            "3600",
        ),
        _s(
            "retention",
            _retention,
            DEFAULT_RETENTION,
            "History kept per final status: none, or e.g. succeeded=7d,failed=30d",
            "succeeded=7d,skipped=7d,cancelled=30d,failed=30d",
        ),
        _s("prune_interval", _seconds(0), 300.0, "Seconds between pruning passes", "300"),
        _s(
            "high_frequency",
            _seconds(0, inclusive=True),
            60.0,
            "Warn about schedules firing more often than every this many seconds (0: off)",
            "60",
        ),
        _s("pool_size", _int(1, 1000), None, "PostgreSQL connections per process (PostgreSQL only)", "10"),
        _s(
            "pooler",
            _choice(("none", "transaction")),
            None,
            "PostgreSQL through a pooler: transaction (PgBouncer pool_mode=transaction), or none",
            "none",
        ),
        _s(
            "listen_url",
            _url("postgresql://rota@db:5432/rota"),
            None,
            "Direct PostgreSQL URL for LISTEN wake-ups when database_url goes through a transaction pooler",
            "database_url",
        ),
        _s(
            "prefetch",
            _int(0, 100000),
            None,
            "Runs a worker may claim ahead of its free slots in a backlog of short runs (0: off)",
            "concurrency, at least 200",
        ),
        _s("metrics_port", _int(1, 65535), None, "Serve the worker's Prometheus /metrics on this port", "off"),
        _s("log_level", _choice(LOG_LEVELS), "info", "Log level: " + ", ".join(LOG_LEVELS), "info"),
        _s("log_format", _choice(LOG_FORMATS), "text", "Log format: text, or json (one object per line)", "text"),
        _s(
            "log_every_run",
            _switch,
            False,
            "Log every run's success (else the first 20 a second, then one summary line)",
            "0",
        ),
        _s("dashboard_host", _text, "127.0.0.1", "Address the dashboard binds", "127.0.0.1"),
        _s("dashboard_port", _int(1, 65535), 8000, "Port the dashboard listens on", "8000"),
        _s("dashboard_token", _text, None, "Bearer token the dashboard requires", "none", secret=True),
        _s(
            "dashboard_forwarded_allow_ips",
            _peers,
            None,
            "Proxies whose X-Forwarded-For/-Proto the dashboard believes (comma-separated IPs or networks)",
            "none: the peer's own address",
        ),
        _s(
            "dashboard_allowed_hosts",
            _hosts,
            None,
            "Host names the dashboard answers (comma-separated; * for any, with a token)",
            "loopback names without a token, any with one",
        ),
    )
}


def value(name: str, argument: Any = None, environ: Mapping[str, str] | None = None) -> Any:
    """`argument` if given, else the parsed ROTA_* variable, else the default."""
    if argument is not None:
        return argument
    return from_env(name, environ)


def from_env(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The setting's variable parsed (ConfigurationError, one line, if invalid), else its default."""
    setting = SETTINGS[name]
    raw = (os.environ if environ is None else environ).get(setting.env)
    if raw is None or raw == "":
        return setting.default
    try:
        return setting.parse(raw)
    except _Invalid as exc:
        shown = "***" if setting.secret else redact_url(raw)
        raise ConfigurationError(f"{setting.env}={shown!r} is not valid: expected {exc}") from None


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Parse every ROTA_* variable that is set: ConfigurationError (one line naming the first
    bad one) even when code or a flag gives that setting, so a typo never hides until the day
    the argument is removed. A worker's start calls this (a bad variable stops the start)."""
    for name in SETTINGS:
        from_env(name, environ)


def source(name: str, argument: Any = None, environ: Mapping[str, str] | None = None) -> str:
    """Where the value comes from: argument, environment or default."""
    if argument is not None:
        return "argument"
    raw = (os.environ if environ is None else environ).get(SETTINGS[name].env)
    return "environment" if raw else "default"


def help_line(name: str) -> str:
    """The help text of a setting for a CLI flag: help, variable and default."""
    s = SETTINGS[name]
    return f"{s.help} [env {s.env}; default {s.shown_default}]"


def epilog() -> str:
    """Every variable, one a line, for `rota worker --help` (\b keeps click from rewrapping)."""
    lines = [f"  {s.env:<22} {s.help} (default {s.shown_default})" for s in SETTINGS.values()]
    return "\b\nEnvironment (argument in code > flag > variable > default):\n" + "\n".join(lines)


def markdown_table() -> str:
    rows = ["| Variable | Setting | Default |", "|---|---|---|"]
    rows += [f"| `{s.env}` | {s.help} | `{s.shown_default}` |" for s in SETTINGS.values()]
    return "\n".join(rows)


# -- redaction: rota.redaction (re-exported here) ------------------------------------------


def resolve(**arguments: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Each named setting's value (argument, else variable, else default) and its source."""
    values = {name: value(name, arg) for name, arg in arguments.items()}
    return values, {name: source(name, arg) for name, arg in arguments.items()}
