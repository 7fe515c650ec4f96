"""Failover to a streaming replica, with real servers started by the test (tests/pg_cluster.py,
on ports of their own; the shared server is never touched): a synchronous replica promoted
after the primary is stopped hard, and a demoted primary that stays up read-only."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import rota
from rota.errors import DatabaseError

from .. import pg_cluster
from ..conftest import make_app
from ..procs import WorkerProcs, wait_until
from .conftest import APP, all_final, enqueue, enqueue_rec, no_tracebacks, starts
from .invariants import check_invariants, read_log

LEASE = 3.0
POLL = 10.0  # long: a run that starts quickly after the switch was woken, not polled


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[pg_cluster.Cluster]:
    why = pg_cluster.problem()
    if why:
        pytest.skip(why)
    with pg_cluster.Cluster.start(synchronous=True) as made:
        yield made


def enqueue_until(client: rota.App, stop: threading.Event, acknowledged: list[str]) -> None:
    """Enqueue one run every 50 ms until `stop`; the ids the database acknowledged."""
    i = 1000
    while not stop.is_set():
        with contextlib.suppress(DatabaseError):  # not acknowledged: the caller may try again
            acknowledged += enqueue_rec(client, 1, start=i)
        i += 1
        stop.wait(0.05)


def pickup(client: rota.App, exec_log: Path, timeout: float = 30) -> float:
    """Seconds from an enqueue to the start of its run (a wake-up, or the poll POLL s later)."""
    began = time.time()
    (run_id,) = retried(lambda: enqueue_rec(client, 1, start=9999))
    wait_until(lambda: run_id in read_log(exec_log).starts, timeout, "the new run to start")
    started = min(json.loads(line)["t"] for line in exec_log.read_text().splitlines() if f'"{run_id}"' in line)
    return float(started - began)


def retried(call: Callable[[], list[str]], timeout: float = 30) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except DatabaseError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_hard_stop_then_promotion_keeps_every_acknowledged_run(
    cluster: pg_cluster.Cluster, workers: Callable[[str], WorkerProcs], exec_log: Path
) -> None:
    """A multi-host URL with target_session_attrs=read-write; the primary stopped hard (no
    shutdown, sockets cut) and the synchronous replica promoted while two workers run and a
    producer enqueues: every worker reconnects, wake-ups resume and every acknowledged run
    succeeds."""
    url = cluster.url()
    client = make_app(url)
    client.migrate()
    procs = workers(url)
    procs.env.update(ROTA_TEST_POLL=str(POLL), ROTA_TEST_LEASE=str(LEASE))
    for _ in range(2):
        procs.start(APP, concurrency=4, lease=LEASE, poll=POLL)
    ids = enqueue_rec(client, 40, seconds=0.1)
    stop, acknowledged = threading.Event(), []
    producer = threading.Thread(target=enqueue_until, args=(client, stop, acknowledged))
    producer.start()
    try:
        wait_until(lambda: starts(exec_log) >= 12, 60, "runs to start")
        cluster.primary.stop("immediate")
        cluster.replica.promote()
        time.sleep(2.0)
    finally:
        stop.set()
        producer.join()
    wait_until(all_final(client, ids + acknowledged), 90, "every acknowledged run to end")
    waited = pickup(client, exec_log)
    runs = check_invariants(client, exec_log, enqueued=ids + acknowledged, leases_lost=True)
    assert {runs[i].status for i in ids + acknowledged} == {"succeeded"}
    assert waited < POLL / 2, f"a run enqueued after the failover waited {waited:.2f} s (poll {POLL} s)"
    assert all(p.poll() is None for p in procs.procs)
    no_tracebacks(procs)
    client.close()


def test_a_demoted_primary_left_read_only_is_never_written_to(
    cluster: pg_cluster.Cluster, workers: Callable[[str], WorkerProcs], exec_log: Path
) -> None:
    """The old primary stays up, read-only (as a demoted primary behind a stale address
    would be): the worker's pooled sessions on it get SQLSTATE 25006. They are dropped, not
    handed back: new ones follow the URL to the new primary, and the runs enqueued there
    start (woken: the listener moves too) and succeed."""
    url = cluster.url()
    client = make_app(url)
    client.migrate()
    procs = workers(url)
    procs.env.update(ROTA_TEST_POLL=str(POLL), ROTA_TEST_LEASE=str(LEASE))
    procs.start(APP, concurrency=4, lease=LEASE, poll=POLL)
    before = enqueue_rec(client, 4)
    handled = enqueue(client, "faults.tx", [[i] for i in range(4)])  # handler connections, idle after
    wait_until(all_final(client, before + handled), 60, "the first runs to end")
    client.close()
    cluster.primary.sql("ALTER SYSTEM SET default_transaction_read_only = on")
    cluster.primary.sql("SELECT pg_reload_conf()")  # every session there, the worker's too
    cluster.wait_replayed()
    cluster.replica.promote()
    client = make_app(url)  # new connections: the read-write server only
    later = retried(lambda: enqueue_rec(client, 8, seconds=0.1, start=100))
    wait_until(all_final(client, later), 60, "the runs enqueued on the new primary to end")
    for batch in range(3):  # the worker's sessions on the old primary would fail these again
        later += enqueue_rec(client, 8, seconds=0.1, start=200 + 10 * batch)
        wait_until(all_final(client, later), 60, "the next runs to end")
        time.sleep(1.0)
    handled = enqueue(client, "faults.tx", [[i] for i in range(10, 18)])
    wait_until(all_final(client, handled), 60, "the transactional runs to end")
    runs = check_invariants(client, exec_log, enqueued=before + later + handled, leases_lost=True)
    assert {runs[i].status for i in later + handled} == {"succeeded"}
    assert {runs[i].attempt for i in handled} == {1}, "a transactional handler used a session of the old primary"
    output = procs.output(0)
    # one outage as the pool moves (two if a second call was already on its way), not a
    # flapping worker that fails every call landing on a session of the old primary
    assert output.count("read-only transaction") <= 2, output[-3000:]
    assert "LISTEN connection is on a read-only server" in output, output[-3000:]
    assert procs.procs[0].poll() is None
    no_tracebacks(procs)
    client.close()
