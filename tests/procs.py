"""Real worker processes for race and crash tests: `python -m rota worker ...`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class WorkerProcs:
    """Starts workers and makes sure none outlives the test."""

    def __init__(self, url: str, log_dir: Path) -> None:
        self.url = url
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env: dict[str, str] = {}

    def start(
        self,
        app: str = "tests.apps.basic:app",
        *,
        concurrency: int = 4,
        poll: float = 0.05,
        lease: float = 3.0,
        shutdown_timeout: float = 2.0,
        extra: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        n = len(self.procs)
        log = open(self.log_dir / f"worker-{n}.log", "wb")  # noqa: SIM115 - closed with the process
        cmd = [
            sys.executable, "-m", "rota", "--database-url", self.url, "worker", app,
            "-c", str(concurrency), "--poll-interval", str(poll), "--lease", str(lease),
            "--shutdown-timeout", str(shutdown_timeout), *extra,
        ]  # fmt: skip
        full_env = {
            **os.environ,
            "ROTA_DATABASE_URL": self.url,
            "PYTHONUNBUFFERED": "1",
            **self.env,
            **(env or {}),
        }
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=full_env)
        self.procs.append(proc)
        return proc

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def kill9(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def terminate(self, proc: subprocess.Popen[bytes], timeout: float = 30) -> float:
        """SIGTERM and wait; returns the seconds it took to exit."""
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout)
        return time.monotonic() - began

    def stop_all(self) -> None:
        for proc in self.alive():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def output(self, n: int) -> str:
        return (self.log_dir / f"worker-{n}.log").read_text(errors="replace")

    def outputs(self) -> Iterator[str]:
        for n in range(len(self.procs)):
            yield self.output(n)


def wait_until(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system, s) process `pid` has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
