"""Worker-side faults of issue 10: outages longer than a lease, a database that was down for
everybody, a partitioned worker, unencodable outcomes, transient write errors, the hard
concurrency cap, a blocked event loop, a tick that waits on a lock.

Connectivity faults are injected at the store boundary of one App (its calls raise
DatabaseUnavailable while `cut`), so one worker can be cut off while another is not; the
database itself is real and every test checks its end state from the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest

import rota
from rota.errors import DatabaseError, DatabaseTransient, DatabaseUnavailable
from rota.stores.base import Outcome
from rota.worker.outage import Outage

from ..conftest import make_app, start_worker, wait_for

LEASE = 0.6


class Cut:
    """Make every store call of one App fail as if its network were cut (until `restore`)."""

    CALLS = ("claim", "heartbeat", "finish", "rescue", "poll_state", "worker_seen", "due_schedules", "disown")
    # The combined write+claim of one transaction is down while either half is.
    COMBINED: ClassVar[dict[str, tuple[str, str]]] = {"finish_and_claim": ("finish", "claim")}

    def __init__(self, app: rota.App) -> None:
        self.down: set[str] = set()
        store = app.store
        for name in (*self.CALLS, *self.COMBINED):
            setattr(store, name, self._wrap(name, getattr(store, name)))

    def _wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        halves = self.COMBINED.get(name, (name,))

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.down.intersection(halves):
                raise DatabaseUnavailable("injected: the network to the database is cut")
            return fn(*args, **kwargs)

        return call

    def cut(self) -> None:
        self.down = set(self.CALLS)

    def restore(self, *calls: str) -> None:
        """Let `calls` (default: all) through again."""
        self.down = self.down - set(calls or self.CALLS)


def held_task(app: rota.App, name: str = "work", **options: Any) -> tuple[Any, threading.Event, threading.Event]:
    """A task that signals it started and returns its worker's label once released."""
    started, release = threading.Event(), threading.Event()

    @app.task(name=name, **options)
    def work(label: str) -> str:
        started.set()
        release.wait(30)
        return label

    return work, started, release


def test_a_worker_back_from_an_outage_longer_than_its_lease_keeps_its_runs(
    app_factory: Callable[..., rota.App],
) -> None:
    app = app_factory(lease=LEASE)
    cut = Cut(app)
    work, started, release = held_task(app, retries=2)
    worker = start_worker(app)
    handle = work.enqueue("mine")
    assert started.wait(10)
    cut.cut()
    release.set()  # finishes during the outage: the result waits in the outbox
    time.sleep(5 * LEASE)
    # The database comes back while the worker's first call through is its poll loop's
    # (the order the TCP-proxy reproduction showed): it must not rescue its own run.
    cut.restore("rescue", "poll_state", "claim", "due_schedules")
    work.enqueue("wake-up")  # wakes the poll loop from its backoff
    time.sleep(1.5 * LEASE)
    cut.restore()
    run = handle.wait(15)
    assert (run.status, run.result, run.attempt) == ("succeeded", "mine", 1)
    assert [a["status"] for a in run.attempts] == ["succeeded"]
    assert worker.counters.rescued == 0 and worker.counters.stale_writes == 0


def test_a_database_down_for_everybody_fails_no_run_whose_owner_comes_back(
    app_factory: Callable[..., rota.App],
) -> None:
    """Both workers lose the database for several leases; the rescuer comes back first,
    the owner a little later (within a lease): the owner keeps and finishes its run."""
    owner_app, rescuer_app = app_factory(lease=LEASE), app_factory(lease=LEASE)
    owner_cut, rescuer_cut = Cut(owner_app), Cut(rescuer_app)
    work, started, release = held_task(owner_app)
    held_task(rescuer_app)
    for each in (owner_app, rescuer_app):
        each.task(name="noop")(_noop)
    owner = start_worker(owner_app)
    handle = work.enqueue("owner")
    assert started.wait(10)
    rescuer = start_worker(rescuer_app)
    wait_for(lambda: rescuer.state == "running", what="the rescuer to start")
    owner_cut.cut()
    rescuer_cut.cut()
    time.sleep(4 * LEASE)
    rescuer_cut.restore()
    rescuer_app.tasks["noop"].enqueue()  # wakes the rescuer's poll loop from its backoff
    time.sleep(0.5 * LEASE)
    owner_cut.restore()
    release.set()
    run = handle.wait(15)
    assert (run.status, run.result, run.attempt) == ("succeeded", "owner", 1)
    assert rescuer.counters.rescued == 0 and owner.counters.lost == 0


