"""What the handlers recorded (tools/soak/app.py), read back as executions: one per (run,
fencing token), from its start to its end, or, when its process died first (kill -9, the
exit after SIGTERM), to the moment that process was seen gone."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

INF = float("inf")


@dataclass
class Execution:
    run: str
    token: int
    attempt: int
    task: str
    pid: int
    start: float  # CLOCK_MONOTONIC
    wall: float  # time.time() at the start
    end: float = INF  # its end line, else its process's exit, else still running
    ok: bool | None = None  # True returned, False raised, None cut short by its process's exit
    key: str | None = None
    schedule: str | None = None
    tick: str | None = None

    def overlaps(self, other: Execution) -> bool:
        return self.start < other.end and other.start < self.end

    def show(self) -> str:
        end = "∞" if self.end == INF else f"{self.end:.3f}"
        how = {True: "returned", False: "raised", None: "cut short"}[self.ok]
        return f"run {self.run} token {self.token} pid {self.pid} [{self.start:.3f}, {end}] {how}"


@dataclass
class Evidence:
    executions: list[Execution]
    by_run: dict[str, list[Execution]]


def read(folder: Path, exits: dict[int, float]) -> Evidence:
    """Every evidence file in `folder`; `exits` maps a worker's pid to when it was seen gone."""
    found: dict[tuple[str, int], Execution] = {}
    for path in sorted(folder.glob("evidence-*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            e = json.loads(line)
            ident = (e["run"], int(e["token"]))
            if e["e"] == "start":
                found[ident] = Execution(
                    run=e["run"], token=int(e["token"]), attempt=int(e["attempt"]), task=e["task"], pid=int(e["pid"]),
                    start=float(e["mono"]), wall=float(e["wall"]), key=e.get("key"), schedule=e.get("schedule"),
                    tick=e.get("tick"),
                )  # fmt: skip
            elif ident in found:
                found[ident].end = float(e["mono"])
                found[ident].ok = bool(e.get("ok"))
    for ex in found.values():
        if ex.ok is None:
            ex.end = exits.get(ex.pid, INF)
    by_run: dict[str, list[Execution]] = defaultdict(list)
    for ex in sorted(found.values(), key=lambda x: x.start):
        by_run[ex.run].append(ex)
    return Evidence(sorted(found.values(), key=lambda x: x.start), dict(by_run))


def most_at_once(spans: list[Execution]) -> tuple[int, list[Execution]]:
    """The most executions open at one moment, and those executions (an end at t closes
    before a start at t opens)."""
    events = sorted([(x.start, 1, i) for i, x in enumerate(spans)] + [(x.end, -1, i) for i, x in enumerate(spans)],
                    key=lambda e: (e[0], e[1]))  # fmt: skip
    open_now: set[int] = set()
    most, at = 0, [] if not spans else [spans[0]]
    for _, step, i in events:
        if step == 1:
            open_now.add(i)
        else:
            open_now.discard(i)
        if len(open_now) > most:
            most, at = len(open_now), [spans[j] for j in sorted(open_now)]
    return most, at


DISCARDED = re.compile(r"run (\d+): outcome '(\w+)' discarded: token (\d+)")


def discarded(folder: Path) -> list[tuple[str, str, int]]:
    """(run, status, token) of each outcome a worker logged as discarded (a stale write)."""
    found = []
    for path in sorted(folder.glob("worker-*.log")):
        for m in DISCARDED.finditer(path.read_text(errors="replace")):
            found.append((m.group(1), m.group(2), int(m.group(3))))
    return found
