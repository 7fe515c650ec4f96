"""The soak's invariants on damaged rows (tools/soak/damage.py): each is set aside as
rota.quarantine promises, and none stops other work or a listing."""

from __future__ import annotations

from typing import Any

from .checks import Facts, Violation

DAMAGED = "DamagedRow"


def damage(f: Facts) -> list[Violation]:
    return _runs(f) + _schedules(f) + _held(f) + _listings(f)


def _runs(f: Facts) -> list[Violation]:
    found = []
    for run_id, what in f.ledger.damaged_runs.items():
        run = f.runs.get(run_id)
        error = ((run.error or {}).get("type") if run else None) or "-"
        if run is None or run.status != "failed" or error != DAMAGED:
            status = run.status if run else "missing"
            found.append(Violation("quarantine", f"damaged run {run_id} ({what}) ended {status} ({error}), not failed "
                                   f"{DAMAGED}", [run_id]))  # fmt: skip
    return found


def _schedules(f: Facts) -> list[Violation]:
    if isinstance(f.schedules, str):
        return [Violation("quarantine", f"listing the schedules fails: {f.schedules}", [])]
    info = {s.name: s for s in f.schedules}
    found = []
    for name, what in f.ledger.damaged_schedules.items():
        s = info.get(name)
        if s is None or not (getattr(s, "corrupt", ()) or getattr(s, "plan_error", None)):
            found.append(Violation("quarantine", f"damaged schedule {name} ({what}) is not listed as damaged", []))
    return found


def _held(f: Facts) -> list[Violation]:
    """A run of a damaged limit or rate waits (fail closed), never fails; a worker started after
    the damage stores the declared limit and rate again, and then it runs."""
    repaired = f.ledger.damaged_mono is not None and any(t > f.ledger.damaged_mono for t in f.ledger.starts)
    found = []
    for run_id in f.ledger.held_runs:
        run = f.runs.get(run_id)
        status = run.status if run else "missing"
        if status not in ("pending", "succeeded") or (status == "pending" and repaired):
            why = " though a worker started after the damage (its start stores the declared limits)" if repaired else ""
            found.append(Violation("quarantine", f"run {run_id} of a damaged limit or rate ended {status}{why}",
                                   [run_id]))  # fmt: skip
    return found


def _listings(f: Facts) -> list[Violation]:
    """Every listing answers; a damaged registry row still there is listed with `corrupt`; the
    damaged spec of a task no worker declares stays named as damaged."""
    found = []
    for name, rows in f.listings.items():
        if isinstance(rows, str):
            found.append(Violation("quarantine", f"listing the {name} fails: {rows}", []))
    for kind, listing, key in (("worker", "workers", "id"), ("lock", "locks", "name")):
        listed = f.listings.get(listing)
        if not isinstance(listed, list):
            continue
        shown: dict[str, Any] = {getattr(r, key): r for r in listed}
        for row in f.ledger.damaged_rows:
            what, _, name = row.partition(" ")
            if what == kind and name in shown and not shown[name].corrupt:
                found.append(Violation("quarantine", f"damaged {kind} row {name} is listed without `corrupt`", []))
    specs = f.listings.get("damaged flow rows")
    if isinstance(specs, list):
        named = {f"task spec {name}" for kind, name, _ in specs if kind == "task spec"}
        for row in f.ledger.damaged_rows:
            if row.startswith("task spec ") and row not in named:
                found.append(Violation("quarantine", f"the damaged {row} is not named as damaged", []))
    return found
