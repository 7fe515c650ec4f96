"""The damaged rows the "damage" fault writes straight into the tables, once, as an older
release, a manual edit or a bad migration would leave them: one of each kind rota.quarantine
sets aside (tests/test_damaged_rows.py has the full catalogue; here one or two of each):

- runs (each due two seconds later, long enough for heartbeats): an attempt at its column's
  maximum, a NaN timeout (PostgreSQL; SQLite's STRICT REAL holds no NaN), args and kwargs that
  are not JSON: each must end failed DamagedRow;
- schedules: `every` NaN (SQLite: infinite), a jitter that does not decode (1e300 s), a negative
  misfire grace, an overlap policy no release writes, args that are not JSON: each must be
  listed as damaged while the others keep ticking;
- a task's stored limit and rate spec that does not decode (of a task no worker declares);
- worker and lock registry rows with times, JSON and numbers that cannot be read: listed with
  `corrupt` naming them, never stopping a worker or a listing;
- the stored size of soak.capped's limit and the window of soak.paced's rate out of range:
  their runs wait (fail closed) until a worker's start stores the declared ones again.

Each damage is written on its own (one that fails to write is a client-call finding)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import rota

if TYPE_CHECKING:
    from .workload import Ledger

RUNS = ("attempt", "timeout", "args", "kwargs")
SCHEDULES = ("every", "jitter", "grace", "overlap", "schedule_args")
OTHERS = ("spec", "worker", "lock", "limit", "rate")
DAMAGE = RUNS + SCHEDULES + OTHERS
UNDECLARED = "soak.undeclared"  # the task whose stored spec is damaged (no worker declares it)
WORKERS = ("d-worker-started", "d-worker-queues", "d-worker-lease")
LOCKS = ("d-lock-token", "d-lock-expires")


def _pg(app: rota.App) -> bool:
    return bool(app.store.dialect == "postgresql")


def _sql(app: rota.App, text: str, **params: Any) -> None:
    """Run `text` with `{name}` standing for each parameter's placeholder."""
    store: Any = app.store
    with store._tx() as s:
        s.q_text(text.format(**{name: store._p(name) for name in params}), **params)


def _now(app: rota.App) -> str:
    return "now()" if _pg(app) else "CAST((julianday('now') - 2440587.5) * 86400 AS INTEGER)"


def write_damage(app: rota.App, ledger: Ledger, damage: tuple[str, ...]) -> None:
    pg = _pg(app)
    top = 2**31 - 1 if pg else 2**63 - 1
    nan = "'NaN'" if pg else "9e999"  # SQLite: an infinite one
    runs = {
        "attempt": ("attempt at its column's maximum", f"attempt = {top}, max_attempts = {top}"),
        "timeout": ("a NaN timeout", "timeout = 'NaN'"),
        "args": ("args that are not JSON", "args = '[1,'"),
        "kwargs": ("kwargs that are not JSON", "kwargs = '{'"),
    }
    ledger.damaged_at = datetime.now(UTC)
    for kind, (what, assignment) in runs.items():
        if kind in damage and (pg or kind != "timeout"):
            ledger.call(f"write a run with {what}", partial(_damage_run, app, ledger, what, assignment))
    schedules = {
        "every": ("d-every", "every is NaN" if pg else "every is infinite", f"every = {nan}"),
        "jitter": ("d-jitter", "jitter does not decode", "jitter = 1e300"),
        "grace": ("d-grace", "misfire_grace is negative", "misfire_grace = -5"),
        "overlap": ("d-overlap", "overlap is no policy", "overlap = 'nope'"),
        "schedule_args": ("d-args", "args are not JSON", "args = 'not json'"),
    }
    for kind, (name, what, assignment) in schedules.items():
        if kind in damage:
            ledger.call(f"write schedule {name}", partial(_damage_schedule, app, ledger, name, what, assignment))
    others = {"spec": _damage_spec, "worker": _damage_workers, "lock": _damage_locks,
              "limit": _damage_limit, "rate": _damage_rate}  # fmt: skip
    for kind, fn in others.items():
        if kind in damage:
            ledger.call(f"write a damaged {kind} row", partial(fn, app, ledger))
    ledger.damaged_mono = time.monotonic()  # every damaged row written: a worker started later repairs the limit
    held = ", ".join(ledger.held_runs) or "-"
    ledger.note(f"damage: runs {', '.join(ledger.damaged_runs) or '-'}; schedules "
                f"{', '.join(ledger.damaged_schedules) or '-'}; {', '.join(ledger.damaged_rows) or 'no other rows'}; "
                f"held {held}")  # fmt: skip


