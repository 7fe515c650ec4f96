"""The worker's totals (read by the per-poll summary and /metrics) and its identity."""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass

_worker_seq = 0
_worker_seq_lock = threading.Lock()


def worker_identity() -> str:
    """host:pid, with :n appended for the second and later worker of one process."""
    global _worker_seq
    with _worker_seq_lock:
        _worker_seq += 1
        n = _worker_seq
    base = f"{socket.gethostname()}:{os.getpid()}"
    return base if n == 1 else f"{base}:{n}"


@dataclass(slots=True)
class WorkerCounters:
    """Totals since start; the per-poll log line and /metrics read these."""

    polls: int = 0
    rescued: int = 0
    claimed: int = 0
    claimed_ahead: int = 0  # of those, claimed just before their due time (held till then)
    dispatched: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    cancelled: int = 0
    timed_out: int = 0
    lost: int = 0
    refused: int = 0  # runs of tasks this worker does not register, given back (refuse)
    stale_writes: int = 0
    written_with_claims: int = 0
    skipped_at_capacity: int = 0
    locked_out: int = 0
    ticks: int = 0
    pruned: int = 0

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}
