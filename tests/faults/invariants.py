"""The invariants every fault scenario ends with, checked from the database and the handlers'
own execution log (tests/faults/app.py writes it):

1. no run lost: every enqueued run exists and is final or legitimately pending (nothing is
   left "running" once the workers are quiet), and no attempt was lost unless the scenario
   really took a lease away (a kill -9, a partition);
2. no succeeded run executed twice unless a lease was really lost: its executions (distinct
   fencing tokens in the log) are at most 1 + its attempts recorded as lost or handed back
   (a held run's loss included: its handler may have started just before its worker died);
3. every returned result recorded: an execution that returned while its token was still the
   run's token left exactly that result; one whose token moved on had its attempt lost;
4. no overlap of an exclusive schedule: the attempts' [started_at, finished_at] intervals in
   the runs and their history never intersect;
5. every tick accounted for: each due tick of an interval schedule, from its first tick to
   `until`, has a run row (run, skipped or coalesced).
"""

from __future__ import annotations

import collections
import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import rota

FINAL = {"succeeded", "failed", "skipped", "cancelled"}
GIVEN_UP = {"lost", "handed back"}


@dataclass
class Executions:
    """What the handlers logged, per run id."""

    starts: dict[str, set[int]] = field(default_factory=lambda: collections.defaultdict(set))
    ends: list[dict[str, Any]] = field(default_factory=list)


def read_log(path: Path) -> Executions:
    found = Executions()
    for line in path.read_text().splitlines() if path.exists() else []:
        event = json.loads(line)
        if event["event"] == "start":
            found.starts[event["run"]].add(int(event["token"]))
        else:
            found.ends.append(event)
    return found


def check_invariants(
    app: rota.App,
    log_path: Path,
    *,
    enqueued: Iterable[str | int] = (),
    leases_lost: bool = False,
    until: datetime | None = None,
) -> dict[str, rota.Run]:
    """Assert the five invariants; returns the runs by id for the scenario's own checks."""
    runs = {str(r.id): r for r in app.list_runs(limit=100_000)}
    executions = read_log(log_path)
    check_nothing_lost(runs, [str(i) for i in enqueued], leases_lost)
    check_executed_once(runs, executions)
    check_results_recorded(runs, executions)
    check_exclusive(runs, {s.name for s in app.list_schedules(include_inactive=True) if s.overlap in ("skip", "queue")})
    check_ticks(app, runs, until)
    return runs


def given_up(run: rota.Run) -> list[dict[str, Any]]:
    return [a for a in run.history if a.get("status") in GIVEN_UP]


def check_nothing_lost(runs: dict[str, rota.Run], enqueued: list[str], leases_lost: bool) -> None:
    missing = [i for i in enqueued if i not in runs]
    assert not missing, f"enqueued runs vanished: {missing}"
    active = {i: r.status for i, r in runs.items() if r.status not in FINAL and r.status != "pending"}
    assert not active, f"runs neither final nor pending: {active}"
    if leases_lost:
        return
    lost = {i: given_up(r) for i, r in runs.items() if given_up(r)}
    assert not lost, f"attempts lost although no lease was taken away: {lost}"
    failed = {
        i: r.error for i, r in runs.items() if r.status == "failed" and (r.error or {}).get("type") == "WorkerLost"
    }
    assert not failed, f"runs failed as lost although no lease was taken away: {failed}"


def attempt_lost(run: rota.Run, attempt: int, token: int) -> bool:
    """Whether that attempt of the run lost its lease: recorded as lost or handed back in the
    history (a held run's loss by its token: it carries the number the next attempt takes),
    or the run's last attempt, rescued and failed as lost (no attempts left)."""
    for a in given_up(run):
        if (a.get("token") == token) if a.get("held") else (a.get("attempt") == attempt):
            return True
    return run.attempt == attempt and run.status == "failed" and (run.error or {}).get("type") == "WorkerLost"


def check_executed_once(runs: dict[str, rota.Run], executions: Executions) -> None:
    twice = {
        i: (sorted(tokens), given_up(runs[i]))
        for i, tokens in executions.starts.items()
        if i in runs and runs[i].status == "succeeded" and len(tokens) > 1 + len(given_up(runs[i]))
    }
    assert not twice, f"succeeded runs executed more often than their leases were lost: {twice}"


