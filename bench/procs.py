"""Worker subprocesses: start them in a clean interpreter, watch them, stop them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import probe

REPO = Path(__file__).resolve().parent.parent


class WorkerDied(RuntimeError):
    """A worker process exited while the measurement still needed it."""


class Worker:
    """A worker process whose output goes to a log file (shown when something fails)."""

    def __init__(self, argv: Sequence[str], log: Path, env: dict[str, str]) -> None:
        self.log = log
        self.argv = list(argv)
        with log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def check(self) -> None:
        """Raise WorkerDied (with the log's tail) if the process has exited."""
        code = self.proc.poll()
        if code is not None:
            raise WorkerDied(f"worker {self.argv[2:4]} exited with {code}:\n{self.tail()}")

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (graceful), then SIGKILL after `timeout` seconds."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def spawn_function(func: str, kwargs: dict[str, Any], log: Path, probe_path: Path, slot: int = 0) -> Worker:
    """Start `python -m bench.child worker FUNC JSON`: FUNC(**kwargs) in a fresh interpreter."""
    argv = [sys.executable, "-m", "bench.child", "worker", func, json.dumps(kwargs)]
    env = child_env({probe.ENV_PATH: str(probe_path), probe.ENV_SLOT: str(slot)})
    return Worker(argv, log, env)


def spawn_module(module: str, args: Sequence[str], log: Path, env: dict[str, str], slot: int = 0) -> Worker:
    """Start `python -m MODULE ARGS...` with the probe slot in its environment."""
    argv = [sys.executable, "-m", module, *args]
    return Worker(argv, log, child_env({**env, probe.ENV_SLOT: str(slot)}))


def wait_for(
    condition: Callable[[], bool],
    timeout: float,
    what: str,
    workers: Sequence[Worker] = (),
    interval: float = 0.001,
) -> float:
    """Poll `condition` until true; returns the time at which the successful check began.

    (A database check sees the state as of its start, so that is when it was true.)
    Raises TimeoutError after `timeout` seconds and WorkerDied if a worker exits first.
    """
    deadline = time.monotonic() + timeout
    checks = 0
    while True:
        began = time.time()
        if condition():
            return began
        checks += 1
        if checks % 50 == 0:
            for w in workers:
                w.check()
        if time.monotonic() > deadline:
            tails = "".join(f"\n--- {w.log.name}:\n{w.tail()}" for w in workers)
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{tails}")
        time.sleep(interval)


def stop_all(workers: Sequence[Worker]) -> None:
    for w in workers:
        if w.alive():
            w.proc.send_signal(signal.SIGTERM)
    for w in workers:
        w.stop()
