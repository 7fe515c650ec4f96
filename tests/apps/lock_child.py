"""Child processes for tests/test_locks.py: `python -m tests.apps.lock_child MODE ARGS...`.

The App comes from ROTA_DATABASE_URL and ROTA_LOCKS_URL (the backend under test). Children
report to append-only files: each line is one `os.write` on an O_APPEND descriptor, so lines
from several processes never interleave. Times are `time.monotonic_ns()` (CLOCK_MONOTONIC is
one clock for every process on the host).

  contend NAME LOG GO SECONDS TTL   write "ready PID", wait for the file GO, then for SECONDS
                                    loop: take the lock, log "enter PID TOKEN NS", hold it a
                                    few ms, log "exit PID TOKEN NS", release, pause a few ms.
  hold NAME TTL REPORT              take the lock, log "held OWNER TOKEN NS", wait for REPORT.go,
                                    log "inside lost=BOOL", leave the block; log "released"
                                    (exit 0) or "LockLost ..." (exit 3).
"""

from __future__ import annotations

import os
import random
import sys
import time

import rota


def record(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def wait_for_file(path: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(f"{path} never appeared")
        time.sleep(0.02)


def contend(name: str, log: str, go: str, seconds: float, ttl: float) -> int:
    app = rota.App(retention=None)
    pid = os.getpid()
    app.list_locks()  # connect (and migrate) before the start line
    record(log, f"ready {pid}")
    wait_for_file(go)
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        token = None
        try:
            with app.lock(name, ttl=ttl, wait=60) as lease:
                token = lease.token
                record(log, f"enter {pid} {token} {time.monotonic_ns()}")
                time.sleep(random.uniform(0, 0.004))
                record(log, f"exit {pid} {token} {time.monotonic_ns()}")
        except rota.LockLost as exc:
            record(log, f"lost {pid} {token} {exc}")
            return 3
        except rota.LockUnavailable as exc:
            record(log, f"unavailable {pid} {exc}")
            return 4
        time.sleep(random.uniform(0, 0.01))
    app.close()
    return 0


def hold(name: str, ttl: float, report: str) -> int:
    app = rota.App(retention=None)
    try:
        with app.lock(name, ttl=ttl, wait=30) as lease:
            record(report, f"held {lease.owner} {lease.token} {time.monotonic_ns()}")
            wait_for_file(report + ".go")
            record(report, f"inside lost={lease.lost}")
    except rota.LockLost as exc:
        record(report, f"LockLost {exc}")
        return 3
    record(report, "released")
    return 0


def main(argv: list[str]) -> int:
    mode, *args = argv
    if mode == "contend":
        name, log, go, seconds, ttl = args
        return contend(name, log, go, float(seconds), float(ttl))
    if mode == "hold":
        name, ttl, report = args
        return hold(name, float(ttl), report)
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
