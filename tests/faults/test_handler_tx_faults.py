"""A transactional handler's own transaction meets an outage (the soak, seed 41): a
transaction that could not begin, or whose commit did not happen, is not the handler's
failure; a commit whose reply was lost is read back from the run's row. With retries=0 every
run must end succeeded, its writes committed exactly once. On SQLite, PostgreSQL and
MySQL/MariaDB (the cuts through a TCP proxy)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import rota

from ..conftest import make_app, start_worker, wait_for
from ..test_transactional import connect, effects, record, sql
from .proxy import FaultProxy


@pytest.fixture
def apps() -> Iterator[Callable[..., rota.App]]:
    made: list[rota.App] = []

    def factory(url: str, **options: object) -> rota.App:
        app = make_app(url, **options)
        made.append(app)
        return app

    yield factory
    for app in made:
        for worker in list(app._workers):
            worker.stop(wait=True, timeout=10)
        app.close()


def statuses(worker: rota.Worker) -> list[str]:
    """Every status the worker decided (its observers hear each decision)."""
    seen: list[str] = []
    worker.observe(lambda event, claim, at: seen.append(event) if event != "started" else None)
    return seen


def setup(app: rota.App) -> None:
    app.migrate()
    with connect(app.store.url) as conn:
        sql(conn, "CREATE TABLE effects (run_id TEXT NOT NULL, attempt INTEGER NOT NULL)")


def test_sqlite_a_transaction_that_waited_past_the_busy_timeout_begins_again(
    tmp_path: Path, apps: Callable[..., rota.App]
) -> None:
    """Two transactional runs claimed together: one holds the write lock for a second, the
    other's BEGIN IMMEDIATE gives up after the busy timeout (0.2 s): it begins again later."""
    app = apps(f"sqlite:///{tmp_path}/db.sqlite?busy_timeout=0.2")
    setup(app)

    @app.task(name="hold", transactional=True, retries=0)
    def hold(ctx: rota.RunContext) -> None:
        record(ctx)
        time.sleep(1.0)  # the file's write lock held

    handles = [hold.enqueue() for _ in range(2)]
    worker = start_worker(app, concurrency=4)  # claims both at once
    seen = statuses(worker)
    wait_for(lambda: all(h.refresh().is_final for h in handles), 60, "both runs")
    runs = [h.refresh() for h in handles]
    assert [r.status for r in runs] == ["succeeded"] * 2, [r.error for r in runs]
    assert [r.attempt for r in runs] == [1, 1]
    assert sorted(effects(app.store.url)) == sorted((r.id, 1) for r in runs)
    assert "failed" not in seen and "pending" not in seen


def test_a_connection_cut_between_runs_begins_again(
    server_url: str, proxies: Callable[..., FaultProxy], apps: Callable[..., rota.App]
) -> None:
    """Every connection of the worker is cut between two runs: the next run's BEGIN meets the
    handler's pooled connection (PostgreSQL; MySQL's handlers connect anew), dead; it
    begins again on a new one."""
    proxy = proxies(url=server_url)
    client = apps(server_url)
    setup(client)
    app = apps(proxy.url(server_url))

    @app.task(name="charge", transactional=True, retries=0)
    def charge(ctx: rota.RunContext) -> None:
        record(ctx)

    enqueue = client.task(name="charge", transactional=True, retries=0)(charge.fn).enqueue  # direct
    worker = start_worker(app, concurrency=1)
    seen = statuses(worker)
    first = enqueue()
    wait_for(lambda: first.refresh().is_final, 30, "the first run")
    for _ in range(3):
        proxy.cut()
        proxy.restore()
        handle = enqueue()
        wait_for(lambda h=handle: h.refresh().is_final, 60, "a run after the cut")  # type: ignore[misc]
        run = handle.refresh()
        assert (run.status, run.attempt) == ("succeeded", 1), run.error
    assert len(effects(server_url)) == 4
    assert "failed" not in seen and "pending" not in seen


