"""Damaged flow-control rows (rota.quarantine): a limit's or a rate's stored size or window
out of what rota.Limit and rota.Rate can declare, and a task's stored spec
(rota.limit_specs) that does not decode.

What each does, fail closed and only for its own pool or task:
- a limit whose `max` is not 1 to rota.limits.MAX has no free slot: its runs wait (the flow
  claim's statements read such a size as no size, as a limit with no row);
- a rate whose `max` or `per` is out of range (per 0.001 s to a year; NaN, Infinity, 1e300)
  has no room and is never bumped or pruned: its runs wait;
- a start in a rate's log later than one window ahead of now (no claim logs one) is not
  counted, and goes at the next claim of its key;
- a task spec that does not decode keys no run: a run made where the task is not declared
  waits unresolved, for a worker that declares the task to key it from its code.
A worker's next start stores its declared limits, rates and specs again, which repairs the
rows of what it declares. `rota limits` and /api/limits list a damaged limit or rate with
`corrupt` naming the field; workers name each damaged row once in their log (row_damaged).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from .. import quarantine
from ..limit_specs import parse_spec, spec_reason
from ..limits import MAX

MAX_PER = 366 * 86400.0  # as rota.Rate checks per= (and the statements, in seconds: 31622400)
MIN_PER = 0.001


def limit_damage(max_: Any) -> tuple[str, ...]:
    """('max',) if a stored limit size is out of range, else ()."""
    return () if isinstance(max_, int) and 1 <= max_ <= MAX else ("max",)


def rate_damage(max_: Any, per: Any) -> tuple[str, ...]:
    """The damaged fields of a stored rate."""
    bad = limit_damage(max_)
    try:
        per_ok = MIN_PER <= float(per) <= MAX_PER  # NaN compares false
    except (TypeError, ValueError):
        per_ok = False
    return bad if per_ok else (*bad, "per")


def spec_damage(spec: Any) -> str | None:
    """Why a stored task spec cannot be used (None if it can): rota.limit_specs.parse_spec."""
    try:
        parse_spec(spec)
    except ValueError as exc:
        return str(exc)
    return None


def _shown(value: Any) -> str:
    return repr(value) if not isinstance(value, float) or math.isfinite(value) else str(value)


def report_damaged(rows: Iterable[Sequence[Any]], *, report: bool = True) -> list[tuple[str, str, str]]:
    """From flow_damaged's rows (kind, name, max, per, spec): the damaged ones, each named
    once in the log if `report`."""
    found: list[tuple[str, str, str]] = []
    for kind, name, max_, per, spec in rows:
        if kind == "l" and limit_damage(max_):
            what, reason = quarantine.LIMIT, f"its stored max {_shown(max_)} is not 1 to {MAX}: its runs wait"
        elif kind == "r" and (fields := rate_damage(max_, per)):
            stored = ", ".join(f"{f} {_shown(max_ if f == 'max' else per)}" for f in fields)
            what, reason = quarantine.RATE, f"its stored {stored} out of range: its runs wait"
        elif kind == "s" and (why := spec_damage(spec)) is not None:
            what, reason = quarantine.TASK_SPEC, spec_reason(why)
        else:
            continue
        if report:
            quarantine.report(what, name, reason)
        found.append((what, str(name), reason))
    return found


def damaged_specs(store: Any) -> list[dict[str, str]]:
    """The task specs `store` holds that are damaged, as `rota limits --json` lists them."""
    return [
        {"task": name, "reason": why}
        for kind, name, why in store.damaged_flow(report=False)
        if kind == quarantine.TASK_SPEC
    ]
