"""Checking the flow-control options of `task.options(...)`: `unique_for` (a uniqueness
window for a key) and `after` (runs that must succeed first). See
docs/how-to/unique-and-dependencies.md."""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from .errors import ConfigurationError, shown

# A window past ten years is a typo (and must stay an interval every store can add).
MAX_UNIQUE_FOR = 3650 * 86400.0
MAX_PARENTS = 10_000


def check_unique_for(value: object, key: str | None) -> float | None:
    """The window in seconds; ConfigurationError for anything but a positive duration."""
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if (
        not isinstance(seconds, (int, float))
        or isinstance(seconds, bool)
        or not math.isfinite(seconds)
        or not 0 < seconds <= MAX_UNIQUE_FOR
    ):
        raise ConfigurationError(
            f"unique_for must be a positive number of seconds or a timedelta (at most 3650 days), got {value!r:.80}"
        )
    if key is None:
        raise ConfigurationError("unique_for needs a key: .options(key='sync:42', unique_for=timedelta(minutes=10))")
    return float(seconds)


def parent_ids(after: object) -> tuple[int, ...]:
    """Run ids from RunHandles, id strings or ints (one, or an iterable of them)."""
    if after is None:
        return ()
    items: Iterable[Any] = [after] if isinstance(after, (str, int)) or hasattr(after, "id") else _iterable(after)
    ids = [_parent_id(item) for item in items]
    if len(set(ids)) > MAX_PARENTS:
        raise ConfigurationError(f"after= names {len(set(ids))} runs; at most {MAX_PARENTS} parents per run")
    return tuple(dict.fromkeys(ids))


MAX_RUN_ID = 2**63 - 1  # a bigint: a larger id is no run on any store


def _parent_id(item: object) -> int:
    """One parent's id: an int, or a string of ASCII digits ('١٢٣' and '１２３' are decimal
    to Python, not to the stores), from 1 to MAX_RUN_ID (PostgreSQL refused a larger one
    with a database error)."""
    raw = getattr(item, "id", item)
    value = -1
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) <= 19:
        value = int(raw)
    if not 1 <= value <= MAX_RUN_ID:
        raise ConfigurationError(
            f"after= takes run handles or run ids (e.g. after=[a, b] or after=['12', '13']: "
            f"ids from 1 to {MAX_RUN_ID} in ASCII digits), got {shown(item):.80}"
        )
    return value


def _iterable(after: object) -> Iterable[Any]:
    if isinstance(after, (list, tuple, set, frozenset)):
        return after
    raise ConfigurationError(f"after= takes a list of run handles or run ids (e.g. after=[a, b]), got {after!r:.80}")
