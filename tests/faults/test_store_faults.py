"""Store-side faults of issue 10: deadlocks between finishers, deploys that change a schedule,
retries of exclusive schedules, bounded PostgreSQL sessions, failover recovery, SQLite
connections of dead threads, lost workers and per-run fencing tokens. Real databases only;
each test ends by checking what it promises from the database."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import rota
from rota.stores.base import Materialization, Outcome
from rota.stores.sqlite import SQLiteStore

from ..conftest import make_app
from ..test_schedules import poll_once, runs_of

START = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture
def fake() -> rota.FakeClock:
    return rota.FakeClock(START)


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run fn on a daemon thread; its result or exception lands in the returned dict."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


def pg_conn(url: str) -> Any:
    import psycopg

    return psycopg.connect(url)


@pytest.fixture
def pg_apps(pg_url: str) -> Iterator[Callable[..., rota.App]]:
    """Apps on a fresh PostgreSQL schema (for the tests that exist on PostgreSQL only)."""
    apps: list[rota.App] = []

    def factory(**options: Any) -> rota.App:
        apps.append(make_app(pg_url, **options))
        return apps[-1]

    yield factory
    for app in apps:
        app.close()


def schedules(app: rota.App, names: list[str]) -> None:
    for name in names:
        app.schedule(every=3600, name=name, overlap="concurrent")(lambda: None)
    app.prepare()


def claim_all(app: rota.App, n: int) -> dict[int, int]:
    claimed = app.store.claim("w", n, None, 60)
    assert len(claimed) == n
    return {c.id: c.token for c in claimed}


def check_counts(app: rota.App, names: list[str], succeeded: int) -> None:
    for name in names:
        info = app.get_schedule(name)
        assert info.success_count == succeeded, (name, info)
        assert all(r.status == "succeeded" for r in runs_of(app, name))


def done(ids: list[int], tokens: dict[int, int]) -> list[Outcome]:
    return [Outcome(i, tokens[i], "succeeded", result=str(i)) for i in ids]


# -- defect 4: finishing deadlocks on PostgreSQL ------------------------------------------


@pytest.mark.postgres
def test_a_deadlock_while_finishing_is_retried_at_once(pg_url: str, pg_apps: Callable[..., rota.App]) -> None:
    """Forced: another transaction holds schedule b (finished a run of b) and then wants a,
    while the store's finish holds a and waits for b. PostgreSQL aborts the store's
    statement (its deadlock check runs first); the store retries it and writes both."""
    app = pg_apps()
    schedules(app, ["a", "b"])
    r1, r2, r3, r4 = (int(app.trigger(name).id) for name in ("a", "b", "a", "b"))
    tokens = claim_all(app, 4)
    other = pg_conn(pg_url)
    update = "UPDATE rota_runs SET status = 'succeeded', finished_at = now() WHERE id = %s"
    try:
        other.execute("SET deadlock_timeout = '10s'")  # the store's backend detects it first
        other.execute(update, (r4,))
        finisher, box = in_thread(lambda: app.store.finish(done([r1, r2], tokens)))
        time.sleep(0.3)  # the finisher holds a, waits for b
        blocked, other_box = in_thread(lambda: other.execute(update, (r3,)))
        blocked.join(10)
        assert not blocked.is_alive() and "error" not in other_box, other_box
        other.commit()
        finisher.join(10)
    finally:
        other.close()
    assert box.get("error") is None, f"finish raised {box.get('error')!r}"
    assert box["result"] == {r1, r2}
    check_counts(app, ["a", "b"], succeeded=2)


@pytest.mark.postgres
def test_finishers_of_interleaved_batches_lock_schedules_in_one_order(
    pg_url: str, pg_apps: Callable[..., rota.App], caplog: pytest.LogCaptureFixture
) -> None:
    """Two finishers whose batches hold runs of forty schedules in opposite id orders,
    released at the same instant: no deadlock at all (not even one retried)."""
    app, other_app = pg_apps(), pg_apps()
    names = [f"s{i:02d}" for i in range(40)]
    schedules(app, names)
    caplog.set_level(logging.INFO, logger="rota.store")
    for _ in range(3):
        first = [int(app.trigger(name).id) for name in names]
        second = [int(app.trigger(name).id) for name in reversed(names)]
        tokens = claim_all(app, 80)
        gate = pg_conn(pg_url)
        try:
            gate.execute("SELECT id FROM rota_runs WHERE id IN (%s, %s) FOR UPDATE", (first[-1], second[-1]))
            t1, box1 = in_thread(lambda: app.store.finish(done(first, tokens)))  # noqa: B023
            t2, box2 = in_thread(lambda: other_app.store.finish(done(second, tokens)))  # noqa: B023
            time.sleep(0.3)
            gate.commit()  # both finishers go on at once
            t1.join(15)
            t2.join(15)
        finally:
            gate.close()
        assert box1.get("error") is None and box2.get("error") is None, (box1, box2)
        assert box1["result"] | box2["result"] == set(first + second)
    assert not [r for r in caplog.records if "deadlock" in r.getMessage()]
    check_counts(app, names, succeeded=6)


# -- defect 5: a deploy that changes a schedule keeps missed ticks ------------------------


def deploy(app_factory: Callable[..., rota.App], fake: rota.FakeClock, **options: Any) -> rota.App:
    app = app_factory(clock=fake)

    @app.schedule(name="nightly", **options)
    def nightly() -> None: ...

    app.prepare()
    return app


def test_a_deploy_changing_options_keeps_a_missed_tick(
    app_factory: Callable[..., rota.App], fake: rota.FakeClock
) -> None:
    deploy(app_factory, fake, cron="0 3 * * *", timeout=10)
    fake.set(datetime(2030, 1, 1, 3, 0, 30, tzinfo=UTC))  # workers down at 03:00
    v2 = deploy(app_factory, fake, cron="0 3 * * *", timeout=20, retries=2)
    assert v2.get_schedule("nightly").next_run_at == datetime(2030, 1, 1, 3, tzinfo=UTC)
    poll_once(v2)
    (run,) = runs_of(v2, "nightly")  # on time within the 60 s grace: it runs
    assert (run.scheduled_for, run.status, run.timeout, run.max_attempts) == (
        datetime(2030, 1, 1, 3, tzinfo=UTC),
        "pending",
        20,
        3,
    )
    assert v2.get_schedule("nightly").next_run_at == datetime(2030, 1, 2, 3, tzinfo=UTC)


def test_a_deploy_changing_timing_applies_the_misfire_policy_to_missed_ticks(
    app_factory: Callable[..., rota.App], fake: rota.FakeClock
) -> None:
    deploy(app_factory, fake, cron="0 3 * * *", misfire="skip")
    fake.set(datetime(2030, 1, 1, 5, tzinfo=UTC))  # 03:00 missed, then a deploy moves it
    v2 = deploy(app_factory, fake, cron="30 3 * * *", misfire="skip")
    poll_once(v2)
    runs = runs_of(v2, "nightly")
    assert [(r.scheduled_for.hour, r.scheduled_for.minute, r.status) for r in runs] == [
        (3, 0, "skipped"),  # the old timing's missed tick is recorded
        (3, 30, "skipped"),  # and the new timing's
    ]
    assert all("misfire=skip" in (r.error or {}).get("message", "") for r in runs)
    assert v2.get_schedule("nightly").next_run_at == datetime(2030, 1, 2, 3, 30, tzinfo=UTC)


# -- defect 6: retry keeps the schedule's exclusivity, key and backoff ----------------------


def test_retry_of_a_scheduled_run_keeps_its_overlap_policy(app: rota.App) -> None:
    @app.schedule(every=3600, name="s", overlap="skip")
    def s() -> None: ...

    app.prepare()
    first = int(app.trigger("s").id)
    (claimed,) = app.store.claim("w", 10, None, 60)
    app.store.finish([Outcome(claimed.id, claimed.token, "failed", error='{"message": "x"}')])
    app.trigger("s")
    assert len(app.store.claim("w", 10, None, 60)) == 1  # the second run is running
    with pytest.raises(rota.TriggerRefused, match="overlap"):
        app.retry(first)
    assert len(app.store.claim("w", 10, None, 60)) == 0
    active = [r for r in runs_of(app, "s") if r.status in ("pending", "running")]
    assert len(active) == 1


def test_retry_keeps_key_and_backoff(app: rota.App) -> None:
    @app.task(name="k", retries=2, backoff=7)
    def k() -> None: ...

    run = k.options(key="the-key", backoff=9).enqueue().refresh()
    (claimed,) = app.store.claim("w", 10, None, 60)
    app.store.finish([Outcome(claimed.id, claimed.token, "failed", error='{"message": "x"}')])
    again = app.retry(run.id).refresh()
    assert (again.key, again.retry_of) == ("the-key", run.id)
    source = app.store.retry_source(int(run.id))
    assert source is not None and source[0] == "the-key" and source[1] is not None and "9" in source[1]
    assert app.store.retry_source(int(again.id)) == source


# -- defect 8 (store): bounded sessions ---------------------------------------------------


@pytest.mark.postgres
def test_a_tick_insert_waiting_on_a_frozen_transaction_fails_fast_and_transient(
    pg_url: str, pg_apps: Callable[..., rota.App], fake: rota.FakeClock
) -> None:
    app = pg_apps(clock=fake, store_options={"lock_timeout": 0.5})

    @app.schedule(every=60, name="tick")
    def tick() -> None: ...

    app.prepare()
    fake.advance(61)
    (due,) = app.store.due_schedules(10)
    frozen = pg_conn(pg_url)  # a host that stopped after inserting the tick, before COMMIT
    try:
        frozen.execute(
            "INSERT INTO rota_runs (task, schedule, tick, scheduled_for, due_at) VALUES ('tick', 'tick', %s, %s, %s)",
            (due.next_run_at,) * 3,
        )
        plan = Materialization([due.next_run_at], [], 0, due.next_run_at + timedelta(seconds=60))
        started = time.monotonic()
        worker, box = in_thread(lambda: app.store.materialize(due, plan))
        worker.join(5)
        waited = time.monotonic() - started
        assert not worker.is_alive(), "materialize still waits on the frozen transaction"
    finally:
        frozen.rollback()
        frozen.close()
    assert isinstance(box.get("error"), rota.DatabaseTransient), box
    assert "lock timeout" in str(box["error"])
    assert waited < 3
    assert app.store.materialize(due, plan)  # once the frozen host is gone, the tick goes in
    assert len(runs_of(app, "tick")) == 1


@pytest.mark.postgres
def test_sessions_are_bounded_and_keepalives_set(pg_url: str) -> None:
    store = rota.stores.open_store(pg_url + "&keepalives_idle=7", idle_in_transaction_timeout=30)
    try:
        with store._read() as s:  # type: ignore[attr-defined]
            shown = [s.q_text(f"SHOW {name}")[0][0] for name in ("lock_timeout", "idle_in_transaction_session_timeout")]
            params = s.cur.connection.info.get_parameters()
        assert shown == ["5s", "30s"]
        assert (params["keepalives_idle"], params["keepalives_interval"]) == ("7", "3")  # the URL's wins
    finally:
        store.close()
    with pytest.raises(rota.ConfigurationError, match="lock_timeout must be a number of seconds"):
        rota.stores.open_store(pg_url, lock_timeout=-1)


@pytest.mark.postgres
def test_a_tick_transaction_left_idle_is_ended_after_tick_idle_timeout(pg_url: str) -> None:
    """A host frozen mid-tick (statements sent, no COMMIT) holds the tick's rows only for
    tick_idle_timeout: the server ends its session (issue 18, item 8). Other transactions
    keep the store's idle_in_transaction_timeout."""
    store: Any = rota.stores.open_store(pg_url, tick_idle_timeout=0.3)
    try:
        began = time.monotonic()
        idle = pytest.raises(rota.DatabaseTransient, match="idle in a transaction for too long")
        with idle, store._tx() as s:
            store._bound_tick_locks(s)
            assert s.q_text("SHOW idle_in_transaction_session_timeout")[0][0] == "300ms"
            time.sleep(1.0)  # frozen
            s.q_text("SELECT 1")
        assert time.monotonic() - began < 5
        with store._tx() as s:
            assert s.q_text("SHOW idle_in_transaction_session_timeout")[0][0] == "1min"
    finally:
        store.close()
    with pytest.raises(rota.ConfigurationError, match="tick_idle_timeout must be a positive number"):
        rota.stores.open_store(pg_url, tick_idle_timeout=0)


