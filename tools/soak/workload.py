"""The seeded workload: schedules with every overlap and misfire policy, and a stream of
client calls (enqueues of each kind, `after=` chains, `unique_for`, cancels, concurrent
`retry_many`, a backfill), all drawn from one random.Random(seed). The Ledger keeps what the
checker needs to know about them."""

from __future__ import annotations

import random
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import rota

from .app import RETRIES
from .config import Config

# name -> (every, overlap, misfire, seconds a run sleeps on average)
SCHEDULES = {
    "s-skip": (1.0, "skip", "coalesce", 0.8),
    "s-queue": (1.0, "queue", "all", 0.5),
    "s-concurrent": (1.0, "concurrent", "skip", 1.0),
    "s-replace": (1.0, "replace", "coalesce", 1.2),
    "s-skip-all": (1.5, "skip", "all", 0.6),
    "s-queue-skip": (1.5, "queue", "skip", 0.4),
}
UNIQUE_FOR = 3600.0  # longer than any soak: one run per unique key, unless it was cancelled


@dataclass
class Ledger:
    """What the driver did, for the checker."""

    t0: float = field(default_factory=time.monotonic)
    kinds: dict[str, str] = field(default_factory=dict)  # run id -> what the workload enqueued it as
    parents: dict[str, list[str]] = field(default_factory=dict)  # after=: child -> its parents
    schedules: dict[str, tuple[float, str, str, float]] = field(default_factory=dict)
    damaged_runs: dict[str, str] = field(default_factory=dict)  # run id -> what is damaged
    damaged_schedules: dict[str, str] = field(default_factory=dict)
    damaged_at: datetime | None = None
    damaged_rows: list[str] = field(default_factory=list)  # the other damaged rows ("worker d-worker-queues")
    held_runs: list[str] = field(default_factory=list)  # runs of a damaged limit or rate: they wait
    damaged_mono: float | None = None  # when every damaged row had been written (monotonic)
    starts: list[float] = field(default_factory=list)  # when each worker process was started (monotonic)
    client_errors: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)  # what the injector did, in order
    unexpected_exits: list[str] = field(default_factory=list)
    cancels: list[tuple[str, float]] = field(default_factory=list)  # (run id, when cancel() returned it cancelled)
    retry_many_calls: int = 0
    backfilled: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, what: str) -> None:
        with self.lock:
            self.faults.append(f"{time.monotonic() - self.t0:7.2f}s {what}")

    def call(self, what: str, fn: Callable[[], Any]) -> Any:
        """A client call; a failure is recorded (a client call must not fail under these faults)."""
        try:
            return fn()
        except Exception as exc:  # every failure is a finding
            line = traceback.format_exception_only(exc)[-1].strip()
            with self.lock:
                self.client_errors.append(f"{what}: {line}")
            return None

    def add(self, kind: str, ids: list[str] | None) -> list[str]:
        for run_id in ids or []:
            self.kinds[str(run_id)] = kind
        return [str(i) for i in ids or []]


