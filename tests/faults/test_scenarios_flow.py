"""Runs after others under kill -9 (issue 20): a fan-in whose parents run on workers that
are killed mid-run. Rescued parents run again; the dependent starts once, after the last
parent's success, and the common invariants hold."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import rota
from rota.stores.base import NewRun

from ..procs import WorkerProcs, wait_until
from .conftest import APP, all_final, enqueue_rec, starts
from .invariants import check_invariants

LEASE = 1.5


def test_kill9_during_a_fan_in_starts_the_dependent_once_after_every_parent(
    db_url: str, client: rota.App, workers: Callable[[str], WorkerProcs], exec_log: Path
) -> None:
    rng = random.Random(20261201)
    parents = enqueue_rec(client, 40, seconds=0.4)
    child = NewRun(task="faults.rec", args=json.dumps([-1, 0]), max_attempts=21, after=tuple(map(int, parents)))
    ((child_id, _),) = client.store.insert_runs([child])
    procs = workers(db_url)
    for _ in range(3):
        procs.start(APP, concurrency=3, lease=LEASE, poll=0.1)
    wait_until(lambda: starts(exec_log) >= 6, 30, "parents to start")
    for _ in range(2):
        time.sleep(rng.uniform(0.8, 1.5))
        procs.kill9(rng.choice(procs.alive()))
        procs.start(APP, concurrency=3, lease=LEASE, poll=0.1)
    ids = [*parents, str(child_id)]
    wait_until(all_final(client, ids), 90, "every run to end")
    runs = check_invariants(client, exec_log, enqueued=ids, leases_lost=True)
    assert {runs[i].status for i in ids} == {"succeeded"}
    done = runs[str(child_id)]
    assert done.started_at is not None and done.attempt == 1
    assert all(runs[p].finished_at is not None and done.started_at >= runs[p].finished_at for p in parents)  # type: ignore[operator]
    assert any(runs[p].history for p in parents), "no kill hit a running parent"
