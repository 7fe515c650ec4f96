"""A MariaDB server restarted under running workers: a server of the module's own
(tests/maria_server.py, on a port of its own: the shared server on 3306 is never touched),
killed with SIGKILL (a crash: InnoDB's crash recovery at the next start) or stopped cleanly,
and started again 2.5 leases later. What DESIGN promises for the database down for everybody:
nobody's runs are failed or run again for want of heartbeats, the workers keep their runs,
write the results they kept, log "database is back" and go on; every run ends once."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import rota

from .. import maria_server
from ..conftest import IN_CI, make_app
from ..procs import WorkerProcs, wait_until
from .conftest import APP, all_final, enqueue_rec, no_tracebacks, starts
from .invariants import check_invariants

pytestmark = pytest.mark.mysql
LEASE = 2.0


@pytest.fixture(scope="module")
def server() -> Iterator[maria_server.Server]:
    why = maria_server.problem()
    if why:
        if IN_CI:
            pytest.fail(f"CI=true but a MariaDB server of the tests' own cannot start: {why}", pytrace=False)
        pytest.skip(why)
    with maria_server.Server.start() as made:
        yield made


def up(server: maria_server.Server) -> None:
    """The server running again for the module's next test, whatever this one left."""
    if not server.answers():
        server.kill9()
        server.run()


@pytest.fixture
def own_url(server: maria_server.Server) -> str:
    """An empty database of this test's own on the module's server."""
    name = f"rota_t_{uuid.uuid4().hex[:12]}"
    server.sql(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    return server.url().rpartition("/")[0] + f"/{name}"


@pytest.mark.parametrize("how", ["kill9", "stop"])
def test_workers_keep_their_runs_through_a_server_restart(
    how: str, server: maria_server.Server, own_url: str, tmp_path: Path, exec_log: Path
) -> None:
    """Two workers, 40 runs of 0.3 s; the server is killed (or stopped) while runs are
    held and running, stays down for 2.5 leases, and starts again. Every run ends
    succeeded at its first attempt, executed once; both workers say the database is back."""
    client = make_app(own_url)
    procs = WorkerProcs(own_url, tmp_path)
    procs.env["ROTA_TEST_LOG"] = str(exec_log)
    try:
        client.prepare()
        ids = enqueue_rec(client, 40, seconds=0.3)
        for _ in range(2):
            procs.start(APP, concurrency=4, lease=LEASE, poll=0.1)
        wait_until(lambda: starts(exec_log) >= 10, 30, "ten runs to start")
        server.kill9() if how == "kill9" else server.stop()
        time.sleep(LEASE * 2.5)
        server.run()
        client.store.close()  # the test's own connections broke too
        wait_until(all_final(client, ids), 60, "every run to end")
        runs = check_invariants(client, exec_log, enqueued=ids, leases_lost=False)
        assert {(runs[i].status, runs[i].attempt) for i in ids} == {("succeeded", 1)}
        assert all(p.poll() is None for p in procs.procs)
        assert all("database is back" in output for output in procs.outputs())
    finally:
        procs.stop_all()
        client.close()
        up(server)
    no_tracebacks(procs)


def test_a_worker_started_while_the_server_is_down_starts_when_it_is_back(
    server: maria_server.Server, own_url: str, tmp_path: Path, exec_log: Path
) -> None:
    """A worker that starts during the restart waits (one warning) instead of exiting,
    and runs what is due once the server answers."""
    client: rota.App = make_app(own_url)
    procs = WorkerProcs(own_url, tmp_path)
    procs.env["ROTA_TEST_LOG"] = str(exec_log)
    try:
        client.prepare()
        ids = enqueue_rec(client, 5)
        server.kill9()
        proc = procs.start(APP, concurrency=2, lease=LEASE, poll=0.1)
        wait_until(lambda: "until it can start" in procs.output(0) or proc.poll() is not None, 30, "the warning")
        server.run()
        client.store.close()
        wait_until(all_final(client, ids), 60, "every run to end")
        assert proc.poll() is None, procs.output(0)[-3000:]
        check_invariants(client, exec_log, enqueued=ids, leases_lost=False)
    finally:
        procs.stop_all()
        client.close()
        up(server)
    no_tracebacks(procs)
