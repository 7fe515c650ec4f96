"""The soak's invariants, each a function of the Facts returning its violations (with the run
ids), so that a report lists every broken promise rather than the first. Time comparisons use
the handlers' evidence (one monotonic clock for every process); the rate uses the database's
start times (a rate is taken at the claim); the rest reads the runs.

What is promised, and so what is checked (docs/concepts/guarantees.md, faults.md): a run whose
lease was lost may run again (at least once), but never beside itself: its next execution
starts after the previous one can no longer execute (returned, or its process gone). The one
documented exception, a worker paused past its lease, is not provoked here (every proxy cut
is shorter than half a lease and cuts every worker at once).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import rota
from tests.faults.invariants import GIVEN_UP, attempt_intervals

from .app import LIMIT, RATE
from .evidence import Evidence, Execution, most_at_once
from .workload import Ledger

CAPPED = 8  # run ids shown per violation


@dataclass
class Violation:
    invariant: str
    detail: str
    runs: list[str]

    def show(self) -> str:
        more = f" (+{len(self.runs) - CAPPED} more)" if len(self.runs) > CAPPED else ""
        ids = f" [runs {', '.join(self.runs[:CAPPED])}{more}]" if self.runs else ""
        return " ".join(f"{self.invariant}: {self.detail}{ids}".split())


@dataclass
class Facts:
    runs: dict[str, rota.Run]
    evidence: Evidence
    ledger: Ledger
    effects: dict[str, list[int]]  # soak_effects: run id -> the tokens of its rows
    unsettled: dict[str, str]  # run id -> its status when the settle time ran out
    stop_at: datetime  # the schedules ran until then
    faults: tuple[str, ...]
    killed: set[int]  # the pids of the workers the injector killed with -9
    schedules: list[Any] | str  # list_schedules(), or what it raised
    # the listings the damaged registry and flow rows must not break: name -> its rows, or what it raised
    listings: dict[str, list[Any] | str] = field(default_factory=dict)
    termed: set[int] = field(default_factory=set)  # the pids of the workers sent SIGTERM (not -9)
    discarded: list[tuple[str, str, int]] = field(default_factory=list)  # (run, status, token) logged discarded


Check = Callable[[Facts], list[Violation]]


def beside_itself(f: Facts) -> list[Violation]:
    found = []
    for run_id, execs in f.evidence.by_run.items():
        for a, b in itertools.combinations(execs, 2):
            if a.overlaps(b):
                found.append(Violation("beside-itself", f"two executions of run {run_id} at once: {a.show()} and "
                                       f"{b.show()}; history {_history(f, run_id)}", [run_id]))  # fmt: skip
    return found


def limits(f: Facts) -> list[Violation]:
    by_key: dict[str, list[Execution]] = defaultdict(list)
    for ex in f.evidence.executions:
        if ex.task == "soak.limited" and ex.key is not None:
            by_key[ex.key].append(ex)
    found = []
    for key, spans in sorted(by_key.items()):
        most, at = most_at_once(spans)
        if most > LIMIT:
            found.append(Violation("limit", f"{most} executions of key {key!r} at once under Limit({LIMIT}): "
                                   + "; ".join(x.show() for x in at), sorted({x.run for x in at})))  # fmt: skip
    return found


def rates(f: Facts) -> list[Violation]:
    n, per = RATE
    starts = sorted((a, r) for run in f.runs.values() if run.task == "soak.rated" for a, _, r in attempt_intervals(run))
    close = [(starts[i], starts[i + n]) for i in range(len(starts) - n) if starts[i + n][0] - starts[i][0] < per - 1e-6]
    if not close:
        return []
    (a, ra), (b, rb) = close[0]
    return [Violation("rate", f"{len(close)} windows with more than {n} starts within {per:g} s (database start times), "
                      f"first {ra}@{a:.3f} .. {rb}@{b:.3f}", sorted({r for p in close for _, r in p}))]  # fmt: skip


def ticks(f: Facts) -> list[Violation]:
    found = []
    for name, (every, *_rest) in f.ledger.schedules.items():
        # a tick made ahead and withdrawn at a clean shutdown is planned again (documented)
        rows = [r for r in f.runs.values() if r.schedule == name and r.retry_of is None and not _withdrawn(r)]
        seen: dict[datetime, list[rota.Run]] = defaultdict(list)
        for r in rows:
            seen[r.scheduled_for].append(r)
        # a tick has one row, or a skipped row and the run a backfill made for it (documented)
        twice = {
            t: [r.id for r in rs]
            for t, rs in seen.items()
            if sum(r.status == "skipped" for r in rs) > 1 or sum(r.status != "skipped" for r in rs) > 1
        }
        if twice:
            found.append(Violation("ticks", f"schedule {name}: {len(twice)} tick(s) with more than one row, e.g. "
                                   f"{min(twice)}", sorted(i for ids in twice.values() for i in ids)))  # fmt: skip
        order = sorted(seen)
        step = timedelta(seconds=every)
        gaps = [(a, b) for a, b in itertools.pairwise(order) if b - a != step]
        if gaps:
            found.append(Violation("ticks", f"schedule {name}: {len(gaps)} gap(s) with no row for the ticks between, "
                                   f"first {gaps[0][0]} .. {gaps[0][1]}", []))  # fmt: skip
        due = f.stop_at - step - timedelta(seconds=2)
        if not order or order[-1] < due:
            last = order[-1] if order else None
            why = f" (damaged rows were written at {f.ledger.damaged_at})" if f.ledger.damaged_at else ""
            found.append(Violation("schedule-stopped", f"schedule {name}: last tick {last}, but it ran until "
                                   f"{f.stop_at}{why}", []))  # fmt: skip
    return found


def policies(f: Facts) -> list[Violation]:
    """Skipped rows only as the policies allow: Misfire rows never under misfire="all",
    Overlap rows only under overlap="skip"."""
    found = []
    for name, (_, overlap_policy, misfire, _) in f.ledger.schedules.items():
        wrong = {"Misfire"} if misfire == "all" else set()
        wrong |= {"Overlap"} if overlap_policy != "skip" else set()
        bad = [r.id for r in f.runs.values() if r.schedule == name and r.status == "skipped"
               and (r.error or {}).get("type") in wrong]  # fmt: skip
        if bad:
            found.append(Violation("policy", f"schedule {name} (overlap={overlap_policy!r}, misfire={misfire!r}): "
                                   f"{len(bad)} tick(s) skipped as {' or '.join(sorted(wrong))}", sorted(bad, key=int)))  # fmt: skip
    return found


def _withdrawn(run: rota.Run) -> bool:
    return run.status == "cancelled" and (run.error or {}).get("type") == "Withdrawn"


def overlap(f: Facts) -> list[Violation]:
    exclusive = {n for n, (_, policy, _, _) in f.ledger.schedules.items() if policy in ("skip", "queue", "replace")}
    by_schedule: dict[str, list[Execution]] = defaultdict(list)
    for ex in f.evidence.executions:
        if ex.schedule in exclusive:
            by_schedule[ex.schedule].append(ex)
    found = []
    for name, spans in sorted(by_schedule.items()):
        pairs = [(a, b) for a, b in itertools.combinations(spans, 2) if a.run != b.run and a.overlaps(b)]
        if pairs:
            policy = f.ledger.schedules[name][1]
            found.append(Violation("overlap", f"schedule {name} (overlap={policy!r}): {len(pairs)} pair(s) of runs "
                                   f"executing at once, first {pairs[0][0].show()} and {pairs[0][1].show()}",
                                   sorted({x.run for p in pairs for x in p})))  # fmt: skip
    return found


def settled(f: Facts) -> list[Violation]:
    missing = sorted(set(f.ledger.kinds) - set(f.runs), key=int)
    found = [Violation("final", f"{len(missing)} enqueued run(s) vanished", missing)] if missing else []
    stuck = {i: s for i, s in f.unsettled.items() if i not in f.ledger.damaged_runs and i not in f.ledger.held_runs}
    if stuck:
        what = [f"{s} {f.runs[i].task if i in f.runs else '?'}" for i, s in stuck.items()]
        counts = ", ".join(f"{n} {s}" for s, n in sorted(_count(what).items()))
        found.append(Violation("final", f"runs neither final nor legitimately waiting once the faults stopped: {counts}",
                               sorted(stuck, key=int)))  # fmt: skip
    return found


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for v in values:
        out[v] += 1
    return out


def _history(f: Facts, run_id: str) -> str:
    run = f.runs.get(run_id)
    if run is None:
        return "(no such run)"
    steps = [f"{a.get('attempt')}:{a.get('status')}({(a.get('error') or {}).get('type', '')})" for a in run.history]
    return f"{' '.join(steps) or '-'} then {run.attempt}:{run.status}({(run.error or {}).get('type', '')})"


def given_up(run: rota.Run) -> int:
    return sum(1 for a in run.history if a.get("status") in GIVEN_UP)
