"""Inserting one run as (query, params) steps (see `steps.py`): dedup keys, uniqueness windows
(`unique_for`, the rota_unique upsert) and dependencies (`after`, rota_deps), written once
for the store's sessions, a caller's connection and an async connection (migration 0008)."""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Sequence
from dataclasses import replace
from typing import Any

from ... import quarantine
from ...errors import ConfigurationError
from ...limit_specs import UNRESOLVED, spec_reason, stamp_spec
from ...models import PENDING, RUNNING, SUCCEEDED
from ...serialization import simple_error
from ..base import NewRun

Row = tuple[Any, ...]
Steps = Generator[tuple[str, dict[str, Any]], list[Row], Any]
Params = Callable[[NewRun], dict[str, Any]]
# The longest chain of waiting runs (links): a failure cancels the rest of a chain through
# nested trigger calls, which both databases limit (SQLite to 1,000 levels).
MAX_CHAIN = 250


def gate_steps(stamp: Callable[[NewRun], None] | None, runs: Sequence[NewRun]) -> Steps:
    """Key the new runs whose limit and rate this process does not know (its code does not
    declare their task): from the code's declaration if `stamp` (the store's, set by a
    worker) knows the task, else from the stored spec (rota.limit_specs), one lookup per task."""
    specs: dict[str, str | None] = {}
    for r in runs:
        if r.flow_known or r.status != PENDING or r.limit_name is not None or r.rate_name is not None:
            continue
        if stamp is not None:
            stamp(r)
            if r.flow_known:
                continue
        if r.task not in specs:
            rows = yield "flow_spec", {"task": r.task}
            specs[r.task] = str(rows[0][0]) if rows else None
        spec = specs[r.task]
        r.flow_known = True
        if spec is not None:
            try:
                stamp_spec(r, spec)
            except ValueError as exc:
                damaged_spec(r, str(exc))
    return []


def damaged_spec(r: NewRun, reason: str) -> None:
    """A task's stored spec (rota_task_flow) that does not decode (rota.quarantine), named once:
    the run waits unresolved, as one whose keys only a worker declaring the task can compute
    (it never runs unlimited, and the enqueue, trigger or retry is never lost to another's
    damaged row); that worker rewrites the spec when it starts, and keys the run."""
    quarantine.report(quarantine.TASK_SPEC, r.task, spec_reason(reason))
    r.limit_name, r.limit_key, r.rate_name, r.rate_key = UNRESOLVED, "", None, None


def insert_one(params: Params, r: NewRun) -> Steps:
    """(run id, created) for one run. With a key and `unique_for`, the key's row in
    rota_unique is taken first (its row lock serializes concurrent enqueues of the key): a
    run it names, created within the window and not cancelled, is returned. With `after`,
    the parents are locked and checked first; the run is inserted held (waiting), or
    cancelled if a parent already ended other than succeeded, and its edges recorded."""
    if r.key is not None and r.unique_for is not None:
        rows = yield "unique_take", {"task": r.task, "key": r.key, "window": r.unique_for}
        if rows and rows[0][0] is not None:
            return int(rows[0][0]), False
    waiting = depth = 0
    if r.after:
        r, waiting, depth = yield from _check_parents(r)
    run_id, created = yield from _insert_keyed(params, r)
    if r.key is not None and r.unique_for is not None:
        yield "unique_put", {"task": r.task, "key": r.key, "id": run_id, "twin": not created}
    if created and r.after:
        yield "add_deps", {"ids": json.dumps(sorted(set(r.after))), "child": run_id}
        yield "depend_run", {"id": run_id, "waiting": waiting, "depth": depth}
    return run_id, created


def _check_parents(r: NewRun) -> Steps:
    ids = sorted(set(r.after))
    rows = yield "lock_parents", {"ids": json.dumps(ids)}
    if len(rows) < len(ids):  # a parent that moved to the history meanwhile (PostgreSQL): look again
        again = yield "lock_parents", {"ids": json.dumps(sorted(set(ids) - {int(row[0]) for row in rows}))}
        rows = [*rows, *again]
    found = {int(row[0]): (str(row[1]), str(row[2])) for row in rows}
    depths = {int(row[0]): int(row[3]) for row in rows}
    missing = [i for i in ids if i not in found]
    if missing:
        shown = ", ".join(str(i) for i in missing[:10]) + (" ..." if len(missing) > 10 else "")
        raise ConfigurationError(
            f"after= names {len(missing)} run id(s) that do not exist: {shown}; pass handles or ids of enqueued runs"
        )
    waiting = [i for i in ids if found[i][0] in (PENDING, RUNNING)]
    ended = [i for i in ids if found[i][0] not in (PENDING, RUNNING, SUCCEEDED)]
    if ended:
        status, task = found[ended[0]]
        error = simple_error("DependencyFailed", f"parent run {ended[0]} ({task}) ended {status}")
        return replace(r, status="cancelled", held=False, error=error), 0, 0
    depth = 1 + max((depths[i] for i in waiting), default=-1)
    if depth > MAX_CHAIN:
        raise ConfigurationError(
            f"after= would make a chain of {depth + 1} runs each waiting for the previous; at most "
            f"{MAX_CHAIN + 1} (a failure cancels the rest of a chain in one transaction): "
            "enqueue later steps once earlier ones succeeded"
        )
    return replace(r, held=bool(waiting)), len(waiting), depth


def _insert_keyed(params: Params, r: NewRun) -> Steps:
    """A keyed run whose task has a pending or running twin is not inserted: the twin's id
    comes back with created=False. If the twin finishes between our conflicting insert and
    the lookup, insert again (each statement sees fresh data under READ COMMITTED; under
    SQLite's write lock it cannot happen)."""
    for _ in range(5):
        gated = r.limit_name is not None or r.rate_name is not None  # rota.Limit / rota.Rate
        rows = yield ("insert_run_gated" if gated else "insert_run"), params(r)
        if rows:
            return int(rows[0][0]), True
        if r.key is None:
            raise ConfigurationError(f"run of {r.task} conflicts with an existing run")  # pragma: no cover
        existing = yield "find_keyed", {"task": r.task, "key": r.key}
        if existing:
            return int(existing[0][0]), False
    raise ConfigurationError(  # pragma: no cover - needs a twin finishing five times in a row
        f"could not insert run of {r.task} with key {r.key!r}: its twins kept finishing"
    )
