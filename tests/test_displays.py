"""Status displays that agree with the facts (issue 22, item 8): a dead worker reads lost at
once, stuck slots show at once, times name their zone, a paused schedule says so, a running
attempt reads as running, gaps in run ids are explained, arguments are counted from 1, and
the duration metric labels a retried attempt `retried`."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner

import rota
import rota.testing
from rota.cli import main

from .conftest import WITH_MYSQL, make_app, start_worker, store_url
from .procs import wait_until


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def cli(url: str, *args: str) -> tuple[int, str]:
    result = CliRunner(env={"COLUMNS": "200", "ROTA_LEASE": None}).invoke(main, ["--database-url", url, *args])
    return result.exit_code, result.output


def row_of(out: str, first: str) -> list[str]:
    (row,) = [line.split() for line in out.splitlines() if line.split()[:1] == [first]]
    return row


def test_a_worker_past_its_lease_reads_lost_at_once(db_url: str) -> None:
    clock = rota.FakeClock(datetime(2030, 1, 1, tzinfo=UTC))
    app = make_app(db_url, clock=clock, lease=3.0)
    app.store.register_worker("w-1", "host", 1, 4, None)
    clock.advance(seconds=2)
    [seen] = app.list_workers()
    assert (seen.state, seen.alive) == ("running", True)
    clock.advance(seconds=2)  # 4 s since the last heartbeat: past the 3 s lease, not three leases
    [seen] = app.list_workers()
    assert (seen.state, seen.alive) == ("lost", False)
    assert app.stats()["workers"] == 0
    app.close()


def test_rota_workers_shows_a_dead_worker_as_lost(db_url: str) -> None:
    then = datetime.now(UTC) - timedelta(seconds=45)  # one and a half default leases (30 s) ago
    app = make_app(db_url, clock=rota.FakeClock(then))
    app.store.register_worker("dead-worker", "host", 1, 4, None)
    code, out = cli(db_url, "workers")
    assert code == 0, out
    assert row_of(out, "dead-worker")[1:3] == ["lost", "no"], out
    app.close()


def test_a_stuck_slot_shows_before_the_next_heartbeat(app: rota.App) -> None:
    release = threading.Event()

    @app.task(name="hang", timeout=0.2)
    def hang() -> None:
        release.wait(20)

    worker = start_worker(app, concurrency=2, lease=30.0)  # heartbeats every 10 s
    try:
        run = hang.enqueue().wait(10)
        assert run.status == "failed"
        wait_until(lambda: [w.stuck for w in app.list_workers()] == [1], 3, "the registry to show the stuck slot")
        release.set()
        wait_until(lambda: [w.stuck for w in app.list_workers()] == [0], 3, "the registry to show it freed")
    finally:
        release.set()
        worker.stop(wait=True, timeout=10)


def test_tables_name_the_zone_and_a_paused_schedule_shows_paused(db_url: str) -> None:
    app = make_app(db_url)
    app.schedule(every=timedelta(minutes=2), name="tick")(lambda: None)  # not high frequency: no mark
    app.schedule(every=timedelta(minutes=2), name="held")(lambda: None)
    rota.testing.run_pending(app)  # a worker's start stores the schedules (none is due yet)
    app.pause("held")
    code, out = cli(db_url, "schedules")
    assert code == 0, out
    assert out.splitlines()[0].endswith(")") and "; times: local, " in out.splitlines()[0], out
    assert " ".join(row_of(out, "held")).endswith("skip paused paused - - 0/0/0/0"), out  # state, next run
    assert " ".join(row_of(out, "tick")).startswith("tick tick every 2 min UTC skip active in "), out
    code, out = cli(db_url, "schedules", "--utc")
    assert out.splitlines()[0].endswith("; times: UTC") and "next run (UTC)" in out, out
    code, out = cli(db_url, "runs")
    assert "; times: local, " in out.splitlines()[0], out
    app.close()


def test_a_running_attempt_reads_still_running(app: rota.App, db_url: str) -> None:
    release = threading.Event()

    @app.task(name="slow")
    def slow() -> None:
        release.wait(20)

    worker = start_worker(app)
    try:
        handle = slow.enqueue()
        wait_until(lambda: handle.refresh().status == "running", 10, "the run to start")
        code, out = cli(db_url, "run", handle.id)
        assert code == 0, out
        (attempt,) = [line for line in out.splitlines() if line.startswith("attempt 1")]
        assert attempt.endswith(".. still running)") and "None" not in out, out
    finally:
        release.set()
        worker.stop(wait=True, timeout=10)


def test_a_missing_run_id_explains_gaps(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/rota.db"
    app = make_app(url)
    t = app.task(name="t")(lambda: None)
    ids = [t.enqueue().id for _ in range(3)]
    with sqlite3.connect(f"{tmp_path}/rota.db") as conn:
        conn.execute("DELETE FROM rota_runs WHERE id = ?", (int(ids[1]),))
    code, out = cli(url, "run", ids[1])
    assert code == 1 and out.count("\n") == 1, out
    assert f"no run with id '{ids[1]}'" in out and "run ids are not contiguous" in out, out
    code, out = cli(url, "cancel", "99")
    assert code == 1 and f"the newest run is {ids[2]}" in out, out
    code, out = cli(url, "retry", ids[1])
    assert code == 1 and "not contiguous" in out, out
    code, out = cli(url, "run", "0")  # not an id at all: what ids are, no word on gaps
    assert code == 1 and "run ids are integers from 1" in out and "not contiguous" not in out, out
    app.close()


@pytest.mark.postgres
def test_a_rolled_back_transactional_enqueue_leaves_an_explained_gap(pg_url: str) -> None:
    import psycopg

    app = make_app(pg_url)
    t = app.task(name="t")(lambda: None)
    first = t.enqueue()
    with psycopg.connect(pg_url) as conn:
        gone = t.options(connection=conn).enqueue()
        conn.rollback()
    last = t.enqueue()
    assert int(first.id) < int(gone.id) < int(last.id)
    code, out = cli(pg_url, "run", gone.id)
    assert code == 1 and "rolled back" in out and "not contiguous" in out, out
    app.close()


@pytest.mark.postgres
def test_the_write_check_at_a_worker_start_leaves_an_explained_gap(pg_url: str) -> None:
    """A new user on PostgreSQL: `rota migrate`, a worker, one run; its id is not 1 (each write
    check takes an id) and `rota run 1` did not say why among the reasons it listed."""
    app = make_app(pg_url)
    t = app.task(name="t")(lambda: None)
    first = t.enqueue()
    app.store.check_writable()  # what a worker's start and `rota migrate` run
    last = t.enqueue()
    assert int(last.id) == int(first.id) + 2
    code, out = cli(pg_url, "run", str(int(first.id) + 1))
    assert code == 1 and out.count("\n") == 1 and "write check of `rota migrate` and of every worker's start" in out, (
        out
    )
    app.close()


def test_arguments_are_counted_from_one_and_named(app: rota.App) -> None:
    @app.task(name="shop.send")
    def send(order_id: int, email: str, *rest: object) -> None: ...

    @app.task(name="shop.ctx", pass_context=True)
    def with_ctx(ctx: rota.RunContext, order_id: int, when: object) -> None: ...

    with pytest.raises(rota.SerializationError, match=r"^argument 2 \(email\) of shop.send\(\) is a builtins.object"):
        send.enqueue(1, object())
    with pytest.raises(rota.SerializationError, match=r"^argument 3 of shop.send\(\) is a builtins.object"):
        send.enqueue(1, "a@b.c", object())
    with pytest.raises(rota.SerializationError, match=r"^argument 2 \(when\) of shop.ctx\(\) is a datetime"):
        with_ctx.enqueue(1, datetime.now(UTC))
    with pytest.raises(rota.SerializationError, match=r"argument 2 \(email\) of shop.send\(\) 'x\\udc80'"):
        send.enqueue(1, "x\udc80")
    assert app.list_runs() == []


def test_the_duration_metric_labels_a_retried_attempt_retried(app: rota.App) -> None:
    from prometheus_client import CollectorRegistry

    from rota.metrics import _run_observer

    @app.task(name="flaky", retries=1, backoff=60)
    def flaky() -> None:
        raise RuntimeError("first try fails")

    flaky.enqueue()
    registry = CollectorRegistry()
    worker = app.worker(install_signal_handlers=False, flush_interval=0)
    worker.observe(_run_observer(registry))
    asyncio.run(worker.run_until_idle())
    labels = {
        s.labels["status"]
        for metric in registry.collect()
        if metric.name == "rota_run_duration_seconds"
        for s in metric.samples
        if s.name.endswith("_count") and s.value
    }
    assert labels == {"retried"}


def test_run_ids_are_strings_in_every_json_output(db_url: str) -> None:
    import json

    app = make_app(db_url)
    app.schedule(every=timedelta(hours=1), name="hourly")(lambda: None)
    rota.testing.run_pending(app)
    later = app.task(name="later")(lambda: None).options(delay=3600).enqueue()
    outputs = [
        cli(db_url, "runs", "--json"),
        cli(db_url, "run", later.id, "--json"),
        cli(db_url, "trigger", "hourly", "--json"),
        cli(db_url, "cancel", later.id, "--json"),
    ]
    result = CliRunner().invoke(
        main, ["--database-url", db_url, "enqueue", "tests.apps.basic:app", "noop", "--args", "[1]", "--json"]
    )
    assert isinstance(json.loads(result.output)["id"], str), result.output
    for code, out in outputs:
        assert code == 0, out
        data = json.loads(out)
        for run in data if isinstance(data, list) else [data]:
            assert isinstance(run["id"], str) and run["id"].isdigit(), run
            assert run["retry_of"] is None or isinstance(run["retry_of"], str)
    app.close()
