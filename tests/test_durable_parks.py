"""Parked runs and signals (rota/durable.py, issue 43) on every store: ctx.sleep and
ctx.wait_for end the handler's execution without holding a slot, a signal resumes the run
(kept if sent before the wait), a timeout gives None, and a finished or unknown run refuses
a signal with a clear answer."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import rota
from rota import lifecycle
from rota.stores.sqlite import sqlite_path

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def parked(app: rota.App, run_id: str) -> bool:
    run = app.get_run(run_id)
    return run.status == "pending" and run.waiting is not None


def test_a_sleep_parks_the_run_and_frees_the_worker_slot(app: rota.App) -> None:
    calls: list[str] = []

    @app.task(name="sleeper", pass_context=True)
    def sleeper(ctx: rota.RunContext) -> str:
        ctx.step("before", lambda: calls.append("before"))
        ctx.progress(0.5, "sleeping")
        ctx.sleep(timedelta(seconds=1.5))
        ctx.step("after", lambda: calls.append("after"))
        return "woke"

    @app.task(name="quick")
    def quick() -> str:
        return "quick"

    start_worker(app, concurrency=1)
    ref = sleeper.enqueue()
    wait_for(lambda: parked(app, ref.id), what="the park")
    run = app.get_run(ref.id)
    assert run.waiting is not None and run.waiting["kind"] == "sleep" and run.waiting["until"]
    assert run.lease_until is None and run.started_at is None and run.attempt == 0
    assert lifecycle.state_of(run, app.store.now()) == lifecycle.PARKED
    assert quick.enqueue().wait(5).status == "succeeded"  # its one slot is free meanwhile
    done = ref.wait(15)
    assert (done.status, done.result) == ("succeeded", "woke")
    assert calls == ["before", "after"]
    assert done.attempt == 1  # a park is not an attempt
    assert [s["name"] for s in done.steps] == ["before", "sleep#1", "after"]
    assert done.waiting is None


def test_a_signal_resumes_a_waiting_run_with_its_payload(app: rota.App) -> None:
    @app.task(name="waiter", pass_context=True)
    def waiter(ctx: rota.RunContext) -> Any:
        got = ctx.wait_for("approved", timeout=timedelta(hours=1))
        return None if got is None else {"payload": got.payload, "name": got.name}

    start_worker(app)
    ref = waiter.enqueue()
    wait_for(lambda: parked(app, ref.id), what="the park")
    run = app.get_run(ref.id)
    assert run.waiting is not None and (run.waiting["kind"], run.waiting["signal"]) == ("signal", "approved")
    assert run.to_json()["waiting"]["signal"] == "approved"
    sent = app.signal(ref.id, "approved", {"by": "ana"})
    assert (sent.stored, sent.woken) == (True, True)
    done = ref.wait(10)
    assert done.result == {"payload": {"by": "ana"}, "name": "approved"}
    with pytest.raises(rota.SignalRefused, match=f"run {ref.id} is succeeded"):
        app.signal(ref.id, "approved", 1)  # finished: refused, even for a name it received


def test_a_signal_sent_before_the_wait_is_kept(app: rota.App) -> None:
    gate = threading.Event()

    @app.task(name="early", pass_context=True)
    def early(ctx: rota.RunContext) -> Any:
        gate.wait(10)
        got = ctx.wait_for("ready", timeout=60)
        return None if got is None else got.payload

    ref = early.enqueue()
    sent = app.signal(ref.id, "ready", [1, 2])  # the run has not even started
    assert (sent.stored, sent.woken) == (True, False)
    assert app.signal(ref.id, "ready", "again").stored is False  # the first is kept
    start_worker(app)
    gate.set()
    done = ref.wait(10)
    assert (done.status, done.result) == ("succeeded", [1, 2])


def test_a_wait_past_its_timeout_returns_none(app: rota.App) -> None:
    @app.task(name="expiring", pass_context=True)
    def expiring(ctx: rota.RunContext) -> str:
        got = ctx.wait_for("never", timeout=0.5)
        return "expired" if got is None else "confirmed"

    start_worker(app)
    done = expiring.enqueue().wait(15)
    assert (done.status, done.result) == ("succeeded", "expired")


def test_signals_to_finished_or_unknown_runs_get_a_clear_answer(app: rota.App) -> None:
    @app.task(name="done_task")
    def done_task() -> int:
        return 1

    start_worker(app)
    ref = done_task.enqueue()
    ref.wait(10)
    with pytest.raises(rota.SignalRefused, match=rf"run {ref.id} is succeeded: .* signal 'x'"):
        app.signal(ref.id, "x")
    with pytest.raises(rota.RunNotFound, match="no run with id 999999"):
        app.signal(999999, "x")
    with pytest.raises(rota.StepError, match="invalid signal name ''"):
        app.signal(ref.id, "")
    with pytest.raises(rota.SerializationError):
        app.signal(ref.id, "x", {1, 2})


def test_cancelling_a_parked_run_cancels_it_at_once(app: rota.App) -> None:
    @app.task(name="long_sleep", pass_context=True)
    def long_sleep(ctx: rota.RunContext) -> None:
        ctx.sleep(timedelta(days=1))

    start_worker(app)
    ref = long_sleep.enqueue()
    wait_for(lambda: parked(app, ref.id), what="the park")
    assert app.cancel(ref.id).status == "cancelled"
    with pytest.raises(rota.SignalRefused):
        app.signal(ref.id, "x")


def _connect(url: str) -> Any:
    if url.startswith("sqlite"):
        return sqlite3.connect(sqlite_path(url), isolation_level=None, timeout=30)
    if url.startswith("mysql"):
        from .test_txn import mysql_connection

        return mysql_connection(url)
    return psycopg.connect(url)


def test_a_signal_in_the_callers_transaction_is_sent_at_its_commit(app: rota.App) -> None:
    @app.task(name="txn_waiter", pass_context=True)
    def txn_waiter(ctx: rota.RunContext) -> Any:
        got = ctx.wait_for("paid", timeout=60)
        return None if got is None else got.payload

    start_worker(app)
    ref = txn_waiter.enqueue()
    wait_for(lambda: parked(app, ref.id), what="the park")
    conn = _connect(app.store.url)
    try:
        if isinstance(conn, sqlite3.Connection):
            conn.execute("BEGIN IMMEDIATE")
        app.signal(ref.id, "paid", 10, connection=conn)
        conn.rollback()  # rolled back: never sent
        time.sleep(0.3)
        assert parked(app, ref.id)
        if isinstance(conn, sqlite3.Connection):
            conn.execute("BEGIN IMMEDIATE")
        assert app.signal(ref.id, "paid", 20, connection=conn).woken
        conn.commit()
    finally:
        conn.close()
    assert ref.wait(10).result == 20


def test_async_handlers_sleep_and_wait(app: rota.App) -> None:
    @app.task(name="async_waiter", pass_context=True)
    async def async_waiter(ctx: rota.RunContext) -> Any:
        await ctx.sleep_async(0.2)
        got = await ctx.wait_for_async("go", timeout=30)
        return None if got is None else got.payload

    start_worker(app)
    ref = async_waiter.enqueue()

    def waits_for_the_signal() -> bool:  # one read: between two, the sleep's end may resume the run
        run = app.get_run(ref.id)
        return run.status == "pending" and run.waiting is not None and run.waiting["kind"] == "signal"

    wait_for(waits_for_the_signal, what="the wait")
    app.signal(ref.id, "go", "went")
    assert ref.wait(10).result == "went"


def test_progress_arrives_with_the_heartbeat(app: rota.App) -> None:
    release = threading.Event()

    @app.task(name="reporter", pass_context=True)
    def reporter(ctx: rota.RunContext) -> None:
        ctx.progress(0.25, "a quarter")
        release.wait(10)

    start_worker(app)
    ref = reporter.enqueue()
    wait_for(lambda: app.get_run(ref.id).progress is not None, what="the progress")
    progress = app.get_run(ref.id).progress
    assert progress is not None and (progress["fraction"], progress["message"]) == (0.25, "a quarter")
    release.set()
    ref.wait(10)
    with pytest.raises(rota.StepError, match="invalid progress fraction 2"):
        rota.durable.Durable(app.store, 1, 1, "t").set_progress(2)


def test_rota_run_shows_the_steps_and_the_wait(app: rota.App) -> None:
    from click.testing import CliRunner

    from rota.cli import main

    @app.task(name="shown", pass_context=True)
    def shown(ctx: rota.RunContext) -> None:
        ctx.step("create-account", lambda: {"id": 7})
        ctx.wait_for("email-confirmed", timeout=timedelta(days=7))

    start_worker(app)
    ref = shown.enqueue()
    wait_for(lambda: parked(app, ref.id), what="the park")
    runner = CliRunner(env={"COLUMNS": "300"})
    out = runner.invoke(main, ["--database-url", app.store.url, "run", ref.id])
    assert out.exit_code == 0, out.output
    assert "parked: signal 'email-confirmed' until " in out.output
    assert "1. create-account: succeeded (attempt 1, " in out.output
    assert "2. wait:email-confirmed: waiting" in out.output
    data = runner.invoke(main, ["--database-url", app.store.url, "run", ref.id, "--json"])
    import json

    record = json.loads(data.output)
    assert [s["name"] for s in record["steps"]] == ["create-account", "wait:email-confirmed"]
    assert record["waiting"]["signal"] == "email-confirmed"


def test_retention_forgets_a_pruned_runs_steps_and_signals(app: rota.App) -> None:
    @app.task(name="kept_steps", pass_context=True)
    def kept_steps(ctx: rota.RunContext) -> int:
        return int(ctx.step("one", lambda: 1))

    start_worker(app)
    ref = kept_steps.enqueue()
    ref.wait(10)
    store: Any = app.store
    assert [s.name for s in store.steps_of(int(ref.id))] == ["one"]
    pruned, _ = store.prune_from("succeeded", -60.0, 100, 0.0)
    assert pruned == 1
    assert store.steps_of(int(ref.id)) == []


def test_pausing_its_schedule_does_not_withdraw_a_parked_run(app: rota.App) -> None:
    @app.schedule(name="nightly-flow", every=timedelta(hours=1), run_immediately=True, pass_context=True)
    def nightly_flow(ctx: rota.RunContext) -> str:
        got = ctx.wait_for("go", timeout=60)
        return "went" if got else "timed out"

    start_worker(app)
    wait_for(lambda: any(parked(app, r.id) for r in app.list_runs(schedule="nightly-flow")), what="the park")
    run_id = app.list_runs(schedule="nightly-flow")[0].id
    app.pause("nightly-flow")
    assert parked(app, run_id)  # still in progress, as a running run would be
    app.signal(run_id, "go")
    wait_for(lambda: app.get_run(run_id).status == "succeeded", what="the resume")
    assert app.get_run(run_id).result == "went"


def test_a_rescue_after_kill9_resumes_after_the_last_saved_step(db_url: str, procs: Any, tmp_path: Any) -> None:
    from .conftest import make_app

    app = make_app(db_url)
    app.migrate()
    victim = procs.start(lease=1.5)
    run_id = app.store.insert_runs(  # (the task lives in tests.apps.basic, not in this process)
        [rota.stores.base.NewRun(task="durable", args="[60]", kwargs="{}", max_attempts=4)]
    )[0][0]
    log = tmp_path / "executions.log"
    wait_for(lambda: log.exists() and "step two" in log.read_text(), 30, "step two to hang")
    procs.kill9(victim)
    procs.start(lease=1.5)
    wait_for(lambda: app.get_run(run_id).status == "succeeded", 40, "the rescue and resume")
    lines = [line.split()[:2] for line in log.read_text().splitlines()]
    assert lines == [["step", "one"], ["step", "two"], ["step", "two"], ["step", "three"]]  # 'one' never again
    run = app.get_run(run_id)
    assert run.result == ["one", "two", "three"] and run.attempt == 2
    assert [(s["name"], s["attempt"]) for s in run.steps] == [("one", 1), ("two", 2), ("three", 2)]
    app.close()


def test_a_hand_back_at_shutdown_resumes_after_the_last_saved_step(db_url: str, procs: Any, tmp_path: Any) -> None:
    from .conftest import make_app

    app = make_app(db_url)
    app.migrate()
    stopping = procs.start(shutdown_timeout=0.5, env={"ROTA_TEST_HANG": "1"})
    run_id = app.store.insert_runs([rota.stores.base.NewRun(task="durable_async", args="[60]", kwargs="{}")])[0][0]
    log = tmp_path / "executions.log"
    wait_for(lambda: log.exists() and "step two" in log.read_text(), 30, "step two to hang")
    stopping.send_signal(15)  # SIGTERM: drain for 0.5 s, then hand back
    stopping.wait(20)
    assert app.get_run(run_id).status == "pending"
    procs.start()
    wait_for(lambda: app.get_run(run_id).status == "succeeded", 30, "the resume")
    lines = [line.split()[:2] for line in log.read_text().splitlines()]
    assert lines == [["step", "one"], ["step", "two"], ["step", "two"], ["step", "three"]]  # 'one' never again
    assert app.get_run(run_id).result == ["one", "two", "three"]
    app.close()


def test_retry_and_retry_many_leave_a_parked_run_alone(app: rota.App) -> None:
    @app.task(name="parked_flow", pass_context=True)
    def parked_flow(ctx: rota.RunContext) -> None:
        ctx.sleep(timedelta(hours=1))

    start_worker(app)
    ref = parked_flow.enqueue()
    wait_for(lambda: parked(app, ref.id), what="the park")
    assert app.retry_many(status="failed", task="parked_flow") == 0
    with pytest.raises(rota.ConfigurationError, match=f"run {ref.id} is still pending"):
        app.retry(ref.id)
    assert parked(app, ref.id)


def test_a_parked_run_frees_its_limit_slot(app: rota.App) -> None:
    @app.task(name="limited", limit=1, pass_context=True)
    def limited(ctx: rota.RunContext, n: int) -> int:
        if n == 0:
            ctx.sleep(timedelta(hours=1))
        return n

    start_worker(app)
    first = limited.enqueue(0)
    wait_for(lambda: parked(app, first.id), what="the park")
    assert limited.enqueue(1).wait(10).result == 1  # the limit of 1 is free while the first is parked
