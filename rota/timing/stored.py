"""The values a stored schedule must hold to be planned, checked where a row is decoded.

A schedule row written by hand, by an older release or by a bad migration can hold an `every`
of NaN, Infinity or 1e300, a negative `misfire_grace`, a `jitter` that is text: no release
writes these (`add_schedule` and `update_schedule` refuse them, naming the bound), and
planning them raises. `damage()` names each such field with one line; the ticker sets the
schedule aside (rota.quarantine) and the listings show the fields as `corrupt`. The same
text comes from every decoder, so a row is named once per process, not once per decoder.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Final

from .misfire import MISFIRE_POLICIES, OVERLAP_POLICIES

# The longest `every=` and `misfire_grace` (ten years): a grace past the range of dates
# would make "now - grace" fail, and a longer interval is a cron schedule's job.
MAX_EVERY: Final = timedelta(days=3650)
MAX_GRACE: Final = timedelta(days=3650)
MAX_JITTER: Final = 366 * 86400.0  # rota.timing.jitter refuses more: a year at most
_PRIORITY: Final = 1_000_000


def is_seconds(value: object, low: float, high: float, *, above: bool = False) -> bool:
    """A finite real number (not a bool) in [low, high], or (low, high] with `above`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return (low < value if above else low <= value) and value <= high


def _json(value: object, kind: type) -> bool:
    if value == ("[]" if kind is list else "{}"):  # the usual arguments, without a parse
        return True
    if not isinstance(value, str):
        return False
    try:
        return isinstance(json.loads(value), kind)
    except (ValueError, RecursionError):
        return False


def _integer(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


# field -> (is the stored value usable, what a usable one is)
_CHECKS: Final[dict[str, tuple[Callable[[Any], bool], str]]] = {
    "every": (
        lambda v: v is None or is_seconds(v, 0, MAX_EVERY.total_seconds(), above=True),
        f"a number of seconds above 0 and at most {MAX_EVERY.total_seconds():.0f}",
    ),
    "misfire_grace": (
        lambda v: is_seconds(v, 0, MAX_GRACE.total_seconds()),
        f"a number of seconds from 0 to {MAX_GRACE.total_seconds():.0f}",
    ),
    "jitter": (lambda v: v is None or is_seconds(v, 0, MAX_JITTER), f"a number of seconds from 0 to {MAX_JITTER:.0f}"),
    "timeout": (lambda v: v is None or is_seconds(v, 0, math.inf, above=True), "a positive number of seconds"),
    "priority": (lambda v: _integer(v, -_PRIORITY, _PRIORITY), f"an integer from {-_PRIORITY} to {_PRIORITY}"),
    "max_attempts": (lambda v: _integer(v, 1, 2**31 - 1), "an integer of at least 1"),
    "overlap": (lambda v: v in OVERLAP_POLICIES, f"one of {', '.join(OVERLAP_POLICIES)}"),
    "misfire": (lambda v: v in MISFIRE_POLICIES, f"one of {', '.join(MISFIRE_POLICIES)}"),
    "args": (lambda v: _json(v, list), "a JSON list"),
    "kwargs": (lambda v: _json(v, dict), "a JSON object"),
}
FIELDS: Final = tuple(_CHECKS)


def damage(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, reason) for each stored value in `values` (by column name) that cannot be
    planned or copied into a run, in a fixed order; empty for a sound row."""
    found = []
    for field, (usable, valid) in _CHECKS.items():
        if field in values and not usable(values[field]):
            found.append((field, f"{field}={_shown(values[field])} is not {valid}"))
    return found


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def reason(found: list[tuple[str, str]]) -> str | None:
    """The one line that names every damaged field (None if there is none)."""
    return "; ".join(why for _, why in found) or None


NEXT_RUN_AT: Final = ("next_run_at", "next_run_at is not a valid time (out of range or not a time)")
