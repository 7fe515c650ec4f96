"""What one cell runs on: a PostgreSQL cluster of its own (tests/pg_cluster.py: initdb'd on
free ports, never the shared server), worker processes (`python -m rota worker
tests.faults.app:app`), and, for the scenarios that need them, a streaming replica, a
transaction-mode PgBouncer (tests/pgbouncer.py) or a worker on a host of its own network
namespace (tests/faults/netns.py)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rota
from tests.faults.netns import Host
from tests.pg_cluster import Cluster
from tests.pgbouncer import Bouncer
from tests.procs import WorkerProcs

from .measure import client

APP = "tests.faults.app:app"


@dataclass
class Settings:
    rate: float = 20.0  # runs enqueued a second, by all producers together
    seconds: float = 0.2  # each handler's sleep (about 4 runs in flight at 20/s)
    workers: int = 2
    concurrency: int = 16  # one worker alone handles 4x the rate: a replacement's slow start is covered
    lease: float = 2.0
    poll: float = 0.5
    warmup: float = 3.0
    baseline: float = 10.0
    fault: float = 10.0  # how long a sustained fault lasts (terminations, held connections, ...)
    recovery: float = 15.0
    drain: float = 30.0  # after the producers stop: how long the runs get to end


class Rig:
    """One cell's cluster, URLs and workers (see the module)."""

    def __init__(self, cluster: Cluster, settings: Settings, folder: Path) -> None:
        self.cluster = cluster
        self.settings = settings
        self.folder = folder
        self.log = folder / "executions.log"
        self.url = cluster.primary.url()  # what the workers and producers use
        # The app reads its lease and poll interval from these (the CLI's flags yield to it).
        self.env: dict[str, str] = {"ROTA_TEST_LOG": str(self.log), "ROTA_TEST_LEASE": str(settings.lease),
                                    "ROTA_TEST_POLL": str(settings.poll)}  # fmt: skip
        self.client_options: dict[str, Any] = {}
        self.bouncer: Bouncer | None = None
        self.host: Host | None = None
        self.procs: WorkerProcs | None = None
        self.app: rota.App | None = None
        self.notes: list[str] = []  # what the fault did, for the table

    def start_workers(self) -> None:
        self.procs = WorkerProcs(self.url, self.folder)
        self.procs.env.update(self.env)
        own = self.settings.workers - (1 if self.host else 0)
        for _ in range(own):
            self.start_worker()
        if self.host is not None:
            self.host.procs.env.update(self.env)
            self.host.start_worker(APP, concurrency=self.settings.concurrency, poll=self.settings.poll,
                                   lease=self.settings.lease)  # fmt: skip
        self.app = client(self.url, **self.client_options)

    def start_worker(self) -> subprocess.Popen[bytes]:
        assert self.procs is not None
        s = self.settings
        return self.procs.start(APP, concurrency=s.concurrency, poll=s.poll, lease=s.lease, shutdown_timeout=2.0)

    def kill9(self, index: int) -> None:
        """SIGKILL worker `index` of the live ones and start another in its place (what a
        supervisor would do)."""
        assert self.procs is not None
        victim = self.procs.alive()[index]
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        self.start_worker()

    def worker_logs(self) -> str:
        groups = [p for p in (self.procs, self.host.procs if self.host else None) if p is not None]
        return "\n".join(out[-1500:] for procs in groups for out in procs.outputs())

    def stop(self) -> None:
        if self.app is not None:
            with contextlib.suppress(Exception):
                self.app.close()
        if self.procs is not None:
            self.procs.stop_all()


@contextlib.contextmanager
def rig(settings: Settings, folder: Path, *, replica: bool = False, bouncer: bool = False,
        host: bool = False) -> Iterator[Rig]:  # fmt: skip
    """A started rig: its cluster up and migrated, its workers started (not yet warmed up)."""
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(Cluster.start(synchronous=True, replica=replica))
        made = Rig(cluster, settings, folder)
        stack.callback(made.stop)
        if replica:
            made.url = cluster.url()
        client(made.url).migrate()
        if bouncer:
            made.bouncer = Bouncer(cluster.primary.url(), "public", pool=settings.workers * 10 + 6)
            stack.callback(made.bouncer.remove)
            made.bouncer.start()
            made.url = made.bouncer.url
            made.env.update(ROTA_POOLER="transaction", ROTA_LISTEN_URL=cluster.primary.url())
            made.client_options = {"pooler": "transaction", "listen_url": cluster.primary.url()}
        if host:
            primary = cluster.primary
            made.host = Host(0, ("127.0.0.1", primary.port), folder / "host-0", primary.url())
            stack.callback(made.host.close)
        made.start_workers()
        yield made


def wait_started(made: Rig, timeout: float = 60) -> None:
    """Until every worker has started a run (the warm-up's first runs reached them all)."""
    deadline = time.monotonic() + timeout
    while True:
        pids = {line.split('"pid": ')[1].split(",")[0] for line in _lines(made.log)}
        if len(pids) >= made.settings.workers:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(pids)} worker(s) started a run within {timeout} s:\n{made.worker_logs()}")
        time.sleep(0.2)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []
