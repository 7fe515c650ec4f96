"""Time zones by IANA name, with a did-you-mean hint for a wrong one."""

from __future__ import annotations

import functools
import zoneinfo
from zoneinfo import ZoneInfo

from rota.errors import ConfigurationError, did_you_mean


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
