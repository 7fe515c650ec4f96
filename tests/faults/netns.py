"""Hosts with their own network namespace and hostname, for partition scenarios (root only).

Host n gets the namespace `rota-fsN<tag>`, a veth pair `rota-hN<tag>` (host side,
10.213.7.(4b+1)/30) and `rota-nN<tag>` (inside, 10.213.7.(4b+2)/30) for a free block b of
the private 10.213.7.0/24, and a FaultProxy on the host-side address forwarding to
PostgreSQL: its workers reach the database only through that proxy. Workers run as `ip netns exec NS unshare --uts sh -c 'hostname H; exec python
-m rota worker ...'`, so their worker ids name their host. `partition()` takes the host's
veth link down (its packets go nowhere, its connections hang without a reset); `heal()`
brings it up. Everything created is removed in `close()`, also after a failure.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from ..procs import ROOT, WorkerProcs
from .proxy import FaultProxy

SUBNET = "10.213.7"  # a private /24 used only for these hosts


def netns_problem() -> str | None:
    """Why these hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root (ip netns, veth pairs)"
    if not shutil.which("ip") or not shutil.which("unshare"):
        return "needs the ip and unshare commands"
    probe = f"rota-probe{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return None


def ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", *(["-n", netns] if netns else []), *args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip()}")


def free_block() -> int:
    """A /30 of SUBNET that no interface on the host side uses yet (so that two test runs
    on one machine do not collide)."""
    shown = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
    used = {int(word.split("/")[0].rsplit(".", 1)[1]) // 4 for word in shown.split() if word.startswith(f"{SUBNET}.")}
    # Under pytest-xdist each test process takes its own share of the blocks (gw0 the even
    # ones, gw1 the odd ones, ...): two processes never pick the same free block at once. (A
    # process xdist starts in place of a crashed one may share another's blocks: the crash
    # fails the run anyway, and a clash fails `ip addr add` loudly.)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    share, shares = int(worker.removeprefix("gw") or 0), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    free = [block for block in range(64) if block not in used and block % shares == share % shares]
    if not free:
        raise RuntimeError(f"no free /30 left in {SUBNET}.0/24")
    return random.choice(free)


class Host:
    def __init__(self, n: int, upstream: tuple[str, int], log_dir: Path, url_template: str) -> None:
        if not 0 <= n < 100:
            raise ValueError(f"host number must be from 0 to 99, got {n!r}")
        tag = uuid.uuid4().hex[:4]
        self.n = n
        self.hostname = f"rota-host{n}"
        self.netns, self.outer, self.inner = f"rota-fs{n}{tag}", f"rota-h{n}{tag}", f"rota-n{n}{tag}"
        block = free_block()
        self.outer_ip, self.inner_ip = f"{SUBNET}.{4 * block + 1}", f"{SUBNET}.{4 * block + 2}"
        self._made: list[str] = []
        self.proxy: FaultProxy | None = None
        self.procs = WorkerProcs(url_template, log_dir)
        try:
            self._setup()
            self.proxy = FaultProxy(upstream, (self.outer_ip, 0)).start()
        except BaseException:
            self.close()
            raise
        log_dir.mkdir(parents=True, exist_ok=True)
        self.procs.url = self.proxy.url(url_template)

    def _setup(self) -> None:
        ip("netns", "add", self.netns)
        self._made.append("netns")
        ip("link", "add", self.outer, "type", "veth", "peer", "name", self.inner)
        self._made.append("link")
        ip("link", "set", self.inner, "netns", self.netns)
        ip("addr", "add", f"{self.outer_ip}/30", "dev", self.outer)
        ip("link", "set", self.outer, "up")
        ip("addr", "add", f"{self.inner_ip}/30", "dev", self.inner, netns=self.netns)
        ip("link", "set", self.inner, "up", netns=self.netns)
        ip("link", "set", "lo", "up", netns=self.netns)

    def start_worker(self, app: str, *, concurrency: int = 4, poll: float = 0.1, lease: float = 2.0) -> None:
        """A worker process inside this host (its namespace and its hostname)."""
        procs = self.procs
        n = len(procs.procs)
        log = open(procs.log_dir / f"worker-{n}.log", "wb")  # noqa: SIM115 - closed with the process
        cmd = [
            "ip", "netns", "exec", self.netns, "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"',
            self.hostname, sys.executable, "-m", "rota", "--database-url", procs.url, "worker", app,
            "-c", str(concurrency), "--poll-interval", str(poll), "--lease", str(lease), "--shutdown-timeout", "2",
        ]  # fmt: skip
        env = {**os.environ, "ROTA_DATABASE_URL": procs.url, "PYTHONUNBUFFERED": "1", **procs.env}
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env)
        procs.procs.append(proc)

    def partition(self) -> None:
        ip("link", "set", self.outer, "down")

    def heal(self) -> None:
        ip("link", "set", self.outer, "up")

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.procs.stop_all()
        if self.proxy is not None:
            self.proxy.close()
        if "link" in self._made:
            subprocess.run(["ip", "link", "delete", self.outer], capture_output=True)
        if "netns" in self._made:
            subprocess.run(["ip", "netns", "delete", self.netns], capture_output=True)