@pytest.mark.postgres
@pytest.mark.parametrize("commits", [True, False], ids=["committed", "rolled-back"])
def test_postgres_a_commit_whose_reply_was_lost_is_read_back(
    pg_url: str, proxies: Callable[..., FaultProxy], apps: Callable[..., rota.App], commits: bool
) -> None:
    """The connection is cut while the commit runs (a deferred trigger makes it take 1.5 s).
    Committed anyway (the server did not notice): read back, the run succeeded, nothing is
    decided twice. Rolled back (the server checks for the client every 100 ms): the attempt
    runs again in a new transaction and succeeds."""
    proxy = proxies()
    client = apps(pg_url)
    setup(client)
    with connect(pg_url) as conn:
        sql(conn, "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS "
                  "$$ BEGIN PERFORM pg_sleep(1.5); RETURN NULL; END $$")  # fmt: skip
        sql(conn, "CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON effects DEFERRABLE INITIALLY DEFERRED "
                  "FOR EACH ROW EXECUTE FUNCTION slow_commit()")  # fmt: skip
    app = apps(proxy.url(pg_url))
    committing = threading.Event()

    @app.task(name="charge", transactional=True, retries=0)
    def charge(ctx: rota.RunContext) -> None:
        if not commits:
            sql(ctx.connection, "SET LOCAL client_connection_check_interval = 100")
        record(ctx)
        committing.set()

    enqueue = client.task(name="charge", transactional=True, retries=0)(charge.fn).enqueue  # direct
    worker = start_worker(app, concurrency=1)
    seen = statuses(worker)
    handle = enqueue()
    assert committing.wait(30), "the handler did not run"
    time.sleep(0.5)  # the COMMIT sent, its deferred trigger sleeping
    proxy.cut()
    time.sleep(0.3)
    proxy.restore()
    wait_for(lambda: handle.refresh().is_final, 60, "the run")
    run = handle.refresh()
    assert (run.status, run.attempt) == ("succeeded", 1), run.error
    assert effects(pg_url) == [(run.id, 1)]
    wait_for(lambda: bool(seen), 30, "the worker's decision")  # (the row may commit before it reads it back)
    assert seen == ["succeeded"]


def test_a_cut_after_the_handler_returned_runs_the_attempt_again(
    server_url: str, proxies: Callable[..., FaultProxy], apps: Callable[..., rota.App]
) -> None:
    """The handler's last act cuts every connection (restored 0.5 s later): recording its
    success fails, nothing committed. Not its failure: the attempt runs again and commits once."""
    proxy = proxies(url=server_url)
    client = apps(server_url)
    setup(client)
    app = apps(proxy.url(server_url))
    calls: list[int] = []

    @app.task(name="charge", transactional=True, retries=0)
    def charge(ctx: rota.RunContext) -> None:
        record(ctx)
        calls.append(ctx.attempt)
        if len(calls) == 1:
            proxy.cut()
            threading.Timer(0.5, proxy.restore).start()

    enqueue = client.task(name="charge", transactional=True, retries=0)(charge.fn).enqueue  # direct
    worker = start_worker(app, concurrency=1)
    seen = statuses(worker)
    handle = enqueue()
    wait_for(lambda: handle.refresh().is_final, 60, "the run")
    run = handle.refresh()
    assert (run.status, run.attempt, calls) == ("succeeded", 1, [1, 1]), run.error
    assert effects(server_url) == [(run.id, 1)]
    wait_for(lambda: bool(seen), 30, "the worker's decision")  # (the row may commit before it reads it back)
    assert seen == ["succeeded"]


def test_mysql_a_commit_whose_reply_was_lost_is_read_back(
    mysql_url: str, proxies: Callable[..., FaultProxy], apps: Callable[..., rota.App]
) -> None:
    """The handler's COMMIT reaches MySQL and commits; its reply is held back, then every
    connection is cut. Read back from the run's row: succeeded, nothing decided twice, the
    handler's row committed once."""
    proxy = proxies(url=mysql_url)
    client = apps(mysql_url)
    setup(client)
    app = apps(proxy.url(mysql_url))

    @app.task(name="charge", transactional=True, retries=0)
    def charge(ctx: rota.RunContext) -> None:
        record(ctx)

    enqueue = client.task(name="charge", transactional=True, retries=0)(charge.fn).enqueue  # direct
    worker = start_worker(app, concurrency=1)
    seen = statuses(worker)
    proxy.hold_replies_after(b"INSERT INTO effects", b"COMMIT")
    handle = enqueue()
    assert proxy.triggered.wait(30), "the handler's transaction never committed"
    wait_for(lambda: effects(mysql_url) != [], 10, "the COMMIT to take effect")
    proxy.cut()
    time.sleep(0.3)
    proxy.restore()
    wait_for(lambda: handle.refresh().is_final, 60, "the run")
    run = handle.refresh()
    assert (run.status, run.attempt) == ("succeeded", 1), run.error
    assert effects(mysql_url) == [(run.id, 1)]
    wait_for(lambda: bool(seen), 30, "the worker's decision")
    assert seen == ["succeeded"]
