"""Undeclared limits and rates: a pending run whose limit or rate name no stored limit or rate
defines (see docs/concepts/flow-control.md, "A limit or rate no worker declared").

Limits and rates are stored by the workers that declare them (rota.limit_specs.sync), so a run
can name one that no worker declared: a typo in a client's `Limit(name=...)`, a client that
enqueues before the first worker that declares the pool started, or a row deleted by hand. No
claim takes such a run (the flow claim finds no room for a pool it has no row of), and it is
never run unlimited: a worker that declares the pool later stores it, and the run then takes
its slot. Enqueueing it is therefore not refused. What this module adds is that the wait is
never silent:

- `Run.waiting` (App.get_run, `rota run ID`, GET /api/runs/{id}, the run's page) says
  `{"kind": "undeclared", "limit": name}` (or `"rate"`), read off the operator's read path
  (`undeclared_of`, one statement for a pending run with a limit or a rate);
- `rota limits` and GET /api/limits list each such name with its waiting runs;
- a worker's check for damaged flow rows (about once a minute, not on the claim's path) logs
  one line per name (`warn`): again only after REMIND_SECONDS while the name stays undeclared.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, Final

from .errors import did_you_mean
from .logs import log_event

log = logging.getLogger("rota.flow")

EVENT: Final = "flow_undeclared"
# A name still undeclared is logged again at most this often per process.
REMIND_SECONDS: Final = 3600.0
LIMIT: Final = "limit"
RATE: Final = "rate"

_logged: dict[tuple[str, str], float] = {}
_lock = threading.Lock()


def forget() -> None:
    """Log every name afresh (tests)."""
    with _lock:
        _logged.clear()


def example(kind: str, name: str) -> str:
    """How to declare the pool `name` on a task."""
    if kind == LIMIT:
        return f"@app.task(limit=rota.Limit(N, name={name!r}))"
    return f"@app.task(rate=rota.Rate(N, per=..., name={name!r}))"


def describe(kind: str, name: str, waiting: int, declared: Iterable[str]) -> str:
    """One line: how many runs wait for the undeclared pool, a close declared name, the fix."""
    return (
        f"{waiting} run(s) wait for {kind} {name!r}, which is not declared{did_you_mean(name, declared)}: "
        f"no worker stored it, so they do not start. Declare it on a task a worker runs, e.g. "
        f"{example(kind, name)} (the worker stores it when it starts), or cancel the runs"
    )


def due(found: Sequence[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """The entries of `found` (kind, name, waiting) to log now: a name not logged by this
    process in the last REMIND_SECONDS. Marks them logged."""
    now, out = time.monotonic(), []
    with _lock:
        for kind, name, waiting in found:
            last = _logged.get((kind, name))
            if last is None or now - last >= REMIND_SECONDS:
                _logged[(kind, name)] = now
                out.append((kind, name, waiting))
    return out


def warn(entries: Sequence[tuple[str, str, int]], declared: dict[str, list[str]]) -> None:
    """Log one warning (event flow_undeclared) per entry; `declared`: the stored names by kind."""
    for kind, name, waiting in entries:
        message = describe(kind, name, waiting, declared.get(kind, []))
        log_event(log, logging.WARNING, EVENT, message, kind=kind, name=name, waiting=waiting)


def to_json(found: Sequence[tuple[str, str, int]]) -> dict[str, list[dict[str, Any]]]:
    """The `unknown_limits` and `unknown_rates` of `rota limits --json` and GET /api/limits."""
    return {
        f"unknown_{kind}s": [{"name": name, "waiting": waiting} for k, name, waiting in found if k == kind]
        for kind in (LIMIT, RATE)
    }


def waiting_of(store: Any, run_id: int) -> dict[str, Any] | None:
    """Run.waiting for a pending run whose limit or rate is undeclared; None otherwise (or a
    store without flow control)."""
    undeclared_of = getattr(store, "undeclared_of", None)
    got = undeclared_of(run_id) if undeclared_of is not None else None
    if got is None or (got[0] is None and got[1] is None):
        return None
    wait: dict[str, Any] = {"kind": "undeclared"}
    if got[0] is not None:
        wait[LIMIT] = got[0]
    if got[1] is not None:
        wait[RATE] = got[1]
    wait["until"] = None
    return wait
