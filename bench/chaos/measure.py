"""The workload and what is measured of it: fixed-rate producers, the handlers' execution log,
and the figures of one cell (lost, executed twice, pickup, recovery).

Every run is `faults.rec(i, seconds)` of tests/faults/app.py: its handler appends a "start"
line (run id, fencing token, pid, time) to the execution log before it sleeps `seconds`, so
an execution is counted even when its worker dies before reporting it.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import rota

FINAL = {"succeeded", "failed", "skipped", "cancelled"}
GIVEN_UP = {"lost", "handed back"}  # attempts whose lease was really taken away (at-least-once)


def client(url: str, **options: object) -> rota.App:
    """The producers' app: enqueues `faults.rec` with the worker app's retries."""
    app = rota.App(url, retention=None, **options)  # type: ignore[arg-type]

    @app.task(name="faults.rec", retries=20, backoff=0)
    def rec(i: int, seconds: float = 0.0) -> None:  # pragma: no cover - runs in the workers
        del i, seconds

    return app


class Producers:
    """`count` threads enqueueing `rate` runs a second between them, each on a fixed clock: a
    slot missed while an enqueue hangs is skipped, not made up later (the rate never bursts).
    `enqueued` maps each acknowledged run id to the time just before its enqueue call;
    an enqueue that raised is counted in `refused` (not acknowledged: never counted lost)."""

    def __init__(self, app: rota.App, rate: float, seconds: float, count: int = 2) -> None:
        self.app, self.rate, self.seconds, self.count = app, rate, seconds, count
        self.enqueued: dict[str, float] = {}
        self.refused = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._loop, args=(n,), daemon=True) for n in range(count)]

    def start(self) -> Producers:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def _loop(self, n: int) -> None:
        interval = self.count / self.rate
        began = time.monotonic() + n * interval / self.count
        task = self.app.tasks["faults.rec"]
        slot = 0
        while not self._stop.is_set():
            slot = max(slot + 1, math.ceil((time.monotonic() - began) / interval))
            self._stop.wait(max(0.0, began + slot * interval - time.monotonic()))
            if self._stop.is_set():
                return
            at = time.time()
            try:
                handle = task.enqueue(slot * self.count + n, self.seconds)
            except Exception:  # a refused enqueue is a figure, not a failure
                with self._lock:
                    self.refused += 1
                continue
            with self._lock:
                self.enqueued[str(handle.id)] = at


def read_starts(log: Path) -> dict[str, list[tuple[float, int]]]:
    """Run id -> (time, token) of every execution the handlers logged."""
    found: dict[str, list[tuple[float, int]]] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        event = json.loads(line)
        if event["event"] == "start":
            found.setdefault(event["run"], []).append((float(event["t"]), int(event["token"])))
    return found


@dataclass
class Marks:
    """The times (time.time()) that cut a cell into its phases."""

    baseline: float  # measured from here (after the warm-up)
    fault: float  # the fault begins
    cleared: float  # the fault's action is over (the server is back, the last kill sent, ...)
    stop: float  # the producers stop


@dataclass
class Cell:
    scenario: str
    recovered: bool
    recovery: float | None  # seconds from `cleared` to the start of the last late run
    lost: int
    twice: int  # runs executed more than once
    beyond: int  # ... more often than 1 + their attempts recorded lost or handed back
    p95_before: float
    p95_after: float
    worst: float  # the longest wait, until the execution that counted, of a run started from the fault on
    enqueued: int
    refused: int
    note: str = ""
    outage: float = 0.0  # seconds from the fault's start to the end of its action
    late_bound: float = 0.0
    lost_ids: list[str] = field(default_factory=list)
    beyond_ids: list[str] = field(default_factory=list)
    late: list[tuple[str, float, float]] = field(default_factory=list)  # (id, enqueued, counted start)


def p95(values: Iterable[float]) -> float:
    data = sorted(values)
    if not data:
        return math.nan
    return data[min(len(data) - 1, math.ceil(0.95 * len(data)) - 1)]


def figures(
    scenario: str,
    enqueued: dict[str, float],
    refused: int,
    starts: dict[str, list[tuple[float, int]]],
    runs: dict[str, rota.Run],
    marks: Marks,
) -> Cell:
    """One cell's figures. A run's pickup is its first execution's start - its enqueue; a
    run is late when its last execution (the one that counted: after a kill, the rescue)
    started more than `late_bound` after its enqueue, the bound being max(1 s, 3x the
    baseline p95). Recovery: from `cleared` to the start of the last late run (0 if none
    was late after it): from then on every run was picked up within the bound."""
    lost = sorted(i for i in enqueued if i not in runs or runs[i].status not in FINAL)
    twice = [i for i in enqueued if len({tok for _, tok in starts.get(i, [])}) > 1]
    beyond = sorted(
        i for i in twice
        if len({tok for _, tok in starts[i]}) > 1 + sum(a.get("status") in GIVEN_UP for a in runs[i].history)
    )  # fmt: skip
    first = {i: min(t for t, _ in starts[i]) - at for i, at in enqueued.items() if starts.get(i)}
    last = {i: max(t for t, _ in starts[i]) for i in enqueued if starts.get(i)}
    before = [first[i] for i, at in enqueued.items() if marks.baseline <= at < marks.fault and i in first]
    after_from = marks.cleared + (marks.stop - marks.cleared) / 2
    after = [first[i] for i, at in enqueued.items() if at >= after_from and i in first]
    hit = [last[i] - at for i, at in enqueued.items() if at >= marks.baseline and last.get(i, 0) >= marks.fault]
    worst = max(hit, default=math.nan)
    base = p95(before)
    bound = max(1.0, 3 * base) if not math.isnan(base) else 1.0
    late = sorted(
        (last[i], i, at) for i, at in enqueued.items() if at >= marks.baseline and i in last and last[i] - at > bound
    )
    recovery = max(0.0, max((t for t, _, _ in late), default=marks.cleared) - marks.cleared)
    steady = bool(after) and p95(after) <= bound
    return Cell(
        scenario=scenario,
        recovered=not lost and steady and recovery < marks.stop - marks.cleared,
        recovery=recovery if not lost else None,
        lost=len(lost),
        twice=len(twice),
        beyond=len(beyond),
        p95_before=base,
        p95_after=p95(after),
        worst=worst,
        enqueued=len(enqueued),
        refused=refused,
        outage=marks.cleared - marks.fault,
        late_bound=bound,
        lost_ids=lost[:10],
        beyond_ids=beyond[:10],
        late=[(i, at, t) for t, i, at in late],
    )
