"""Nothing lost: real processes killed with SIGKILL, stopped with SIGTERM, cut off from the
database. These are the failure modes listed at the top of DESIGN.md."""

from __future__ import annotations

import collections
import os
import random
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import rota
from rota.stores.base import NewRun

from .conftest import IN_CI, MYSQL, THROUGH_BOUNCER, make_app, start_worker, store_url
from .procs import WorkerProcs, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(params=[*THROUGH_BOUNCER, MYSQL])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Each test here once per store (MySQL/MariaDB too), and once more through a transaction-mode PgBouncer."""
    yield from store_url(request, tmp_path)


def log_lines(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "executions.log"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def enqueue(
    app: rota.App,
    task: str,
    calls: list[tuple[tuple[object, ...], dict[str, object]]],
    **opts: object,
) -> list[int]:
    import json

    runs = [
        NewRun(task=task, args=json.dumps(list(a)), kwargs=json.dumps(k), max_attempts=101, **opts) for a, k in calls
    ]  # type: ignore[arg-type]
    return [run_id for run_id, _ in app.store.insert_runs(runs)]


def test_chaos_kill9_random_workers_loses_nothing(db_url: str, procs: WorkerProcs, tmp_path: Path) -> None:
    """4 workers, 1,000 runs of random short durations, a random worker kill -9'd about
    every second and replaced, until all are done."""
    rng = random.Random(20261129)
    app = make_app(db_url)
    enqueue(app, "chaos", [((i, round(rng.uniform(0.05, 1.0), 3)), {}) for i in range(1000)])
    lease = 1.5
    for _ in range(4):
        procs.start(concurrency=4, lease=lease)
    kills = 0
    deadline = time.monotonic() + 240
    while app.store.count_by_status().get("succeeded", 0) < 1000:
        assert time.monotonic() < deadline, f"not done: {app.store.count_by_status()}"
        time.sleep(rng.uniform(0.6, 1.4))
        alive = procs.alive()
        if app.store.count_by_status().get("succeeded", 0) < 950 and alive:
            procs.kill9(rng.choice(alive))
            kills += 1
            procs.start(concurrency=4, lease=lease)
    assert kills >= 20
    for proc in procs.alive():
        procs.terminate(proc)

    runs = {int(r.id): r for r in app.list_runs(limit=1000)}
    assert len(runs) == 1000 and {r.status for r in runs.values()} == {"succeeded"}
    lines = log_lines(tmp_path)
    starts = collections.Counter((int(f[1]), int(f[3])) for f in lines if f[0] == "start")
    # A claim may die before its handler starts. A worker may also die in the moment between
    # starting a held run and writing that start (docs/concepts/lifecycle.md, kill -9): the run
    # is pending again without an attempt, and its handler starts once more under a new token,
    # with the same attempt number. So no handler starts twice under one token, or with an
    # attempt number its run has not counted.
    assert max(starts.values()) == 1, [key for key, n in starts.items() if n > 1]
    highest_start: dict[int, int] = {}
    for f in lines:
        if f[0] == "start":
            highest_start[int(f[1])] = max(highest_start.get(int(f[1]), 0), int(f[2]))
    ends = collections.Counter((int(f[1]), int(f[3])) for f in lines if f[0] == "end")
    lost_any = 0
    for run_id, run in runs.items():
        # The stored result came from the attempt that holds the run's current token.
        assert run.result == {"i": run.args[0], "token": run.token}, run
        assert ends[(run_id, run.token)] == 1
        # Attempts add up: every attempt before the last was lost to a kill, none failed (a
        # held run's loss is in the history too, marked held: it counted no attempt).
        lost = [a for a in run.history if a["status"] == "lost" and not a.get("held")]
        assert run.attempt == len(lost) + 1, run
        assert all("was lost" in a["error"]["message"] for a in lost)
        assert highest_start[run_id] <= run.attempt, run
        lost_any += bool(lost)
    assert lost_any >= 5  # the kills did hit running work
    app.close()


def test_sigterm_drains_then_ends_the_process_and_another_worker_takes_over_within_the_fence(
    db_url: str, procs: WorkerProcs, tmp_path: Path
) -> None:
    """Handlers that outlive the drain (threads: they cannot be stopped) are not handed back
    while they can still run (issue 41, item 1): the worker ends its process after fencing
    their leases to 2 s, and another worker takes them then, not after the 30 s lease."""
    app = make_app(db_url)
    a = procs.start(concurrency=2, lease=30, shutdown_timeout=1.0)
    ids = enqueue(app, "chaos", [((i, 20.0), {}) for i in range(2)] + [((9, 0.2), {})])
    wait_until(
        lambda: len([f for f in log_lines(tmp_path) if f[0] == "start"]) >= 2,
        30,
        "two long runs to start on A",
    )
    procs.start(concurrency=2, lease=30)  # B
    wait_until(lambda: len([w for w in app.list_workers() if w.alive]) == 2, 30, "B to register")
    took = procs.terminate(a)
    assert a.returncode == 0
    assert took < 1.0 + 3.0, f"SIGTERM took {took:.1f} s with shutdown_timeout=1"
    ended_at = time.monotonic()
    wait_until(lambda: len([f for f in log_lines(tmp_path) if f[0] == "start" and int(f[1]) in ids[:2]]) >= 4, 15,
               "B to restart both runs")  # fmt: skip
    assert time.monotonic() - ended_at < 8  # after the 2 s fence, not the 30 s lease
    for run_id in ids[:2]:
        run = app.get_run(run_id)
        assert run.status == "running" and run.attempt == 2  # the stopped attempt counted, as after a crash
        assert run.history[-1]["status"] == "lost" and run.history[-1]["error"]["type"] == "WorkerStopped", run
    still = re.findall(r"run (\d+) chaos still running at shutdown", procs.output(0))
    assert sorted(int(i) for i in still) == sorted(ids[:2]), procs.output(0)  # event run_still_running
    assert " chaos handed back:" not in procs.output(0)
    app.close()


def test_kill9_holder_is_rescued_within_lease_plus_a_poll(db_url: str, procs: WorkerProcs, tmp_path: Path) -> None:
    app = make_app(db_url)
    lease, poll = 2.0, 0.1
    victim = procs.start(concurrency=3, lease=lease, poll=poll)
    ids = enqueue(app, "chaos", [((i, 30.0), {}) for i in range(3)])
    wait_until(lambda: len(log_lines(tmp_path)) >= 3, 30, "three runs to start")
    procs.start(concurrency=3, lease=lease, poll=poll)
    wait_until(lambda: len([w for w in app.list_workers() if w.alive]) == 2, 30, "the rescuer to register")
    killed_at = time.time()
    procs.kill9(victim)
    wait_until(lambda: len(log_lines(tmp_path)) >= 6, 30, "the runs to restart elsewhere")
    restarted = [float(0)] * 0
    for run_id in ids:
        run = app.get_run(run_id)
        assert run.attempt == 2 and run.history[0]["status"] == "lost"
        assert run.started_at is not None
        restarted.append(run.started_at.timestamp() - killed_at)
    # The lease was renewed up to lease/3 before the kill, so it ends at most `lease` after it.
    assert max(restarted) <= lease + poll + 1.5, restarted
    app.close()


def test_isolated_hung_job_is_killed_at_its_timeout(app: rota.App, tmp_path: Path) -> None:
    from .apps import basic

    worker_app = basic.app
    worker_app.database_url = app.database_url
    worker_app._store = app._store
    worker_app._ready = False
    pid_file = tmp_path / "child.pid"
    start_worker(worker_app)
    try:
        run = basic.hang_isolated.enqueue(str(pid_file)).wait(30)
    finally:
        for w in list(worker_app._workers):
            w.stop(wait=True, timeout=10)
        worker_app._workers.clear()
    assert run.status == "failed" and run.error is not None and run.error["type"] == "Timeout"
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def _terminate_backends(application_name: str) -> int:
    import psycopg

    from .conftest import PG_URL

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        ).fetchall()
    return len(rows)


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres), MYSQL])
def server_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database on a server that can end a worker's sessions: PostgreSQL, MySQL/MariaDB."""
    yield from store_url(request, tmp_path)