def _damage_run(app: rota.App, ledger: Ledger, what: str, assignment: str) -> None:
    handle = app.get_task("soak.plain").options(delay=2.0).enqueue(0, 2.0, 0)  # long enough for heartbeats
    escaped = assignment.replace("{", "{{").replace("}", "}}")
    _sql(app, f"UPDATE rota_runs SET {escaped} WHERE id = {{id}}", id=int(handle.id))
    ledger.damaged_runs[str(handle.id)] = what


def _damage_schedule(app: rota.App, ledger: Ledger, name: str, what: str, assignment: str) -> None:
    app.add_schedule(name, "soak.tick", every=1.0, args=[0.0], jitter=0.2 if name == "d-jitter" else None)
    escaped = assignment.replace("{", "{{").replace("}", "}}")
    _sql(app, f"UPDATE rota_schedules SET {escaped} WHERE name = {{name}}", name=name)
    ledger.damaged_schedules[name] = what


def _damage_spec(app: rota.App, ledger: Ledger) -> None:
    _sql(app, f"INSERT INTO rota_task_flow (task, spec, updated_at) VALUES ({{task}}, {{spec}}, {_now(app)})",
         task=UNDECLARED, spec='{"limit": {}}')  # fmt: skip
    ledger.damaged_rows.append(f"task spec {UNDECLARED}")


def _damage_workers(app: rota.App, ledger: Ledger) -> None:
    pg, now = _pg(app), _now(app)
    bad = {"d-worker-started": {"started_at": "'infinity'" if pg else "1e300"},
           "d-worker-queues": {"queues": "'not json'"}, "d-worker-lease": {"lease": "-5"}}  # fmt: skip
    for key, damaged in bad.items():
        row = {"id": f"'{key}'", "host": "'soak'", "pid": "1", "concurrency": "4", "queues": "NULL",
               "state": "'running'", "started_at": now, "last_seen": now, **damaged}  # fmt: skip
        _sql(app, f"INSERT INTO rota_workers ({', '.join(row)}) VALUES ({', '.join(row.values())})")
        ledger.damaged_rows.append(f"worker {key}")


def _damage_locks(app: rota.App, ledger: Ledger) -> None:
    pg, now = _pg(app), _now(app)
    bad = {"d-lock-token": {"token": "-9"}, "d-lock-expires": {"expires_at": "'-infinity'" if pg else "-1e300"}}
    for key, damaged in bad.items():
        row = {"name": f"'{key}'", "owner": "'soak'", "token": "1", "acquired_at": now, "expires_at": now, **damaged}
        _sql(app, f"INSERT INTO rota_locks ({', '.join(row)}) VALUES ({', '.join(row.values())})")
        ledger.damaged_rows.append(f"lock {key}")


def _damage_limit(app: rota.App, ledger: Ledger) -> None:
    _sql(app, "UPDATE rota_limits SET max = {max} WHERE name = 'soak.capped'", max=2**31 - 1)
    ledger.damaged_rows.append("limit soak.capped")
    handle = app.get_task("soak.capped").enqueue(0)
    ledger.add("capped", [handle.id])
    ledger.held_runs.append(str(handle.id))


def _damage_rate(app: rota.App, ledger: Ledger) -> None:
    per = "'NaN'" if _pg(app) else "1e300"
    _sql(app, f"UPDATE rota_rates SET per = {per} WHERE name = 'soak.paced'")
    ledger.damaged_rows.append("rate soak.paced")
    handle = app.get_task("soak.paced").enqueue(0)
    ledger.add("paced", [handle.id])
    ledger.held_runs.append(str(handle.id))
