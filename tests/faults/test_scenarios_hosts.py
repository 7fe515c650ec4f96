"""Hosts that stop answering (PostgreSQL, MySQL/MariaDB): one host partitioned (its own network namespace, veth down)
while two others keep working; a host frozen mid-transaction (its traffic held right after
it sent a tick's insert) while the others keep ticking and claiming."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import rota

from ..procs import WorkerProcs, wait_until
from .conftest import APP, all_final, enqueue_rec, settle_schedule, starts
from .invariants import check_invariants
from .netns import Host
from .proxy import FaultProxy

LEASE = 2.0
# advance_schedule's text, the tick's last statement before COMMIT (PostgreSQL's parameters are
# $n; MySQL's are inlined by the client: the update's own words)
ADVANCE = {"postgres": b"skip_count <= 9223372036854775807 - $", "mysql": b"skip_count <= 9223372036854775807 - "}


def started_by(exec_log: Path) -> dict[str, set[int]]:
    """Run id -> pids that started it."""
    found: dict[str, set[int]] = {}
    for line in exec_log.read_text().splitlines() if exec_log.exists() else []:
        event = json.loads(line)
        if event["event"] == "start":
            found.setdefault(event["run"], set()).add(event["pid"])
    return found


def test_partitioned_host_is_fenced_and_its_runs_rescued_while_two_others_work(
    server_url: str, server_client: rota.App, hosts: Callable[[int, str], Host], exec_log: Path
) -> None:
    trio = [hosts(n, server_url) for n in range(3)]
    name = f"part_{uuid.uuid4().hex[:6]}"
    server_client.add_schedule(name, "faults.rec", every=1, args=[0, 0.3], overlap="skip")
    ids = enqueue_rec(server_client, 36, seconds=1.0)
    for host in trio:
        host.start_worker(APP, concurrency=3, lease=LEASE)
    victim = trio[0].procs.procs[0].pid
    wait_until(lambda: any(victim in pids for pids in started_by(exec_log).values()), 30, "host 0 to start runs")
    trio[0].partition()
    partitioned = {run for run, pids in started_by(exec_log).items() if victim in pids}
    time.sleep(LEASE * 3)
    trio[0].heal()
    wait_until(all_final(server_client, ids), 60, "every run to end")
    until = settle_schedule(server_client, name)
    runs = check_invariants(server_client, exec_log, enqueued=ids, leases_lost=True, until=until)
    assert {runs[i].status for i in ids} == {"succeeded"}
    rescued = [r for r in runs.values() if any(a.get("worker", "").startswith("rota-host0:") for a in r.history)]
    assert rescued, f"no run of the partitioned host was rescued (it had started {sorted(partitioned)})"
    for run in rescued:
        assert run.worker is not None and not run.worker.startswith("rota-host0:"), run


def test_host_frozen_mid_tick_does_not_stall_the_other_hosts(
    server_url: str,
    server_client: rota.App,
    proxies: Callable[..., FaultProxy],
    workers: Callable[[str], WorkerProcs],
    exec_log: Path,
) -> None:
    """Host A's traffic is held right after it sends the insert of a tick (its transaction
    stays open, the row lock held). B and C keep ticking another schedule and start a task
    enqueued meanwhile within a few polls, not after A is healed."""
    proxy = proxies(url=server_url)
    frozen = workers(proxy.url(server_url))
    others = workers(server_url)
    frozen.start(APP, concurrency=2, lease=LEASE, poll=0.1)
    wait_until(lambda: "started" in frozen.output(0), 30, "host A to start")
    stuck, ticking = f"frozen_{uuid.uuid4().hex[:6]}", f"ticking_{uuid.uuid4().hex[:6]}"
    proxy.hold_after(stuck.encode())
    server_client.add_schedule(stuck, "faults.rec", every=1, args=[0])
    assert proxy.triggered.wait(15), "host A never sent the tick's insert"
    server_client.add_schedule(ticking, "faults.rec", every=1, args=[1])
    for _ in range(2):
        others.start(APP, concurrency=2, lease=LEASE, poll=0.1)
    wait_until(lambda: all("started" in out for out in others.outputs()), 30, "hosts B and C to start")
    before = starts(exec_log)
    (late,) = enqueue_rec(server_client, 1, start=500)
    enqueued_at = time.monotonic()
    time.sleep(3.5)  # a window in which B and C must claim the task and tick a few times
    waited = time.monotonic() - enqueued_at
    started = late in started_by(exec_log)
    ticked = starts(exec_log) - before
    proxy.restore()
    assert started, f"the other hosts stalled behind the frozen one ({ticked} execution(s) in {waited:.1f} s)"
    assert ticked >= 3, f"the other hosts ran only {ticked} execution(s) in {waited:.1f} s while A was frozen"
    wait_until(all_final(server_client, [late]), 30, "the late task to end")
    settle_schedule(server_client, ticking)
    until = settle_schedule(server_client, stuck)
    check_invariants(server_client, exec_log, enqueued=[late], leases_lost=False, until=until)


def test_host_frozen_mid_tick_does_not_delay_that_schedules_later_ticks(
    server_url: str, server_client: rota.App, hosts: Callable[[int, str], Host], exec_log: Path
) -> None:
    """Three hosts, an every-second schedule, 2 s lease, 0.3 s poll. Host A is frozen right
    after it sent a tick's statements, before COMMIT (its transaction open, the tick's row
    and the schedule's row locked). Its session is ended after tick_idle_timeout (1 s), so B and C make
    that tick and the later ones on time while A stays frozen; every tick runs once.
    (overlap="queue": the held tick and the next may come due in one pass; under "skip" the
    next would be recorded skipped behind the held one, as for any catch-up.)"""
    trio = [hosts(n, server_url) for n in range(3)]
    name = f"held_{uuid.uuid4().hex[:6]}"
    frozen = trio[0]
    assert frozen.proxy is not None
    frozen.start_worker(APP, concurrency=2, poll=0.3, lease=LEASE)
    wait_until(lambda: "started" in frozen.procs.output(0), 30, "host A to start")
    # advance_schedule, the tick's last statement before COMMIT (A has no other schedule)
    frozen.proxy.hold_after(ADVANCE["postgres" if server_url.startswith("postgres") else "mysql"])
    server_client.add_schedule(name, "faults.rec", every=1, args=[0], overlap="queue")
    assert frozen.proxy.triggered.wait(15), "host A never sent the tick's insert"
    held_at = time.time()
    for host in trio[1:]:
        host.start_worker(APP, concurrency=2, poll=0.3, lease=LEASE)
    wait_until(lambda: all("started" in host.procs.output(0) for host in trio[1:]), 30, "hosts B and C to start")
    ready = time.time()
    time.sleep(6.0)  # A stays frozen: B and C must keep the schedule on time meanwhile
    frozen_until = time.time()
    frozen.proxy.restore()
    until = settle_schedule(server_client, name)
    runs = check_invariants(server_client, exec_log, leases_lost=False, until=until)
    ticks = sorted((r for r in runs.values() if r.schedule == name), key=lambda r: r.scheduled_for)
    by_tick: dict[float, list[rota.Run]] = {}
    for run in ticks:
        if (run.error or {}).get("type") != "Withdrawn":
            by_tick.setdefault(run.scheduled_for.timestamp(), []).append(run)
    assert all(len(rows) == 1 for rows in by_tick.values()), {t: [r.status for r in rs] for t, rs in by_tick.items()}
    held = min(t for t in by_tick if t >= held_at - 1.0)
    assert by_tick[held][0].status == "succeeded", by_tick[held][0]  # the held tick ran, once
    window = [rows[0] for t, rows in by_tick.items() if held <= t <= frozen_until]
    odd = [(r.scheduled_for.isoformat(), r.status, r.error) for r in window if r.status != "succeeded"]
    assert window and not odd, odd
    # Once B and C are up and A's transaction is ended, the ticks run on time while A is frozen.
    late = {
        r.scheduled_for.isoformat(): round(r.started_at.timestamp() - r.scheduled_for.timestamp(), 2)
        for r in window
        if r.started_at is not None and ready + 2.0 <= r.scheduled_for.timestamp() <= frozen_until
    }
    assert len(late) >= 3, late
    assert max(late.values()) < 1.5, f"ticks late while host A was frozen: {late}"
