"""Outcomes that are hard to write: handlers returning (or raising with) values the store
cannot encode, and many workers finishing runs of many schedules at once on PostgreSQL and
MySQL/MariaDB."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import rota
from rota.stores.base import NewRun

from ..procs import WorkerProcs, wait_until
from .conftest import APP, all_final, enqueue, no_tracebacks
from .invariants import FINAL, check_invariants


def test_unencodable_outcomes_do_not_stop_the_worker_writing_others(
    db_url: str, client: rota.App, workers: Callable[[str], WorkerProcs], exec_log: Path
) -> None:
    """Lone surrogates (os.fsdecode of a non-UTF-8 name) in a result and in an error message,
    and a NUL (PostgreSQL text cannot hold it), among plain runs: every run ends, plain ones
    with their result, odd ones succeeded with an escaped form or failed with a clear error."""
    calls: list[list[object]] = []
    for i in range(24):
        calls.append(["plain", i])
        if i % 6 == 0:
            calls.append([("surrogate", "raise-surrogate", "nul", "raise-nul")[i // 6], i])
    ids = enqueue(client, "faults.weird", calls, max_attempts=1)
    procs = workers(db_url)
    procs.start(APP, concurrency=4, lease=3.0, poll=0.05)
    wait_until(all_final(client, ids), 12, "every run, odd or plain, to end")
    runs = check_invariants(client, exec_log, enqueued=ids, leases_lost=False)
    plain = [i for i, call in zip(ids, calls, strict=True) if call[0] == "plain"]
    assert {runs[i].status for i in plain} == {"succeeded"}
    odd = [runs[i] for i in ids if i not in plain]
    assert all(r.status in FINAL for r in odd)
    for run in odd:
        if run.status == "failed":
            assert run.error is not None and run.error.get("message"), run
    assert procs.procs[0].poll() is None
    no_tracebacks(procs)


def test_concurrent_finishers_across_many_schedules(
    server_url: str, server_client: rota.App, workers: Callable[[str], WorkerProcs], exec_log: Path
) -> None:
    """600 short runs spread at random over 12 schedules, finished by 3 workers in
    interleaved batches: each finish takes schedule row locks (PostgreSQL: through the
    rota_run_finished trigger; MySQL: the finish's own statements). No deadlock may cost a result or be reported as "database unavailable"."""
    names = [f"fin_{uuid.uuid4().hex[:6]}_{k}" for k in range(12)]
    for name in names:
        server_client.add_schedule(name, "faults.rec", every=3600, args=[0], overlap="concurrent")
    rng = random.Random(20261130)
    now = datetime.now(UTC)  # one time for all (MySQL's clock moves between the rows of one insert)
    runs = [
        NewRun(
            task="faults.rec", args=json.dumps([i, 0.0]), schedule=rng.choice(names), max_attempts=21, scheduled_for=now
        )
        for i in range(600)
    ]
    ids = [str(run_id) for run_id, _ in server_client.store.insert_runs(runs)]
    procs = workers(server_url)
    for _ in range(3):
        procs.start(APP, concurrency=8, lease=3.0, poll=0.05)
    wait_until(all_final(server_client, ids), 60, "every run to end")
    found = check_invariants(server_client, exec_log, enqueued=ids, leases_lost=False)
    assert {found[i].status for i in ids} == {"succeeded"}
    for output in procs.outputs():
        misread = [line for line in output.splitlines() if "database unavailable" in line and "deadlock" in line]
        assert not misread, f"a deadlock was reported as an outage: {misread}"
    counted = sum(s.success_count for s in server_client.list_schedules() if s.name in names)
    assert counted == 600