def _noop() -> None:
    return None


def test_a_partitioned_worker_is_fenced_off_and_its_run_is_rescued(app_factory: Callable[..., rota.App]) -> None:
    lonely_app, healthy_app = app_factory(lease=LEASE), app_factory(lease=LEASE)
    lonely_cut = Cut(lonely_app)
    work, started, release = held_task(lonely_app, retries=1)

    @healthy_app.task(name="work", retries=1)
    def again(label: str) -> str:
        return "healthy"

    lonely = start_worker(lonely_app)
    handle = work.enqueue("lonely")
    assert started.wait(10)
    lonely_cut.cut()
    healthy = start_worker(healthy_app)
    run = handle.wait(15)  # rescued after the lease, retried by the healthy worker
    assert (run.status, run.result, run.attempt) == ("succeeded", "healthy", 2)
    assert run.attempts[0]["status"] == "lost"
    release.set()
    lonely_cut.restore()
    # Fenced off either way: its renewal finds the lease lost before the handler's result
    # arrives (dropped, counted as lost), or the result is queued first and its token-checked
    # write is refused (counted as a stale write).
    wait_for(
        lambda: lonely.counters.stale_writes + lonely.counters.lost == 1, what="the fenced-off result to be discarded"
    )
    assert handle.refresh().result == "healthy" and healthy.counters.rescued == 1


def test_the_rescue_rule_waits_a_lease_after_an_outage_and_after_a_database_start() -> None:
    outage = Outage(lease=10.0, max_backoff=1.0)
    now = rota.FakeClock().now()
    assert outage.may_rescue(now)
    outage.failed(DatabaseUnavailable("x"))
    assert not outage.may_rescue(now)
    outage.ok()
    assert not outage.may_rescue(now)  # a lease must pass after the outage
    outage.rescue_after = 0.0
    outage.db_started = now - timedelta(seconds=5)
    assert not outage.may_rescue(now)  # the server started less than a lease ago
    outage.db_started = now - timedelta(seconds=11)
    assert outage.may_rescue(now)


def test_the_store_reports_when_the_database_server_started(app: rota.App) -> None:
    app.prepare()
    started = app.store.database_started()
    if app.store.dialect == "sqlite":
        assert started is None
    else:
        assert started is not None and started < app.store.now()


def test_unencodable_results_and_errors_are_stored_escaped_and_every_outcome_is_written(app: rota.App) -> None:
    @app.task(name="surrogate")
    def surrogate() -> str:
        return "file-\udcff.txt"

    @app.task(name="nul")
    def nul() -> dict[str, str]:
        return {"text": "a\x00b"}

    @app.task(name="bad_error")
    def bad_error() -> None:
        raise ValueError("cannot open \udcfe\x00")

    @app.task(name="fine")
    def fine() -> int:
        return 1

    start_worker(app)
    handles = [surrogate.enqueue(), nul.enqueue(), bad_error.enqueue(), fine.enqueue()]
    runs = [h.wait(10) for h in handles]
    assert [r.status for r in runs] == ["succeeded", "succeeded", "failed", "succeeded"]
    assert runs[0].result == "file-\\udcff.txt" and runs[1].result == {"text": "a\\x00b"}
    assert runs[2].error is not None and "cannot open \\udcfe\\x00" in runs[2].error["message"]


def test_an_outcome_the_store_refuses_fails_that_run_only_with_a_clear_error(app: rota.App) -> None:
    @app.task(name="t")
    def t() -> None: ...

    handles = [t.enqueue(), t.enqueue()]
    claimed = app.store.claim("tester", 2, None, 30.0)
    worker = app.worker()
    bad = Outcome(claimed[0].id, claimed[0].token, "succeeded", result='"\udcff"')  # bypasses encoding
    good = Outcome(claimed[1].id, claimed[1].token, "succeeded", result="7")

    async def flush() -> None:
        worker._bind_loop()
        worker._outbox = [bad, good]
        await worker._flush()

    asyncio.run(flush())
    first, second = (h.refresh() for h in handles)
    assert first.status == "failed" and first.error is not None
    assert first.error["type"] == "UnstorableOutcome" and "could not be stored" in first.error["message"]
    assert (second.status, second.result) == ("succeeded", 7)


