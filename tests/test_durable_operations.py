"""What operators do to parked runs (issue 43), on every store, beyond tests/test_durable_parks.py
(cancel of a parked run, a schedule's pause, retry/retry_many of failed runs, retention of a
succeeded run's steps, kill -9 and the hand-back of a running step): a cancel requested while
the handler runs before it parks, a paused queue, a schedule updated or removed, a deploy
(workers stopped and started while a run is parked), retention of the waits, signals and
progress (and never of a parked run), and retry_many of a cancelled parked run."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

import rota
from rota import lifecycle

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for

FINAL = ("succeeded", "failed", "skipped", "cancelled")


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def parked(app: rota.App, run_id: str) -> bool:
    run = app.get_run(run_id)
    return run.status == "pending" and run.waiting is not None and run.waiting["kind"] != "rate"


def _rows(app: rota.App, table: str, run_id: str) -> int:
    store: Any = app.store
    with store._read() as s:
        return int(s.q_text(f"SELECT count(*) FROM {table} WHERE run_id = {store._p('id')}", id=int(run_id))[0][0])


def test_a_cancel_requested_before_the_park_ends_the_run_cancelled(app: rota.App) -> None:
    running, release = threading.Event(), threading.Event()

    @app.task(name="slow_then_sleep", pass_context=True)
    def slow_then_sleep(ctx: rota.RunContext) -> None:
        ctx.step("one", lambda: 1)
        running.set()
        release.wait(10)
        ctx.sleep(timedelta(hours=1))

    start_worker(app)
    ref = slow_then_sleep.enqueue()
    assert running.wait(10)
    assert app.cancel(ref.id).cancel_requested
    release.set()  # the handler parks: the park ends the run cancelled instead
    done = ref.wait(10)
    assert done.status == "cancelled" and done.waiting is None
    assert [s["name"] for s in done.steps] == ["one", "sleep#1"]


def test_a_paused_queue_keeps_a_signalled_run_until_it_is_resumed(app: rota.App) -> None:
    @app.task(name="queued_flow", queue="flows", pass_context=True)
    def queued_flow(ctx: rota.RunContext) -> str:
        got = ctx.wait_for("go", timeout=timedelta(hours=1))
        return "went" if got else "timed out"

    start_worker(app)
    ref = queued_flow.enqueue()
    wait_for(lambda: parked(app, ref.id), what="the park")
    app.pause_queue("flows")
    assert app.signal(ref.id, "go").woken
    time.sleep(0.5)  # a few polls: none claims it
    run = app.get_run(ref.id)
    assert run.status == "pending" and lifecycle.state_of(run, app.store.now()) == lifecycle.DUE
    app.resume_queue("flows")
    assert ref.wait(10).result == "went"


def test_a_schedule_updated_or_removed_leaves_its_parked_run(app: rota.App) -> None:
    @app.task(name="scheduled_flow", pass_context=True)
    def scheduled_flow(ctx: rota.RunContext) -> str:
        got = ctx.wait_for("go", timeout=timedelta(hours=1))
        return "went" if got else "timed out"

    app.add_schedule("flow-hourly", "scheduled_flow", every=3600)
    start_worker(app)
    ref = app.trigger("flow-hourly")
    wait_for(lambda: parked(app, ref.id), what="the park")
    app.update_schedule("flow-hourly", every=7200)  # a redeploy with a changed definition
    assert parked(app, ref.id)
    app.remove_schedule("flow-hourly")
    assert parked(app, ref.id)  # in progress, as a running run would be
    app.signal(ref.id, "go")
    assert ref.wait(10).result == "went"


def test_a_deploy_leaves_parked_runs_to_the_next_workers(app: rota.App) -> None:
    @app.task(name="deployed_flow", pass_context=True)
    def deployed_flow(ctx: rota.RunContext) -> str:
        ctx.step("one", lambda: 1)
        ctx.sleep(3)
        got = ctx.wait_for("go", timeout=timedelta(hours=1))
        return "went" if got else "timed out"

    old = start_worker(app)
    sleeping, waiting = deployed_flow.enqueue(), deployed_flow.enqueue()
    for ref in (sleeping, waiting):
        wait_for(lambda ref=ref: parked(app, ref.id), what="the park")  # type: ignore[misc]
    before = {ref.id: app.get_run(ref.id) for ref in (sleeping, waiting)}
    assert old.stop(timeout=10)  # the old release's worker stops: it holds no parked run
    for ref in (sleeping, waiting):
        run = app.get_run(ref.id)
        assert parked(app, ref.id) and run.history == before[ref.id].history  # nothing handed back
        assert run.waiting == before[ref.id].waiting
    start_worker(app)  # the new release's
    app.signal(waiting.id, "go")  # sent during its sleep: kept for its wait
    app.signal(sleeping.id, "go")
    for ref in (sleeping, waiting):
        done = ref.wait(15)
        assert (done.status, done.result, done.attempt) == ("succeeded", "went", 1)
        assert [s["name"] for s in done.steps] == ["one", "sleep#1", "wait:go"]


def test_retention_forgets_waits_signals_and_progress_and_never_a_parked_run(app: rota.App) -> None:
    @app.task(name="kept_flow", pass_context=True)
    def kept_flow(ctx: rota.RunContext) -> None:
        ctx.step("one", lambda: 1)
        ctx.progress(0.5, "half")
        ctx.wait_for("go", timeout=timedelta(hours=1))

    start_worker(app)
    gone, kept = kept_flow.enqueue(), kept_flow.enqueue()
    for ref in (gone, kept):
        wait_for(lambda ref=ref: parked(app, ref.id), what="the park")  # type: ignore[misc]
        app.signal(ref.id, "other", 1)  # kept for the run, not the one it waits for
    app.cancel(gone.id)
    tables = ("rota_steps", "rota_waits", "rota_signals", "rota_progress")
    assert [_rows(app, t, gone.id) for t in tables] == [2, 1, 1, 1]  # steps: "one" and "wait:go"
    store: Any = app.store
    pruned = sum(store.prune_from(status, -60.0, 100, 0.0)[0] for status in FINAL)  # every final run, however new
    assert pruned == 1
    assert [_rows(app, t, gone.id) for t in tables] == [0, 0, 0, 0]
    assert [_rows(app, t, kept.id) for t in tables] == [2, 1, 1, 1]
    assert parked(app, kept.id)
    app.signal(kept.id, "go")
    assert kept.wait(10).status == "succeeded"


def test_retry_many_of_a_cancelled_parked_run_starts_a_new_run_over(app: rota.App) -> None:
    calls: list[int] = []

    @app.task(name="retried_flow", pass_context=True)
    def retried_flow(ctx: rota.RunContext) -> None:
        ctx.step("one", lambda: calls.append(1))
        ctx.sleep(timedelta(hours=1))

    start_worker(app)
    first = retried_flow.enqueue()
    wait_for(lambda: parked(app, first.id), what="the park")
    app.cancel(first.id)
    assert app.retry_many(status="cancelled", task="retried_flow") == 1
    (again,) = [r for r in app.list_runs(task="retried_flow") if r.id != first.id]
    assert again.retry_of == first.id
    wait_for(lambda: parked(app, again.id), what="the new run's park")
    assert calls == [1, 1]  # steps belong to the run that saved them: the new run starts over
    assert [s["name"] for s in app.get_run(first.id).steps] == ["one", "sleep#1"]
    app.cancel(again.id)