def _named(url: str, name: str) -> str:
    """The URL the worker uses: on PostgreSQL its sessions carry `name` (application_name);
    on MySQL the test's database is the worker's alone (see _end_sessions)."""
    return f"{url}&application_name={name}" if url.startswith("postgres") else url


def _end_sessions(url: str, name: str) -> int:
    """End the worker's sessions from the server's side: pg_terminate_backend of those named
    `name`, or MySQL's KILL CONNECTION of every session on the test's database (the test's
    own client drops its pool afterwards)."""
    if url.startswith("postgres"):
        return _terminate_backends(name)
    from . import mysql_db
    from .conftest import MYSQL_URL

    return mysql_db.kill_sessions(MYSQL_URL, database=urlsplit(url).path.lstrip("/"))


def test_worker_survives_its_connections_being_cut_by_the_server(server_url: str, tmp_path: Path) -> None:
    name = f"rota_cut_{os.getpid()}_{random.randrange(10**6)}"
    workers = WorkerProcs(_named(server_url, name), tmp_path)
    workers.env["ROTA_TEST_LOG"] = str(tmp_path / "executions.log")
    app = make_app(server_url)
    try:
        workers.start(concurrency=4, lease=3)
        enqueue(app, "chaos", [((i, 0.02), {}) for i in range(400)])
        # Six cuts, each after the worker has connected again (a slow start under a loaded CI
        # machine once left only one cut in six fixed half-second rounds).
        rounds = 0
        deadline = time.monotonic() + 60
        while rounds < 6 and time.monotonic() < deadline:
            time.sleep(0.5)
            rounds += _end_sessions(server_url, name) > 0
        assert rounds == 6, (
            f"only {rounds} cuts: the worker did not reconnect within 60 s:\n{workers.output(0)[-3000:]}"
        )
        app.store.close()  # (MySQL: the test's own sessions were ended too)
        wait_until(
            lambda: app.store.count_by_status().get("succeeded", 0) == 400,
            90,
            "all runs to succeed",
        )
        assert workers.procs[0].poll() is None
    finally:
        workers.stop_all()
        app.close()
    output = workers.output(0)
    assert "Traceback" not in output
    assert output.count("database unavailable") <= 6 * 2  # once per outage, not once per poll


