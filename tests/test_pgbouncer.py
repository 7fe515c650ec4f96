"""rota through PgBouncer in transaction mode (issue 45, item 1): no session state assumed
across transactions, wake-ups on a direct connection or polling, and a clear line when the
pooler's symptoms appear without ROTA_POOLER. The contract and crash suites also run through
a PgBouncer (their `postgres-bouncer` parametrization, see conftest.store_url)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import rota
from rota.errors import ConfigurationError, DatabaseError

from .conftest import _through_bouncer, make_app, require_pgbouncer, start_worker, wait_for

pytestmark = pytest.mark.postgres


@pytest.fixture
def bouncer_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh schema through a PgBouncer of its own, without ROTA_POOLER or ROTA_LISTEN_URL
    (each test says what it gives)."""
    yield from _through_bouncer(request, settings=False)


@pytest.fixture
def apps(bouncer_url: str) -> Iterator[Callable[..., rota.App]]:
    """Apps made here; their workers stopped and the apps closed before the bouncer stops
    (this fixture depends on bouncer_url so that its teardown runs first)."""
    made: list[rota.App] = []

    def factory(url: str, **options: Any) -> rota.App:
        made.append(make_app(url, **options))
        return made[-1]

    yield factory
    for app in made:
        for worker in list(app._workers):
            worker.stop(wait=True, timeout=10)


def test_single_enqueues_and_a_worker_drain_through_the_pooler(apps: Callable[..., rota.App], bouncer_url: str) -> None:
    """Before: the sixth statement of a kind on a pooled connection was prepared (psycopg's
    threshold) and the next transaction met `prepared statement "_pg3_0" already exists` or
    `... does not exist` on another server connection: enqueues failed, the worker flapped."""
    app = apps(bouncer_url, pooler="transaction")

    @app.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    handles = [add.enqueue(i, 1) for i in range(40)]  # one transaction each
    start_worker(app, concurrency=4)
    runs = [h.wait(30) for h in handles]
    assert [(r.status, r.result) for r in runs] == [("succeeded", i + 1) for i in range(40)]


def test_without_pooler_the_symptom_names_the_setting(apps: Callable[..., rota.App], bouncer_url: str) -> None:
    """Two processes' connections share the pooler's server connections: psycopg prepares
    the same statement as "_pg3_0" on each, and the second meets the first's."""
    first, second = apps(bouncer_url), apps(bouncer_url)
    tasks = []
    for app in (first, second):

        @app.task(name="noop")
        def noop() -> None:
            return None

        tasks.append(noop)

    with pytest.raises(DatabaseError, match=r"_pg3_.*set ROTA_POOLER=transaction"):
        for _ in range(40):
            for task in tasks:
                task.enqueue()


def test_timeouts_hold_in_each_transaction_and_leave_no_session_state(
    apps: Callable[..., rota.App], bouncer_url: str
) -> None:
    """The store's lock_timeout applies inside its transactions (SET LOCAL semantics), and
    no server connection keeps it afterwards (a session SET would leak to other clients)."""
    import psycopg

    app = apps(bouncer_url, pooler="transaction", store_options={"lock_timeout": 1.25})
    store: Any = app.store
    with store._tx() as s:
        assert s.q_text("SHOW lock_timeout")[0][0] == "1250ms"
    with store._session(False, pipeline=True) as s:
        s.send("now")
        s.cur.execute("SHOW lock_timeout")
    with psycopg.connect(bouncer_url, autocommit=True, prepare_threshold=None) as conn:
        seen = {conn.execute("SHOW lock_timeout").fetchone()[0] for _ in range(8)}  # type: ignore[index]
        assert seen == {"0"}
        assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (0,)


