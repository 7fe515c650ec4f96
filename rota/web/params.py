"""Numeric query parameters, parsed once for every route: a value that is not a plain
integer in range is a 400 naming the parameter and what is valid, never a 500.

A plain integer is ASCII digits with at most one leading '-' (so `--5`, `+5`, `1_000`,
`5.0`, ` 5` and non-ASCII digits such as `١` are refused, not read by `int()`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..errors import ConfigurationError

_INTEGER = re.compile(r"-?[0-9]{1,20}")


def integer(params: Mapping[str, str], name: str, default: int | None, low: int, high: int) -> int | None:
    """`params[name]` as an integer from `low` to `high`, `default` when absent;
    ConfigurationError (a 400) naming the parameter, the value and the range otherwise."""
    raw = params.get(name)
    if raw is None:
        return default
    value = int(raw) if _INTEGER.fullmatch(raw) else None
    if value is None or not low <= value <= high:
        raise ConfigurationError(f"{name} must be an integer from {low} to {high}, got {raw!r}")
    return value