def test_worker_starts_while_its_connections_are_cut(server_url: str, tmp_path: Path) -> None:
    """Connections cut while the worker starts (migration check, privilege probe,
    registration) are an outage it waits out, not a reason to exit (CI once saw a worker
    exit on a cut during its start: the start only retried an unreachable database)."""
    name = f"rota_cutstart_{os.getpid()}_{random.randrange(10**6)}"
    workers = WorkerProcs(_named(server_url, name), tmp_path)
    app = make_app(server_url)
    try:
        proc = workers.start(concurrency=2, lease=3)
        # Cut every 10 ms, for at least 2 s and 5 cuts (each start attempt waits longer: about
        # 4 s for the fifth cut here, 8 s for the tenth).
        cuts, began = 0, time.monotonic()
        while (cuts < 5 or time.monotonic() < began + 2) and time.monotonic() < began + 30 and proc.poll() is None:
            cuts += _end_sessions(server_url, name) > 0
            time.sleep(0.01)
        assert proc.poll() is None, f"the worker exited on a cut during its start:\n{workers.output(0)[-3000:]}"
        assert cuts >= 5, f"only {cuts} cuts: the worker did not connect again within 30 s"
        app.store.close()  # (MySQL: the test's own sessions were ended too)
        enqueue(app, "chaos", [((i, 0.01), {}) for i in range(20)])
        wait_until(lambda: app.store.count_by_status().get("succeeded", 0) == 20, 60, "all runs to succeed")
    finally:
        workers.stop_all()
        app.close()
    assert "Traceback" not in workers.output(0)


@pytest.mark.alone  # other tests' connections would break: `make pytest` runs it after the rest
@pytest.mark.skipif(
    not os.environ.get("ROTA_TEST_PG_RESTART"),
    reason="restarts the PostgreSQL server: set ROTA_TEST_PG_RESTART=1 (CI does)",
)
def test_worker_survives_a_postgres_restart(pg_url: str, tmp_path: Path) -> None:
    clusters = os.listdir("/etc/postgresql") if os.path.isdir("/etc/postgresql") else []
    if not shutil.which("pg_ctlcluster") or not clusters:
        if IN_CI:
            pytest.fail("ROTA_TEST_PG_RESTART=1 but pg_ctlcluster is not available")
        pytest.skip("pg_ctlcluster not available")
    workers = WorkerProcs(pg_url, tmp_path)
    workers.env["ROTA_TEST_LOG"] = str(tmp_path / "executions.log")
    app = make_app(pg_url)
    try:
        workers.start(concurrency=4, lease=5)
        enqueue(app, "chaos", [((i, 0.05), {}) for i in range(300)])
        time.sleep(1.0)
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", clusters[0], "main", "restart"],
            check=True,
            timeout=120,
        )
        wait_until(
            lambda: subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1"]).returncode == 0,
            60,
            "PostgreSQL to accept connections",
        )
        app.store.close()  # the test's own pool lost its connections too
        wait_until(
            lambda: app.store.count_by_status().get("succeeded", 0) == 300,
            120,
            "all runs to succeed",
        )
        assert workers.procs[0].poll() is None
    finally:
        workers.stop_all()
        app.close()
    output = workers.output(0)
    assert "Traceback" not in output and "database is back" in output
