"""Fixtures of the fault-injection suite (tests/faults): worker processes, TCP proxies in
front of PostgreSQL or MySQL/MariaDB, and the execution log the invariants read. Every test here is marked
`faults` (run them alone with `python -m pytest tests/faults -m faults`)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import rota
from rota.stores.base import NewRun

from ..conftest import IN_CI, MYSQL, MYSQL_URL, PG_URL, WITH_MYSQL, make_app, store_url
from ..procs import WorkerProcs, wait_until
from .netns import Host, netns_problem
from .proxy import FaultProxy

APP = "tests.faults.app:app"
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.faults)


# The stores reached over TCP (a proxy can stand between a worker and them).
SERVERS = [pytest.param("postgres", marks=pytest.mark.postgres), MYSQL]


def upstream_of(url: str) -> tuple[str, int]:
    """The host and port a database URL connects to."""
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or (3306 if parts.scheme in ("mysql", "mariadb") else 5432)


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Every fault test that takes a store runs on SQLite, PostgreSQL and MySQL/MariaDB."""
    yield from store_url(request, tmp_path)


@pytest.fixture(params=SERVERS)
def server_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database on a server reached over TCP: PostgreSQL, then MySQL/MariaDB."""
    yield from store_url(request, tmp_path)


@pytest.fixture(params=[MYSQL])
def mysql_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty MySQL/MariaDB database (a MySQL mechanism's own test)."""
    yield from store_url(request, tmp_path)


@pytest.fixture
def server_client(server_url: str) -> Iterator[rota.App]:
    """The test's own app on server_url (direct, never through a proxy)."""
    app = make_app(server_url)
    yield app
    app.close()


@pytest.fixture
def exec_log(tmp_path: Path) -> Path:
    return tmp_path / "executions.log"


@pytest.fixture
def workers(tmp_path: Path, exec_log: Path) -> Iterator[Callable[[str], WorkerProcs]]:
    """`workers(url)`: a WorkerProcs on that URL logging to exec_log; all stopped afterwards."""
    made: list[WorkerProcs] = []

    def factory(url: str) -> WorkerProcs:
        log_dir = tmp_path / f"procs-{len(made)}"
        log_dir.mkdir()
        procs = WorkerProcs(url, log_dir)
        procs.env["ROTA_TEST_LOG"] = str(exec_log)
        made.append(procs)
        return procs

    yield factory
    for procs in made:
        procs.stop_all()


@pytest.fixture
def proxies() -> Iterator[Callable[..., FaultProxy]]:
    """`proxies()`: a started FaultProxy in front of PostgreSQL (`proxies(url=...)`: in front
    of the server of that URL); closed afterwards."""
    made: list[FaultProxy] = []

    def factory(listen: tuple[str, int] = ("127.0.0.1", 0), url: str = PG_URL) -> FaultProxy:
        proxy = FaultProxy(upstream_of(url), listen).start()
        made.append(proxy)
        return proxy

    yield factory
    for proxy in made:
        proxy.close()


@pytest.fixture
def client(db_url: str) -> Iterator[rota.App]:
    """The test's own app (direct to the database): enqueues, inspects, checks invariants."""
    app = make_app(db_url)
    yield app
    app.close()


@pytest.fixture
def pg_client(pg_url: str) -> Iterator[rota.App]:
    app = make_app(pg_url)
    yield app
    app.close()


def enqueue(app: rota.App, task: str, calls: list[list[object]], max_attempts: int = 21) -> list[str]:
    """Insert runs of `task` (one per argument list) through the client's store; their ids."""
    runs = [NewRun(task=task, args=json.dumps(args), kwargs="{}", max_attempts=max_attempts) for args in calls]
    return [str(run_id) for run_id, _ in app.store.insert_runs(runs)]


def enqueue_rec(app: rota.App, n: int, seconds: float = 0.0, start: int = 0) -> list[str]:
    return enqueue(app, "faults.rec", [[i, seconds] for i in range(start, start + n)])


def starts(exec_log: Path) -> int:
    """How many executions have started so far."""
    return exec_log.read_text().count('"event": "start"') if exec_log.exists() else 0


def ends(exec_log: Path) -> int:
    """How many executions have returned so far."""
    return exec_log.read_text().count('"event": "end"') if exec_log.exists() else 0


def all_final(app: rota.App, ids: list[str]) -> Callable[[], bool]:
    wanted = set(ids)

    def done() -> bool:
        runs = app.list_runs(limit=100_000)
        return all(r.is_final for r in runs if str(r.id) in wanted) and wanted <= {str(r.id) for r in runs}

    return done


def terminate_backends(application_name: str) -> int:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        ).fetchall()
    return len(rows)


def tagged(url: str, name: str) -> str:
    """`url` with its sessions named `name` where the server can tell (PostgreSQL's
    application_name; MySQL's are told apart by the proxy's ports: see end_sessions)."""
    return f"{url}&application_name={name}" if url.startswith("postgres") else url


def end_sessions(url: str, name: str, proxy: FaultProxy | None = None) -> int:
    """End, from the server's side, the sessions of the workers behind `proxy`: on
    PostgreSQL those named `name` (pg_terminate_backend), on MySQL/MariaDB those that come
    from the proxy's own ports (KILL CONNECTION). How many were ended."""
    if url.startswith("postgres"):
        return terminate_backends(name)
    from .. import mysql_db

    assert proxy is not None, "MySQL sessions are told apart by the proxy they come through"
    return mysql_db.kill_sessions(MYSQL_URL, ports=proxy.upstream_ports())


def no_tracebacks(*groups: WorkerProcs) -> None:
    for procs in groups:
        for output in procs.outputs():
            assert "Traceback" not in output, output[-3000:]


@pytest.fixture
def hosts(tmp_path: Path, exec_log: Path) -> Iterator[Callable[[int, str], Host]]:
    """`hosts(n, url)`: host n with its own network namespace and hostname, reaching the
    database at `url` through a proxy on its veth. Skips without root or `ip netns`, except
    under CI=true as root, where these tests must run."""
    problem = netns_problem()
    if problem is not None:
        if IN_CI and os.geteuid() == 0:
            pytest.fail(f"CI=true as root but network namespaces are unavailable: {problem}", pytrace=False)
        pytest.skip(f"network-namespace hosts: {problem}")
    made: list[Host] = []

    def factory(n: int, url: str) -> Host:
        host = Host(n, upstream_of(url), tmp_path / f"host-{n}", url)
        host.procs.env["ROTA_TEST_LOG"] = str(exec_log)
        made.append(host)
        return host

    yield factory
    for host in made:
        host.close()


def settle_schedule(app: rota.App, name: str, timeout: float = 20) -> datetime:
    """Let the workers catch up with the schedule's ticks due by now, remove it and wait for
    its runs to end; returns the time up to which every tick must have a row."""
    removed = datetime.now(UTC)
    wait_until(lambda: (app.get_schedule(name).next_run_at or removed) > removed, timeout, f"{name} to catch up")
    app.remove_schedule(name)
    wait_until(lambda: all(r.is_final for r in app.list_runs(schedule=name, limit=10_000)), timeout, f"{name} to end")
    return removed
