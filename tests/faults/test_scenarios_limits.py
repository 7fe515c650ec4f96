"""Flow control with real worker processes: a limit per key held across several workers and
a kill -9 (the killed run's slot frees at its rescue), a partitioned holder (fenced off; its
slots free once, at the rescue), a freed slot taken within a wake-up (not a poll interval),
a full key not blocking other keys, and a rate under concurrent claims. Every check reads
the database's started_at/finished_at."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import rota
from rota.stores.base import NewRun

from ..procs import WorkerProcs, wait_until
from .conftest import APP, all_final, ends, starts
from .invariants import attempt_intervals, check_invariants, check_limit, check_rate
from .proxy import FaultProxy

LEASE = 1.5


def enqueue_limited(app: rota.App, calls: list[tuple[str, int, float]]) -> list[str]:
    runs = [
        NewRun(task="faults.limited", args=json.dumps([k, i, s]), max_attempts=21,
               limit_name="faults.limited", limit_key=k)
        for k, i, s in calls
    ]  # fmt: skip
    return [str(run_id) for run_id, _ in app.store.insert_runs(runs)]


def enqueue_rated(app: rota.App, calls: list[tuple[int, float]]) -> list[str]:
    """Runs of faults.rated (its Rate named "faults", one key), as its worker would stamp them."""
    runs = [NewRun(task="faults.rated", args=json.dumps([i, s]), max_attempts=21, rate_name="faults", rate_key="")
            for i, s in calls]  # fmt: skip
    return [str(run_id) for run_id, _ in app.store.insert_runs(runs)]


def _key(run: rota.Run) -> str:
    return str(run.args[0])


def test_a_limit_per_key_holds_across_workers_and_a_kill9_frees_the_slot_at_rescue(
    db_url: str, client: rota.App, workers: Callable[[str], WorkerProcs], exec_log: Path
) -> None:
    ids = enqueue_limited(client, [(k, i, 0.3) for i in range(10) for k in ("a", "b", "c")])
    procs = workers(db_url)
    for _ in range(3):
        procs.start(APP, concurrency=4, lease=LEASE, poll=0.1)
    wait_until(lambda: starts(exec_log) >= 6, 30, "runs to start")
    procs.kill9(procs.alive()[0])  # it held limited runs (each worker has 4 slots, 6 exist)
    procs.start(APP, concurrency=4, lease=LEASE, poll=0.1)
    wait_until(all_final(client, ids), 90, "every run to end")
    runs = check_invariants(client, exec_log, enqueued=ids, leases_lost=True)
    assert {runs[i].status for i in ids} == {"succeeded"}
    most = check_limit(runs, "faults.limited", 2, _key)
    assert max(most.values()) == 2  # the limit was reached, not just respected by idleness
    assert [(i.name, i.running, i.waiting) for i in client.store.list_limits()] == [("faults.limited", 0, 0)]  # type: ignore[attr-defined]


def test_a_freed_slot_is_taken_within_a_wakeup_and_a_full_key_blocks_no_other(
    db_url: str, client: rota.App, workers: Callable[[str], WorkerProcs], exec_log: Path
) -> None:
    procs = workers(db_url)
    for _ in range(2):
        procs.start(APP, concurrency=4, lease=5.0, poll=10.0)  # polls far apart: only wake-ups
    wait_until(lambda: len(client.list_workers()) >= 2, 30, "workers to start")
    full = enqueue_limited(client, [("slow", i, 1.0) for i in range(4)])
    others = enqueue_limited(client, [("quick", i, 0.0) for i in range(3)])
    wait_until(all_final(client, full + others), 60, "every run to end")
    runs = {str(r.id): r for r in client.list_runs(limit=1000)}
    check_limit(runs, "faults.limited", 2, _key)
    slow = sorted((runs[i] for i in full), key=lambda r: r.started_at)  # type: ignore[arg-type, return-value]
    assert max(r.finished_at for r in (runs[i] for i in others)) < slow[2].started_at  # type: ignore[operator]
    # the third slow run started as soon as one of the first two ended, not at a poll
    ended = sorted(r.finished_at for r in slow[:2])  # type: ignore[type-var]
    assert (slow[2].started_at - ended[0]).total_seconds() < 1.0  # type: ignore[operator]


def test_a_rate_holds_under_concurrent_claims_of_several_workers(
    db_url: str, client: rota.App, workers: Callable[[str], WorkerProcs], exec_log: Path
) -> None:
    ids = enqueue_rated(client, [(i, 0.0) for i in range(12)])
    procs = workers(db_url)
    for _ in range(3):
        procs.start(APP, concurrency=4, lease=LEASE, poll=0.1)
    t0 = time.monotonic()
    wait_until(all_final(client, ids), 60, "every run to end")
    runs = check_invariants(client, exec_log, enqueued=ids)
    started = check_rate(runs, "faults.rated", 3, 1.0)
    assert len(started) == 12 and time.monotonic() - t0 >= 3.0  # 12 starts at 3 a second
    assert all(len(attempt_intervals(runs[i])) == 1 for i in ids)  # waiting cost no attempt


def test_a_killed_worker_holds_its_limited_slot_until_the_rescue_then_it_frees_once(
    db_url: str, client: rota.App, workers: Callable[[str], WorkerProcs], exec_log: Path
) -> None:
    first = enqueue_limited(client, [("k", 0, 2.0), ("k", 1, 2.0)])  # limit 2 per key
    later = enqueue_limited(client, [("k", 2, 0.0)])  # waits for a slot
    procs = workers(db_url)
    victim = procs.start(APP, concurrency=4, lease=LEASE, poll=0.1)
    wait_until(lambda: starts(exec_log) >= 2, 30, "both slots to be taken")
    procs.kill9(victim)
    procs.start(APP, concurrency=4, lease=LEASE, poll=0.1)
    wait_until(all_final(client, first + later), 60, "every run to end")
    runs = check_invariants(client, exec_log, enqueued=first + later, leases_lost=True)
    lost = [a for i in first for a in runs[i].history if a.get("status") == "lost"]
    assert len(lost) == 2  # both were rescued (their slots held until then)
    rescued_at = min(attempt_intervals(runs[i])[0][1] for i in first)
    assert runs[later[0]].started_at.timestamp() >= rescued_at  # type: ignore[union-attr]
    check_limit(runs, "faults.limited", 2, _key)


def test_runs_rota_trigger_makes_in_another_process_hold_the_limit_across_workers(
    db_url: str, client: rota.App, workers: Callable[[str], WorkerProcs], exec_log: Path
) -> None:
    """`rota trigger` (a process that does not declare the task) makes the runs: they carry
    the limit the workers stored at start, so at most 2 of key "a" run at once."""
    import subprocess
    import sys

    procs = workers(db_url)
    for _ in range(2):
        procs.start(APP, concurrency=4, lease=LEASE, poll=0.1)
    wait_until(lambda: len(client.list_workers()) >= 2, 30, "workers to start")
    client.add_schedule("fl", "faults.limited", every=3600, args=["a", 0, 2.0], overlap="concurrent")
    for _ in range(6):
        done = subprocess.run(
            [sys.executable, "-m", "rota", "--database-url", db_url, "trigger", "fl"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    ids = [r.id for r in client.list_runs(schedule="fl")]
    assert len(ids) == 6
    wait_until(all_final(client, ids), 60, "every run to end")
    runs = {str(r.id): r for r in client.list_runs(limit=1000)}  # manual runs: no ticks to check
    assert {runs[i].status for i in ids} == {"succeeded"}
    most = check_limit(runs, "faults.limited", 2, _key)
    assert most == {"a": 2}  # reached, never passed


def test_a_partitioned_holder_of_limited_slots_is_fenced_off_and_each_slot_frees_once(
    server_url: str,
    server_client: rota.App,
    proxies: Callable[..., FaultProxy],
    workers: Callable[[str], WorkerProcs],
    exec_log: Path,
) -> None:
    """Worker A (behind a proxy) holds both slots of key "p" (limit 2) with runs longer
    than its lease, then its network goes dark. Worker B rescues them when the lease ends
    (their slots free at the rescue, once), runs them again and the key's waiting runs: by
    the database's intervals never more than 2 at once. A's handlers end while it is cut
    off; back on the network, their results are refused (fenced off) and free nothing."""
    proxy = proxies(url=server_url)
    cut_off, healthy = workers(proxy.url(server_url)), workers(server_url)
    first = enqueue_limited(server_client, [("p", 0, 2 * LEASE), ("p", 1, 2 * LEASE)])
    cut_off.start(APP, concurrency=4, lease=LEASE, poll=0.1)
    wait_until(lambda: starts(exec_log) >= 2, 30, "both slots to be taken")
    later = enqueue_limited(server_client, [("p", i, 0.2) for i in range(2, 6)])
    proxy.blackhole()
    healthy.start(APP, concurrency=4, lease=LEASE, poll=0.1)
    wait_until(all_final(server_client, first + later), 60, "every run to end")
    wait_until(lambda: ends(exec_log) >= 8, 30, "the cut-off handlers to return")
    proxy.restore()  # A writes its late results now: refused, as its leases were taken
    time.sleep(2 * LEASE)
    runs = check_invariants(server_client, exec_log, enqueued=first + later, leases_lost=True)
    assert {runs[i].status for i in first + later} == {"succeeded"}
    assert [runs[i].history[0].get("status") for i in first] == ["lost", "lost"]  # rescued, then run again
    rescued_at = min(attempt_intervals(runs[i])[0][1] for i in first)
    assert min(runs[i].started_at.timestamp() for i in later) >= rescued_at  # type: ignore[union-attr]
    assert check_limit(runs, "faults.limited", 2, _key) == {"p": 2}
    limits = [(i.name, i.running, i.waiting) for i in server_client.store.list_limits()]  # type: ignore[attr-defined]
    assert limits == [("faults.limited", 0, 0)]
