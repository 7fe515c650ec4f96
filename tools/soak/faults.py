"""The fleet of worker processes and the fault injector: SIGTERM and kill -9 of a random
worker (then a new one in its place), cuts of every worker's database connection through the
fault proxy (PostgreSQL), and, once, damaged rows written straight into the tables."""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import rota
from tests.faults.proxy import FaultProxy
from tests.procs import WorkerProcs

from .config import Config
from .workload import Ledger

APP = "tools.soak.app:app"


class Fleet:
    """K worker processes; `exits` maps each gone worker's pid to when it was seen gone."""

    def __init__(self, cfg: Config, url: str, folder: Path, ledger: Ledger) -> None:
        self.cfg, self.ledger = cfg, ledger
        self.procs = WorkerProcs(url, folder)
        self.procs.env.update({"ROTA_SOAK_DIR": str(folder), "ROTA_SOAK_SEED": str(cfg.seed),
                               "ROTA_SOAK_LEASE": str(cfg.lease), "ROTA_HIGH_FREQUENCY": "0"})  # fmt: skip
        self.slots: list[subprocess.Popen[bytes]] = []
        self.signalled: set[int] = set()
        self.killed: set[int] = set()
        self.exits: dict[int, float] = {}

    def start(self) -> subprocess.Popen[bytes]:
        return self.procs.start(APP, concurrency=self.cfg.concurrency, poll=0.1, lease=self.cfg.lease,
                                shutdown_timeout=self.cfg.shutdown_timeout)  # fmt: skip

    def fill(self) -> None:
        """Start workers until K are alive; a worker that left without a signal is a finding."""
        for proc in list(self.slots):
            if proc.poll() is None:
                continue
            self.exits.setdefault(proc.pid, time.monotonic())
            self.slots.remove(proc)
            if proc.pid not in self.signalled:
                n = self.procs.procs.index(proc)
                tail = self.procs.output(n).strip().splitlines()[-3:]
                self.ledger.unexpected_exits.append(f"worker pid {proc.pid} (worker-{n}.log) exited {proc.returncode} "
                                                    f"on its own: {' | '.join(tail)}")  # fmt: skip
        while len(self.slots) < self.cfg.workers:
            self.slots.append(self.start())

    def wait_ready(self, client: rota.App, timeout: float = 90) -> None:
        """Wait until every worker has registered (a worker takes seconds to start on a busy machine)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.fill()
            live = {p.pid for p in self.slots}
            if live <= {w.pid for w in self.ledger.call("list_workers", client.list_workers) or []}:
                return
            time.sleep(0.2)

    def stop(self, proc: subprocess.Popen[bytes], sig: int | None, timeout: float = 60) -> None:
        """Send `sig` (None: it was sent already) and wait for the worker to exit."""
        self.signalled.add(proc.pid)
        if sig == signal.SIGKILL:
            self.killed.add(proc.pid)
        if sig is not None:
            proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.ledger.unexpected_exits.append(f"worker pid {proc.pid} still running {timeout:g} s after {sig!r}")
            proc.kill()
            proc.wait(10)
        self.exits[proc.pid] = time.monotonic()
        if proc in self.slots:
            self.slots.remove(proc)

    def stop_all(self) -> None:
        for proc in list(self.slots):
            self.signalled.add(proc.pid)
            proc.send_signal(signal.SIGTERM)
        for proc in list(self.slots):
            self.stop(proc, None)
        for proc in self.procs.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
            self.exits.setdefault(proc.pid, time.monotonic())


class Injector(threading.Thread):
    def __init__(self, cfg: Config, fleet: Fleet, proxy: FaultProxy | None, client: rota.App, ledger: Ledger) -> None:
        super().__init__(name="soak-faults", daemon=True)
        self.cfg, self.fleet, self.proxy, self.client, self.ledger = cfg, fleet, proxy, client, ledger
        self.rng = random.Random(cfg.seed * 7919 + 1)
        self.stopping = threading.Event()
        kinds = [f for f in ("term", "kill") if f in cfg.faults]
        self.kinds = kinds + (["proxy"] if "proxy" in cfg.faults and proxy is not None else [])
        self.damage_at = cfg.duration * 0.35 if "damage" in cfg.faults else None

    def run(self) -> None:
        began = time.monotonic()
        while not self.stopping.wait(min(0.5, self.rng.expovariate(1 / self.cfg.fault_every))):
            self.fleet.fill()
            if self.damage_at is not None and time.monotonic() - began >= self.damage_at:
                self.damage_at = None
                write_damage(self.client, self.ledger, self.cfg.damage)
            if self.kinds and self.rng.random() < 0.5 / self.cfg.fault_every:
                self.fault(self.rng.choice(self.kinds))

    def fault(self, kind: str) -> None:
        if kind == "proxy":
            assert self.proxy is not None
            cut = round(self.rng.uniform(0.2, min(2.0, self.cfg.lease / 2)), 2)
            self.ledger.note(f"proxy: every worker's connections cut for {cut} s")
            self.proxy.cut()
            time.sleep(cut)
            self.proxy.restore()
            return
        alive = [p for p in self.fleet.slots if p.poll() is None]
        if not alive:
            return
        victim = self.rng.choice(alive)
        sig = signal.SIGTERM if kind == "term" else signal.SIGKILL
        self.ledger.note(f"{kind}: worker pid {victim.pid}")
        self.fleet.stop(victim, sig)
        self.fleet.fill()

    def finish(self) -> None:
        self.stopping.set()
        self.join(120)
        if self.proxy is not None:
            self.proxy.restore()
        self.fleet.fill()


def write_damage(app: rota.App, ledger: Ledger, damage: tuple[str, ...]) -> None:
    """Runs and schedules no API would write: an attempt at its column's maximum, a NaN
    timeout (PostgreSQL; SQLite's STRICT tables hold no NaN), arguments that are not JSON,
    a schedule whose `every` is NaN (SQLite: infinite), one whose jitter does not decode
    (1e300 seconds). Each damaged run is due two seconds after the damage is written; each
    damage is written on its own (one that fails to write is a client-call finding)."""
    store: Any = app.store
    pg = store.dialect == "postgresql"
    top = 2**31 - 1 if pg else 2**63 - 1
    nan = "'NaN'" if pg else "9e999"  # SQLite: an infinite one
    runs = {
        "attempt": ("attempt at its column's maximum", f"attempt = {top}, max_attempts = {top}"),
        "timeout": ("a NaN timeout", "timeout = 'NaN'"),  # PostgreSQL only: SQLite's STRICT REAL holds no NaN
        "args": ("args that are not JSON", "args = '[1,'"),
    }
    ledger.damaged_at = datetime.now(UTC)
    for kind, (what, assignment) in runs.items():
        if kind in damage and (pg or kind != "timeout"):
            ledger.call(f"write a run with {what}", lambda w=what, a=assignment: _damage_run(app, ledger, w, a))  # type: ignore[misc]
    schedules = {"every": ("d-every", "every is NaN" if pg else "every is infinite", f"every = {nan}"),
                 "jitter": ("d-jitter", "jitter does not decode", "jitter = 1e300")}  # fmt: skip
    for kind, (name, what, assignment) in schedules.items():
        if kind in damage:
            ledger.call(
                f"write schedule {name}", lambda n=name, w=what, a=assignment: _damage_schedule(app, ledger, n, w, a)
            )  # type: ignore[misc]
    ledger.note(f"damage: runs {', '.join(ledger.damaged_runs)}; schedules {', '.join(ledger.damaged_schedules)}")


def _damage_run(app: rota.App, ledger: Ledger, what: str, assignment: str) -> None:
    store: Any = app.store
    handle = app.get_task("soak.plain").options(delay=2.0).enqueue(0, 2.0, 0)  # long enough for heartbeats
    with store._tx() as s:
        s.q_text(f"UPDATE rota_runs SET {assignment} WHERE id = {store._p('id')}", id=int(handle.id))
    ledger.damaged_runs[str(handle.id)] = what


def _damage_schedule(app: rota.App, ledger: Ledger, name: str, what: str, assignment: str) -> None:
    store: Any = app.store
    app.add_schedule(name, "soak.tick", every=1.0, args=[0.0], jitter=0.2 if name == "d-jitter" else None)
    with store._tx() as s:
        s.q_text(f"UPDATE rota_schedules SET {assignment} WHERE name = {store._p('name')}", name=name)
    ledger.damaged_schedules[name] = what