class Workload:
    def __init__(self, cfg: Config, client: rota.App, ledger: Ledger) -> None:
        self.cfg, self.app, self.ledger = cfg, client, ledger
        self.rng = random.Random(cfg.seed)
        self.i = 0
        self.backfill_at = cfg.duration * 0.5 if "backfill" in cfg.features and "schedules" in cfg.features else None

    def on(self, feature: str) -> bool:
        return feature in self.cfg.features

    def seconds(self, base: float) -> float:
        return base if self.on("block") else 0.0

    def setup(self) -> None:
        if not self.on("schedules"):
            return
        for name, (every, overlap, misfire, seconds) in SCHEDULES.items():
            self.app.add_schedule(name, "soak.tick", every=every, args=[self.seconds(seconds)], overlap=overlap,
                                  misfire=misfire, misfire_grace=2.0)  # fmt: skip
            self.ledger.schedules[name] = (every, overlap, misfire, seconds)

    def run(self, stop: threading.Event) -> None:
        """Client calls until `stop` is set, about seven a second."""
        began = time.monotonic()
        actions = self.actions()
        names, weights = list(actions), [w for w, _ in actions.values()]
        while not stop.wait(0.15):
            if self.backfill_at is not None and time.monotonic() - began >= self.backfill_at:
                self.backfill_at = None
                self.backfill()
            if names:
                actions[self.rng.choices(names, weights)[0]][1]()

    def actions(self) -> dict[str, tuple[float, Callable[[], None]]]:
        every: dict[str, tuple[float, Callable[[], None]]] = {"plain": (3.0, self.plain)}
        optional = {
            "limits": ("limited", 2.0, self.limited), "rates": ("rated", 1.0, self.rated),
            "txn": ("txn", 1.5, self.txn), "fork": ("fork", 0.7, self.fork), "after": ("after", 1.0, self.after),
            "unique": ("unique", 0.7, self.unique), "cancel": ("cancel", 0.8, self.cancel),
            "retry_many": ("retry_many", 0.5, self.retry_many),
        }  # fmt: skip
        for feature, (name, weight, fn) in optional.items():
            if self.on(feature):
                every[name] = (weight, fn)
        return every

    def next_i(self) -> int:
        self.i += 1
        return self.i

    def fail_until(self) -> int:
        if not self.on("retries"):
            return 0
        return self.rng.choices([0, 1, RETRIES + 1], [0.7, 0.18, 0.12])[0]

    def plain(self) -> None:
        calls: list[tuple[list[Any], dict[str, Any]]] = [
            ([self.next_i(), self.seconds(0.2), self.fail_until()], {}) for _ in range(self.rng.randint(1, 4))
        ]
        task = self.app.get_task("soak.plain")
        self.ledger.add("plain", self.ledger.call("enqueue plain", lambda: task.enqueue_many(calls)))

    def limited(self) -> None:
        calls: list[tuple[list[Any], dict[str, Any]]] = [
            ([self.rng.choice("abc"), self.next_i(), self.seconds(0.4)], {}) for _ in range(self.rng.randint(1, 3))
        ]
        task = self.app.get_task("soak.limited")
        self.ledger.add("limited", self.ledger.call("enqueue limited", lambda: task.enqueue_many(calls)))

    def rated(self) -> None:
        calls: list[tuple[list[Any], dict[str, Any]]] = [([self.next_i()], {}) for _ in range(self.rng.randint(1, 3))]
        task = self.app.get_task("soak.rated")
        self.ledger.add("rated", self.ledger.call("enqueue rated", lambda: task.enqueue_many(calls)))

    def txn(self) -> None:
        args = [self.next_i(), self.rng.choice([0, 0, 0, 1])]
        handle = self.ledger.call("enqueue txn", lambda: self.app.get_task("soak.txn").enqueue(*args))
        self.ledger.add("txn", [handle.id] if handle else None)

    def fork(self) -> None:
        args = [self.next_i(), round(self.rng.uniform(0.05, self.cfg.fork_seconds), 3), self.rng.choice(["mp", "os"])]
        handle = self.ledger.call("enqueue fork", lambda: self.app.get_task("soak.fork").enqueue(*args))
        self.ledger.add("fork", [handle.id] if handle else None)

    def after(self) -> None:
        task = self.app.get_task("soak.plain")
        parents = []
        for _ in range(self.rng.randint(1, 3)):
            args = [self.next_i(), self.seconds(0.2), self.rng.choice([0, 0, 0, 1, RETRIES + 1])]
            handle = self.ledger.call("enqueue parent", lambda a=args: task.enqueue(*a))  # type: ignore[misc]
            if handle is not None:
                parents.append(handle.id)
                self.ledger.add("parent", [handle.id])
        child_args = [self.next_i(), self.seconds(0.1), 0]
        child = self.ledger.call("enqueue after=", lambda: task.options(after=parents).enqueue(*child_args))
        if child is not None:
            self.ledger.add("child", [child.id])
            self.ledger.parents[str(child.id)] = [str(p) for p in parents]

    def unique(self) -> None:
        """Two threads enqueue one key at once: one run per key."""
        key = f"u{self.rng.randrange(6)}"
        call = self.app.get_task("soak.unique").options(key=key, unique_for=UNIQUE_FOR)
        got: list[str] = []
        twins = [threading.Thread(target=lambda: got.extend(self.ledger.add("unique", [h.id] if (h := self.ledger.call(
            "enqueue unique_for", lambda: call.enqueue(key))) else None))) for _ in range(2)]  # fmt: skip
        for t in twins:
            t.start()
        for t in twins:
            t.join()

    def cancel(self) -> None:
        candidates = [i for i, k in self.ledger.kinds.items() if k in ("plain", "limited", "fork")]
        if candidates:
            run_id = self.rng.choice(candidates[-40:])
            run = self.ledger.call(f"cancel {run_id}", lambda: self.app.cancel(run_id, reason="soak"))
            if run is not None and run.status == "cancelled":
                self.ledger.cancels.append((run_id, time.monotonic()))

    def retry_many(self) -> None:
        """Two retry_many calls at once: each failed run is retried once."""
        self.ledger.retry_many_calls += 2
        twins = [threading.Thread(target=lambda: self.ledger.call("retry_many", lambda: self.app.retry_many(
            status="failed", task="soak.plain"))) for _ in range(2)]  # fmt: skip
        for t in twins:
            t.start()
        for t in twins:
            t.join()

    def backfill(self) -> None:
        now = datetime.now(UTC)
        for name in ("s-concurrent", "s-queue"):
            start = now - timedelta(seconds=self.cfg.duration + 20)  # from before the schedule's first tick
            made = self.ledger.call(f"backfill {name}", lambda n=name, s=start: self.app.backfill(n, start=s, end=now))  # type: ignore[misc]
            self.ledger.backfilled += len(made or [])