def test_without_a_listen_url_the_worker_polls_and_says_so_once(
    apps: Callable[..., rota.App], bouncer_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = apps(bouncer_url, pooler="transaction", poll_interval=0.1)

    @app.task(name="echo")
    def echo(x: int) -> int:
        return x

    with caplog.at_level(logging.INFO, logger="rota.store"):
        start_worker(app)
        wait_for(lambda: any("no wake-ups" in r.getMessage() for r in caplog.records), what="the polling line")
        assert echo.enqueue(7).wait(15).result == 7
        time.sleep(0.3)
    lines = [r.getMessage() for r in caplog.records if "no wake-ups" in r.getMessage()]
    assert len(lines) == 1 and "ROTA_LISTEN_URL" in lines[0], lines


def test_a_listen_url_wakes_the_worker_at_once(apps: Callable[..., rota.App], bouncer_url: str, pg_url: str) -> None:
    """LISTEN on the direct URL (another schema's channel would not wake it: both URLs
    must reach the same schema, so this test's listen URL is the bouncer's own schema)."""
    import psycopg

    with psycopg.connect(bouncer_url, autocommit=True, prepare_threshold=None) as conn:
        schema = conn.execute("SELECT current_schema()").fetchone()[0]  # type: ignore[index]
    direct = pg_url.rsplit("search_path%3D", 1)[0] + f"search_path%3D{schema}"
    app = apps(bouncer_url, pooler="transaction", listen_url=direct, poll_interval=5.0)

    @app.task(name="echo")
    def echo(x: int) -> int:
        return x

    start_worker(app)
    assert echo.enqueue(1).wait(15).result == 1  # the first poll
    time.sleep(0.5)
    began = time.monotonic()
    assert echo.enqueue(2).wait(15).result == 2
    assert time.monotonic() - began < 2.5, "woken by NOTIFY, not the 5 s poll"


def test_bad_pooler_settings_are_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match=r"pooler must be one of none, transaction, got 'session'"):
        rota.App("postgresql://rota@127.0.0.1:1/rota", pooler="session")
    monkeypatch.setenv("ROTA_POOLER", "txn")
    with pytest.raises(ConfigurationError, match=r"ROTA_POOLER='txn' is not valid: expected one of none, transaction"):
        rota.App("postgresql://rota@127.0.0.1:1/rota")
    monkeypatch.delenv("ROTA_POOLER")
    with pytest.raises(ConfigurationError, match="do not apply to SQLite"):
        rota.App("sqlite:///x.db", listen_url="postgresql://rota@db/rota")


def test_a_worker_rides_out_a_pgbouncer_restart(pg_url: str) -> None:
    """PgBouncer stopped hard (every client connection cut) mid-drain and started again on
    the same port: the worker reconnects and every run succeeds. As after any cut connection,
    a claim or finish the server committed but whose answer was cut is settled by the lease:
    the run is rescued when its lease ends (pending again, or retried if its start was
    recorded), so the task has retries."""
    from . import pgbouncer

    require_pgbouncer()
    schema = pg_url.rsplit("search_path%3D", 1)[1]
    bouncer = pgbouncer.Bouncer(pg_url.split("?", 1)[0], schema)
    bouncer.start()
    app = make_app(bouncer.url, pooler="transaction", listen_url=pg_url, lease=3.0)
    ran: list[int] = []

    @app.task(name="nap", retries=2, backoff=0)
    def nap(i: int) -> int:
        time.sleep(0.02)
        ran.append(i)
        return i

    try:
        nap.enqueue_many([((i,), {}) for i in range(300)])
        start_worker(app, concurrency=8)
        wait_for(lambda: len(ran) >= 50, timeout=30, what="the drain under way")
        bouncer.restart()
        done = lambda: app.store.count_by_status().get("succeeded", 0) == 300  # noqa: E731
        wait_for(done, timeout=60, what="every run succeeded", step=0.2)
        runs = app.list_runs(limit=300)
        assert sorted(r.result for r in runs) == list(range(300))

    finally:
        for w in list(app._workers):
            w.stop(wait=True, timeout=10)
        app.close()
        bouncer.remove()


def test_a_missing_pgbouncer_skips_in_one_line_and_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    from . import conftest, pgbouncer

    monkeypatch.setattr(pgbouncer, "BINARIES", ("no-such-pgbouncer",))
    monkeypatch.setattr(conftest, "IN_CI", False)
    with pytest.raises(pytest.skip.Exception, match=r"^pgbouncer is not installed \(apt-get install pgbouncer\)"):
        conftest.require_pgbouncer()
    monkeypatch.setattr(conftest, "IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match="^CI=true but pgbouncer is not installed"):
        conftest.require_pgbouncer()