def test_sqlite_database_locked_is_transient(tmp_path: Any) -> None:
    import sqlite3

    app = rota.App(f"sqlite:///{tmp_path}/db.sqlite?busy_timeout=0.2", retention=None)

    @app.task(name="t")
    def t() -> None: ...

    t.enqueue()
    holder = sqlite3.connect(f"{tmp_path}/db.sqlite", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(rota.DatabaseTransient, match="locked"):
            t.enqueue()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert len(app.list_runs()) == 1
    app.close()


# -- defect 9 (store) -------------------------------------------------------------------------


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_sqlite_closes_connections_of_threads_that_ended(tmp_path: Any) -> None:
    app = rota.App(f"sqlite:///{tmp_path}/db.sqlite", retention=None)

    @app.task(name="t")
    def t() -> None: ...

    t.enqueue()
    before = open_fds()
    for _ in range(60):
        threads = [threading.Thread(target=t.enqueue) for _ in range(5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    store = app.store
    assert isinstance(store, SQLiteStore)
    assert len(store._all) <= 7, len(store._all)
    assert open_fds() - before <= 15
    assert len(app.list_runs(limit=1000)) == 301
    app.close()


def test_workers_without_heartbeat_are_lost_then_pruned(
    app_factory: Callable[..., rota.App], fake: rota.FakeClock
) -> None:
    app = app_factory(clock=fake)
    app.store.register_worker("gone", "host", 1, 2, None)
    app.store.register_worker("alive", "host", 2, 2, None)
    fake.advance(app.lease * 4)
    app.store.worker_seen("alive", "running")
    states = {w.id: (w.state, w.alive) for w in app.list_workers()}
    assert states == {"gone": ("lost", False), "alive": ("running", True)}
    assert app.store.prune_workers(app.lease * 3, 3600) == 0  # marked lost, kept for now
    fake.advance(3600)
    app.store.worker_seen("alive", "running")
    assert app.store.prune_workers(app.lease * 3, 3600) == 1
    assert [w.id for w in app.list_workers()] == ["alive"]


def test_every_claimed_run_has_its_own_fencing_token(app: rota.App) -> None:
    @app.task(name="t")
    def t() -> None: ...

    for _ in range(5):
        t.enqueue()
    first = app.store.claim("w", 3, None, 60)
    second = app.store.claim("w", 3, None, 60)
    tokens = [c.token for c in first + second]
    assert len(tokens) == 5 and len(set(tokens)) == 5
    assert max(c.token for c in first) < min(c.token for c in second)
    assert {r.token for r in app.list_runs(status="running")} == set(tokens)


@pytest.fixture
def app_name() -> Iterator[str]:
    yield f"faults_store_{uuid.uuid4().hex[:10]}"


@pytest.mark.postgres
def test_postgres_recovers_at_once_after_its_backends_are_terminated(pg_url: str, app_name: str) -> None:
    """A failover: every pooled connection dies at once. The store drops the whole pool on
    the first broken connection instead of finding the dead ones one call at a time."""
    store = rota.stores.open_store(f"{pg_url}&application_name={app_name}", pool_size=6)
    store.migrate()
    try:

        def busy() -> None:
            with store._read() as s:  # type: ignore[attr-defined]
                s.q_text("SELECT pg_sleep(0.3)")

        threads = [threading.Thread(target=busy) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        killer = pg_conn(pg_url)
        with killer:
            killed = killer.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = %s AND pid <> pg_backend_pid()",
                (app_name,),
            ).fetchone()
        assert killed is not None and killed[0] >= 4
        started, failures = time.monotonic(), 0
        while True:
            try:
                store.count_by_status()
                break
            except rota.DatabaseError:
                failures += 1
                assert time.monotonic() - started < 3, f"not recovered after {failures} failures"
        assert failures <= 1
        assert time.monotonic() - started < 3
    finally:
        store.close()
