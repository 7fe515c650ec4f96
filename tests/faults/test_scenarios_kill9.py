"""kill -9 of workers mid-run, with several workers and an exclusive schedule, ending with
the common invariants. (test_crashes.py covers the kill -9 storm of 1,000 runs and the
rescue latency; this adds what it does not check: exclusive overlap and ticks.)"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import rota

from ..procs import WorkerProcs, wait_until
from .conftest import APP, all_final, enqueue_rec, settle_schedule, starts
from .invariants import check_invariants

LEASE = 1.5


def test_kill9_of_workers_mid_run_keeps_the_invariants(
    db_url: str, client: rota.App, workers: Callable[[str], WorkerProcs], exec_log: Path
) -> None:
    rng = random.Random(20261130)
    name = f"k9_{uuid.uuid4().hex[:6]}"
    client.add_schedule(name, "faults.rec", every=1, args=[0, 0.7], overlap="skip")
    ids = enqueue_rec(client, 48, seconds=0.4)
    procs = workers(db_url)
    for _ in range(3):
        procs.start(APP, concurrency=3, lease=LEASE, poll=0.1)
    wait_until(lambda: starts(exec_log) >= 6, 30, "runs to start")
    for _ in range(3):
        time.sleep(rng.uniform(0.8, 1.5))
        procs.kill9(rng.choice(procs.alive()))
        procs.start(APP, concurrency=3, lease=LEASE, poll=0.1)
    wait_until(all_final(client, ids), 60, "every run to end")
    until = settle_schedule(client, name)
    runs = check_invariants(client, exec_log, enqueued=ids, leases_lost=True, until=until)
    assert {runs[i].status for i in ids} == {"succeeded"}
    assert any(a.get("started_at") for r in runs.values() for a in r.history), "no kill hit a running run"