def test_the_outcome_writer_is_restarted_if_it_dies(app: rota.App, caplog: pytest.LogCaptureFixture) -> None:
    @app.task(name="t")
    def t(n: int) -> int:
        return n

    worker = app.worker(install_signal_handlers=False)
    real, failures = worker._flush, [1]

    async def flaky() -> bool:
        if failures:
            failures.pop()
            raise RuntimeError("injected writer crash")
        return await real()

    worker._flush = flaky  # type: ignore[method-assign]
    worker.start()
    with caplog.at_level(logging.ERROR, logger="rota.worker"):
        runs = [t.enqueue(n).wait(10) for n in range(3)]
    assert [r.result for r in runs] == [0, 1, 2]
    assert "the outcome writer failed; restarting it" in caplog.text


@contextlib.contextmanager
def sqlite_write_lock(path: str) -> Iterator[None]:
    """A second connection holding SQLite's write lock."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        conn.execute("ROLLBACK")
        conn.close()


def test_a_result_finished_while_sqlite_is_locked_past_the_busy_timeout_is_kept(tmp_path: Any) -> None:
    """(SQLite's own lock: once, not once per store.)"""
    path = f"{tmp_path}/locked.db"
    app = make_app(f"sqlite:///{path}?busy_timeout=0.1", lease=LEASE)
    try:
        work, started, release = held_task(app, retries=2)
        worker = start_worker(app)
        handle = work.enqueue("kept")
        assert started.wait(10)
        with sqlite_write_lock(path):
            release.set()
            time.sleep(4 * LEASE)
        run = handle.wait(15)
        worker.stop(wait=True, timeout=10)
    finally:
        app.close()
    assert (run.status, run.result, run.attempt) == ("succeeded", "kept", 1)
    assert worker.counters.stale_writes == 0 and worker.counters.rescued == 0


def test_transient_database_errors_are_classified(app: rota.App, tmp_path: Any) -> None:
    app.prepare()
    store: Any = app.store
    if store.dialect == "postgresql":
        with pytest.raises(DatabaseTransient), store._tx() as s:
            s.q_text("SET TRANSACTION READ ONLY")
            s.q_text("UPDATE rota_runs SET priority = 0")
        with pytest.raises(DatabaseError) as info, store._tx() as s:
            s.q_text("SELECT 1/0")
        assert not isinstance(info.value, DatabaseTransient)
        return
    if store.dialect == "mysql":  # a read-only transaction (1792: also every one under tx_read_only)
        with pytest.raises(DatabaseTransient, match="read-only"), store._tx() as s:
            s.q_text("START TRANSACTION READ ONLY")
            s.q_text("UPDATE rota_runs SET priority = 0")
        with pytest.raises(DatabaseError) as info, store._tx() as s:
            s.q_text("SELECT * FROM no_such_table")
        assert not isinstance(info.value, DatabaseTransient)
        return
    with sqlite_write_lock(store.path):
        store.busy_timeout = 0.05
        blocked = rota.App(f"sqlite:///{store.path}?busy_timeout=0.05")
        with pytest.raises(DatabaseTransient, match="locked"):
            blocked.store.heartbeat([(1, 1)], 1.0)
        blocked.close()


def test_a_process_isolated_run_that_loses_its_lease_never_makes_the_stuck_count_negative(
    app: rota.App, tmp_path: Any
) -> None:
    from ..apps import basic

    worker_app = basic.app
    worker_app.database_url = app.database_url
    worker_app._store = app._store
    worker_app._ready = False
    try:
        worker = start_worker(worker_app, heartbeat_interval=0.2)
        handle = basic.hang_isolated.enqueue(str(tmp_path / "child.pid"))
        wait_for(lambda: handle.refresh().status == "running", what="the run to start")
        store: Any = app.store
        with store._tx() as s:  # someone else took the run (what a rescue after a partition does)
            s.q_text(f"UPDATE rota_runs SET token = token + 1000 WHERE id = {int(handle.id)}")
        wait_for(lambda: worker.counters.lost == 1, what="the lease loss")
        wait_for(lambda: not worker.inflight, what="the slot")
        time.sleep(0.5)  # the child is killed; its thread returns
        assert worker.stuck == 0 and worker.free_slots == worker.concurrency
    finally:
        for w in list(worker_app._workers):
            w.stop(wait=True, timeout=10)
        worker_app._workers.clear()


def test_stuck_handlers_are_shown_in_the_worker_registry(app: rota.App) -> None:
    release = threading.Event()

    @app.task(name="hang", timeout=0.1)
    def hang() -> None:
        release.wait(30)

    worker = start_worker(app, concurrency=2, heartbeat_interval=0.2)
    hang.enqueue()
    wait_for(lambda: worker.stuck == 1, what="a stuck handler")
    wait_for(lambda: [w.stuck for w in app.list_workers()] == [1], what="the registry to show it")
    assert app.stats()["stuck"] == 1
    release.set()
    wait_for(lambda: [w.stuck for w in app.list_workers()] == [0], what="the registry to clear it")


def test_a_failed_registry_update_keeps_the_lease_loss_news(app: rota.App) -> None:
    work, started, release = held_task(app)
    worker = start_worker(app, heartbeat_interval=0.2)
    store: Any = app.store

    def broken(*args: Any) -> None:
        raise DatabaseError("injected: the registry update failed")

    store.worker_seen = broken
    handle = work.enqueue("x")
    assert started.wait(10)
    with store._tx() as s:
        s.q_text(f"UPDATE rota_runs SET token = token + 1000 WHERE id = {int(handle.id)}")
    wait_for(lambda: worker.counters.lost == 1, what="the lease loss to be noticed")
    release.set()


def test_an_attempts_finished_at_comes_from_the_database_clock(app_factory: Callable[..., rota.App]) -> None:
    clock = rota.FakeClock(datetime(2021, 6, 1, 3, 0, tzinfo=UTC))  # far from the local clock
    app = app_factory(clock=clock)

    @app.task(name="fails", retries=1, backoff=0)
    def fails() -> None:
        raise RuntimeError("once")

    handle = fails.enqueue()
    asyncio.run(app.worker().run_until_idle())
    attempt = handle.refresh().attempts[0]
    started, finished = (attempt[k] for k in ("started_at", "finished_at"))
    assert started[:16] == finished[:16], attempt  # same clock: seconds apart, not years


def test_an_async_handler_that_blocks_the_loop_is_named_in_a_warning(
    app: rota.App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(name="blocker")
    async def blocker() -> str:
        time.sleep(1.2)  # the mistake: blocks every run of the worker
        return "done"

    with caplog.at_level(logging.WARNING, logger="rota.worker"):
        start_worker(app)
        handle = blocker.enqueue()
        assert handle.wait(10).status == "succeeded"
        wait_for(lambda: "event loop was blocked" in caplog.text, what="the warning")
    assert f"run {handle.id} (blocker)" in caplog.text


@pytest.mark.postgres
def test_a_tick_waiting_on_a_lock_does_not_hold_up_claims(pg_url: str) -> None:
    import psycopg

    from ..conftest import make_app

    app = make_app(pg_url)

    @app.schedule(name="every", every=1)
    def every() -> None: ...

    @app.task(name="now")
    def now() -> str:
        return "ran"

    worker = start_worker(app)
    try:
        wait_for(lambda: worker.state == "running", what="the worker to start")
        with psycopg.connect(pg_url) as holder:  # a host frozen mid-transaction on the schedule's row
            holder.execute("SELECT name FROM rota_schedules WHERE name = 'every' FOR UPDATE")
            time.sleep(1.5)  # the next tick is due and its insert waits on the lock
            assert now.enqueue().wait(5).status == "succeeded"
            holder.rollback()
        wait_for(lambda: worker.counters.ticks >= 2, what="the waiting tick to go through")
    finally:
        worker.stop(wait=True, timeout=10)
        app.close()


def test_an_outage_while_writing_outcomes_does_not_swallow_the_poll_loops_wake_up(app: rota.App) -> None:
    @app.task(name="t")
    def t() -> None: ...

    t.enqueue()
    claimed = app.store.claim("tester", 1, None, 30.0)
    worker = app.worker()
    cut = Cut(app)
    cut.cut()

    async def flush() -> tuple[bool, bool]:
        worker._bind_loop()
        worker._wake.set()  # a wake-up the poll loop has not consumed yet
        worker._outbox = [Outcome(claimed[0].id, claimed[0].token, "succeeded", result="1")]
        written = await worker._flush()
        return written, worker._wake.is_set()

    written, wake_kept = asyncio.run(flush())
    assert not written and wake_kept and len(worker._outbox) == 1  # kept for the next try
