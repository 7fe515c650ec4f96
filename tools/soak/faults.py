"""The fleet of worker processes and the fault injector: SIGTERM and kill -9 of a random
worker (then a new one in its place), cuts of every worker's database connection through the
fault proxy (PostgreSQL), and, once, damaged rows written straight into the tables
(tools/soak/damage.py). Each kind of fault is sent once at a planned moment (a seeded order,
spread over the duration), so that even a short soak sends each of them; the rest come at
random, the kinds taking turns."""

from __future__ import annotations

import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import rota
from tests.faults.proxy import FaultProxy
from tests.procs import WorkerProcs

from .config import Config
from .damage import write_damage
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
        self.ledger.starts.append(time.monotonic())
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
        self.turns: list[str] = []  # the kinds still to send this round (each round a seeded shuffle)
        # besides the random ones, each kind once, in a seeded order, spread over the duration
        first = self.rng.sample(self.kinds, len(self.kinds))
        self.planned = [(cfg.duration * (i + 1) / (len(first) + 1), kind) for i, kind in enumerate(first)]

    def run(self) -> None:
        began = time.monotonic()
        while not self.stopping.wait(min(0.5, self.rng.expovariate(1 / self.cfg.fault_every))):
            self.fleet.fill()
            if self.damage_at is not None and time.monotonic() - began >= self.damage_at:
                self.damage_at = None
                write_damage(self.client, self.ledger, self.cfg.damage)
            if self.planned and time.monotonic() - began >= self.planned[0][0]:
                self.fault(self.planned.pop(0)[1])
            elif self.kinds and self.rng.random() < 0.5 / self.cfg.fault_every:
                self.fault(self.next_kind())

    def next_kind(self) -> str:
        if not self.turns:
            self.turns = self.rng.sample(self.kinds, len(self.kinds))
        return self.turns.pop()

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
