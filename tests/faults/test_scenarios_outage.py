"""Outages between workers and PostgreSQL or MySQL/MariaDB, through a TCP proxy: the
worker's own outage longer than the lease, and a database "restart" (every backend
terminated, then new connections blackholed for a while). The shared server itself is never
restarted (test_mysql_restart.py restarts a MariaDB server of its own)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import rota

from ..procs import WorkerProcs, wait_until
from .conftest import APP, all_final, end_sessions, enqueue_rec, starts, tagged
from .invariants import check_invariants, read_log
from .proxy import FaultProxy

LEASE = 2.0
# What a claim that took runs sends last before its COMMIT, per store: the token sequence
# (PostgreSQL), the token counter's update (MySQL: the plain claim's and the flow claim's).
# A claim's statement (MySQL: the claim's UPDATE, plain or flow; its tokens come from the token
# connection, committed on their own, unless the claim holds the counter already)
CLAIM_TOKENS = {"postgres": b"rota_token_seq", "mysql": b"status = 'running', "}


def dialect(url: str) -> str:
    return "postgres" if url.startswith("postgres") else "mysql"


def test_own_outage_longer_than_the_lease_keeps_the_workers_runs_and_results(
    server_url: str,
    server_client: rota.App,
    proxies: Callable[..., FaultProxy],
    workers: Callable[[str], WorkerProcs],
    exec_log: Path,
) -> None:
    """One worker, cut off for 2.5 leases: 3 runs finish during the outage, 3 are still
    running when it reconnects. It renews its own leases, writes the results, and nothing
    runs twice or is marked lost."""
    proxy = proxies(url=server_url)
    procs = workers(proxy.url(server_url))
    ids = enqueue_rec(server_client, 3, seconds=1.0) + enqueue_rec(server_client, 3, seconds=LEASE * 2.5 + 6.0, start=3)
    procs.start(APP, concurrency=8, lease=LEASE, poll=0.1)
    wait_until(lambda: starts(exec_log) >= 6, 30, "the six runs to start")
    proxy.cut()
    time.sleep(LEASE * 2.5)
    later = enqueue_rec(server_client, 4, start=100)  # enqueued while the worker is away
    proxy.restore()
    wait_until(all_final(server_client, ids + later), 30, "every run to end")
    runs = check_invariants(server_client, exec_log, enqueued=ids + later, leases_lost=False)
    assert all(runs[i].status == "succeeded" and runs[i].attempt == 1 for i in ids + later)
    assert procs.procs[0].poll() is None
    assert "database is back" in procs.output(0)


def test_database_restart_loses_no_run_to_missed_heartbeats(
    server_url: str,
    server_client: rota.App,
    proxies: Callable[..., FaultProxy],
    workers: Callable[[str], WorkerProcs],
    exec_log: Path,
) -> None:
    """Two workers; every rota backend is terminated and new connections hang for 2.5 leases
    (a server restart as the workers see it). Runs whose owners come back are kept, not
    failed or re-run because nobody could heartbeat meanwhile."""
    proxy = proxies(url=server_url)
    name = f"rota_faults_{uuid.uuid4().hex[:8]}"
    procs = workers(tagged(proxy.url(server_url), name))
    ids = enqueue_rec(server_client, 30, seconds=0.8)
    for _ in range(2):
        procs.start(APP, concurrency=4, lease=LEASE, poll=0.1)
    wait_until(lambda: starts(exec_log) >= 8, 30, "eight runs to start")
    assert end_sessions(server_url, name, proxy) > 0  # (first: MySQL's are found by the proxy's open connections)
    proxy.blackhole()
    time.sleep(LEASE * 2.5)
    proxy.restore()
    wait_until(all_final(server_client, ids), 60, "every run to end")
    runs = check_invariants(server_client, exec_log, enqueued=ids, leases_lost=False)
    assert {runs[i].status for i in ids} == {"succeeded"}
    assert all(p.poll() is None for p in procs.procs)


def test_a_claim_whose_reply_is_lost_gives_its_runs_back_and_none_is_rescued_as_lost(
    server_url: str,
    server_client: rota.App,
    proxies: Callable[..., FaultProxy],
    workers: Callable[[str], WorkerProcs],
    exec_log: Path,
) -> None:
    """The worker's connection is cut after its claim committed, before the reply reached it
    (the proxy forwards the claim, holds its answer, then cuts). Back online, the worker gives
    that claim's runs back as they were: none is rescued a lease later as lost from this live
    worker, each ends succeeded with as many attempts as its handler started."""
    proxy = proxies(url=server_url)
    procs = workers(proxy.url(server_url))
    procs.env["ROTA_TEST_LEASE"] = "5"  # the worker is back well within it (the rescue's case is a longer outage)
    procs.start(APP, concurrency=4, lease=5.0, poll=0.1)
    warm = enqueue_rec(server_client, 1, start=100)  # the worker's first claims are behind it: idle now
    wait_until(all_final(server_client, warm), 30, "the first run to end")
    time.sleep(0.5)
    # the claim and its transaction's COMMIT (the faults app has limits: the flow claim's
    # pipelined transaction) reach the server; from then on its answers wait
    proxy.hold_replies_after(CLAIM_TOKENS[dialect(server_url)], b"COMMIT")
    ids = enqueue_rec(server_client, 6, seconds=0.2)
    assert proxy.triggered.wait(15), "the worker never sent a claim"
    wait_until(lambda: any(r.status == "running" for r in server_client.list_runs()), 10, "the claim to commit")
    proxy.cut()  # its reply never reaches the worker
    time.sleep(0.5)
    proxy.restore()
    wait_until(all_final(server_client, ids), 30, "every run to end")
    runs = check_invariants(server_client, exec_log, enqueued=warm + ids, leases_lost=False)
    started = read_log(exec_log).starts
    assert {i: (runs[i].status, runs[i].attempt) for i in ids} == {i: ("succeeded", len(started[i])) for i in ids}
    assert "a claim's reply was lost" in procs.output(0)
    assert procs.procs[0].poll() is None
