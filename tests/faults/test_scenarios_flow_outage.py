"""Flow control through a database outage (issue 20): limited, rated and dependent runs on
two workers (PostgreSQL, MySQL/MariaDB) while every rota session is ended and new connections hang for 2.5 leases
(a server restart as the workers see it), through a TCP proxy. What the docs promise: a
limited run keeps its slot through the outage, nothing is failed or re-run for want of
heartbeats, the limit and the rate hold from the database's started_at/finished_at, and the
parents' results written after the outage release their dependent, which starts once, after
every parent's success."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import rota
from rota.stores.base import NewRun

from ..procs import WorkerProcs, wait_until
from .conftest import APP, all_final, end_sessions, enqueue_rec, starts, tagged
from .invariants import check_invariants, check_limit, check_rate
from .proxy import FaultProxy
from .test_scenarios_limits import enqueue_limited, enqueue_rated

LEASE = 2.0


def _flow(client: rota.App) -> tuple[list[str], list[str], list[str], str]:
    """Limited runs on two keys, rated runs, and a fan-in of 6 parents; their ids."""
    limited = enqueue_limited(client, [(k, i, 0.6) for i in range(6) for k in ("a", "b")])
    rated = enqueue_rated(client, [(100 + i, 0.1) for i in range(8)])
    parents = enqueue_rec(client, 6, seconds=1.5, start=200)
    child = NewRun(task="faults.rec", args=json.dumps([-1, 0]), max_attempts=21, after=tuple(map(int, parents)))
    ((child_id, _),) = client.store.insert_runs([child])
    return limited, rated, parents, str(child_id)


def test_limits_rates_and_dependents_hold_through_a_database_restart(
    server_url: str,
    server_client: rota.App,
    proxies: Callable[..., FaultProxy],
    workers: Callable[[str], WorkerProcs],
    exec_log: Path,
) -> None:
    limited, rated, parents, child = _flow(server_client)
    proxy = proxies(url=server_url)
    name = f"rota_faults_{uuid.uuid4().hex[:8]}"
    procs = workers(tagged(proxy.url(server_url), name))
    for _ in range(2):
        procs.start(APP, concurrency=6, lease=LEASE, poll=0.1)
    wait_until(lambda: starts(exec_log) >= 8, 30, "limited, rated and parent runs to start")
    assert end_sessions(server_url, name, proxy) > 0  # (first: MySQL's are found by the proxy's connections)
    proxy.blackhole()
    time.sleep(LEASE * 2.5)
    proxy.restore()
    ids = [*limited, *rated, *parents, child]
    wait_until(all_final(server_client, ids), 90, "every run to end")
    runs = check_invariants(server_client, exec_log, enqueued=ids, leases_lost=False)
    assert {runs[i].status for i in ids} == {"succeeded"}
    assert all(runs[i].attempt == 1 for i in ids), "a run was retried for want of heartbeats"
    most = check_limit(runs, "faults.limited", 2, lambda run: run.args[0])
    assert max(most.values()) == 2  # the limit was reached, not just respected by idleness
    check_rate(runs, "faults.rated", 3, 1.0)
    done = runs[child]
    assert all(done.started_at >= runs[p].finished_at for p in parents)  # type: ignore[operator]
    assert [(i.running, i.waiting) for i in server_client.store.list_limits()] == [(0, 0)]  # type: ignore[attr-defined]
    assert all(p.poll() is None for p in procs.procs)