def check_results_recorded(runs: dict[str, rota.Run], executions: Executions) -> None:
    problems = []
    for end in executions.ends:
        run = runs.get(end["run"])
        if run is None:
            problems.append((end, "no such run"))
        elif attempt_lost(run, end["attempt"], end["token"]):
            continue
        elif run.token == end["token"] and run.attempt == end["attempt"]:
            if "result" in end and (run.status != "succeeded" or run.result != end["result"]):
                problems.append((end, f"stored {run.status} {run.result!r}"))
            elif run.status not in FINAL:
                problems.append((end, f"the run is still {run.status}"))
        else:
            problems.append((end, f"token moved on to {run.token} without losing attempt {end['attempt']}"))
    assert not problems, f"returned outcomes not recorded: {problems[:10]}"


def _when(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def attempt_intervals(run: rota.Run) -> list[tuple[float, float, str]]:
    spans = [(_when(a["started_at"]), _when(a["finished_at"]), run.id) for a in run.history if a.get("started_at")]
    if run.started_at is not None and run.status != "skipped":
        end = run.finished_at.timestamp() if run.finished_at is not None else float("inf")
        spans.append((run.started_at.timestamp(), end, run.id))
    return spans


def check_exclusive(runs: dict[str, rota.Run], exclusive: set[str]) -> None:
    by_schedule: dict[str, list[tuple[float, float, str]]] = collections.defaultdict(list)
    for run in runs.values():
        if run.schedule in exclusive:
            by_schedule[run.schedule].extend(attempt_intervals(run))
    overlaps = {
        name: [(a, b) for a, b in itertools.pairwise(sorted(spans)) if b[0] < a[1] and a[2] != b[2]]
        for name, spans in by_schedule.items()
    }
    overlaps = {name: pairs for name, pairs in overlaps.items() if pairs}
    assert not overlaps, f"attempts of exclusive schedules overlap: {overlaps}"


def check_ticks(app: rota.App, runs: dict[str, rota.Run], until: datetime | None) -> None:
    for info in app.list_schedules(include_inactive=True):
        if info.every is None:
            continue
        ticks = sorted({r.scheduled_for for r in runs.values() if r.schedule == info.name and r.retry_of is None})
        if not ticks:
            continue
        step = info.every
        gaps = [(a, b) for a, b in itertools.pairwise(ticks) if b - a != step]
        assert not gaps, f"schedule {info.name}: ticks without a run row between {gaps}"
        if until is not None:
            due = until - step - timedelta(seconds=1)  # the tick due just before `until` may be in flight
            assert ticks[-1] >= due, f"schedule {info.name}: no row for ticks after {ticks[-1]} (until {until})"


def max_overlap(spans: list[tuple[float, float, str]]) -> int:
    """The most spans open at one moment (an end at t closes before a start at t opens)."""
    events = sorted([(a, 1) for a, _, _ in spans] + [(b, -1) for _, b, _ in spans], key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def check_limit(runs: dict[str, rota.Run], task: str, limit: int, key: Any) -> dict[str, int]:
    """At most `limit` attempts of `task` overlap per `key(run)`, judged from the database's
    started_at/finished_at of every attempt (a lost attempt holds its slot until its rescue)."""
    by_key: dict[str, list[tuple[float, float, str]]] = collections.defaultdict(list)
    for run in runs.values():
        if run.task == task:
            by_key[str(key(run))].extend(attempt_intervals(run))
    most = {k: max_overlap(spans) for k, spans in by_key.items()}
    over = {k: _overlapping(by_key[k], runs) for k, n in most.items() if n > limit}
    assert not over, f"more than {limit} running at once per key: {most}; the attempts: {over}"
    return most


def _overlapping(spans: list[tuple[float, float, str]], runs: dict[str, rota.Run]) -> list[str]:
    """Each attempt that overlaps another, with its run's history (to tell a real overlap from
    a misread one when a fault run fails)."""
    found = sorted({s for s in spans for t in spans if s is not t and s[0] < t[1] and t[0] < s[1]})
    return [f"run {r} [{a:.3f}, {b:.3f}] {runs[r].status} history={runs[r].history}" for a, b, r in found]


def check_rate(runs: dict[str, rota.Run], task: str, max_starts: int, per: float) -> list[float]:
    """At most `max_starts` starts of `task` (retries included) in any window of `per`
    seconds, from the database's started_at of every attempt."""
    starts = sorted(a for run in runs.values() if run.task == task for a, _, _ in attempt_intervals(run))
    too_close = [(a, b) for a, b in zip(starts, starts[max_starts:], strict=False) if b - a < per - 1e-6]
    assert not too_close, f"more than {max_starts} starts within {per} s: {too_close[:3]}"
    return starts
