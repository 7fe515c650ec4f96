"""Issue 18, items 4 and 5 and the smaller one: runs held by a worker (claimed, not started)
are visible as held and count an attempt only when they start; a cancelled run runs no
more, whoever hands it back; kill -9 fails no run that never started. On both stores."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import rota
import rota.worker.prefetch
from rota.cli import main
from rota.stores.base import NewRun, Outcome

from .conftest import WITH_MYSQL, make_app, start_worker, store_url
from .procs import WorkerProcs, wait_until
from .test_crashes import log_lines
from .test_prefetch import Held, _holding


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.fixture
def store_app(app_factory: Callable[..., rota.App]) -> rota.App:
    app = app_factory(lease=30.0)

    @app.task(name="t", retries=2)
    def t(i: int = 0) -> int:
        return i

    return app


def _claim(app: rota.App, limit: int, start: int | None = None, owner: str = "w1") -> list[Any]:
    if start is None:  # every claimed run starts (the call of every release)
        return app.store.claim(owner, limit, None, 30.0)
    return app.store.claim(owner, limit, None, 30.0, start)


def test_a_claim_starts_only_what_fits_and_holds_the_rest(store_app: rota.App) -> None:
    handles = [store_app.tasks["t"].options(priority=p).enqueue(p) for p in (0, 5, 1, 7)]
    claimed = _claim(store_app, 4, start=2)
    started = {c.id for c in claimed if not c.held}
    assert started == {int(handles[3].id), int(handles[1].id)}  # priority 7 and 5 start
    for c in claimed:
        run = store_app.get_run(str(c.id))
        assert run.status == "running" and run.worker == "w1"
        if c.id in started:
            assert not run.held and run.attempt == 1 and run.started_at is not None
        else:  # held: claimed, not started, no attempt counted
            assert run.held and run.attempt == 0 and run.started_at is None and c.attempt == 0
            assert run.to_json()["held"] is True and run.attempts == []


def test_a_start_counts_the_attempt_once_fenced_and_never_after_a_cancel_request(store_app: rota.App) -> None:
    a, b = (store_app.tasks["t"].enqueue(i) for i in range(2))
    ca, cb = sorted(_claim(store_app, 2, start=0), key=lambda c: c.id)
    assert store_app.store.start([(ca.id, ca.token + 1000, 0.0)]) == set()  # not its token
    assert store_app.cancel(b.id).status == "running"  # held: cancel requested, its owner decides
    assert store_app.store.start([(ca.id, ca.token, 0.5), (cb.id, cb.token, 0.0)]) == {ca.id}
    assert store_app.store.start([(ca.id, ca.token, 0.0)]) == set()  # started already
    run = a.refresh()
    assert (run.attempt, run.held) == (1, False) and run.started_at is not None
    run = b.refresh()
    assert (run.attempt, run.held, run.cancel_requested) == (0, True, True)


def test_a_handed_back_run_whose_cancellation_was_requested_ends_cancelled(store_app: rota.App) -> None:
    """Item 4: hand_back looked at nothing; a cancelled run was run again by another worker.
    A held one and a running one (a sync handler that outlived shutdown_timeout)."""
    running, held, plain = (store_app.tasks["t"].options(priority=9 - i).enqueue(i) for i in range(3))
    claims = {c.id: c for c in _claim(store_app, 3, start=1)}  # the first started, two held
    assert [c.held for c in sorted(claims.values(), key=lambda c: c.id)] == [False, True, True]
    assert held.refresh().held and not running.refresh().held
    store_app.cancel(held.id)
    store_app.cancel(running.id)
    assert {(h.refresh().status, h.refresh().cancel_requested) for h in (held, running)} == {("running", True)}
    back = store_app.store.hand_back([(c.id, c.token) for c in claims.values()], "worker w1 shut down")
    assert back == set(claims)
    for h in (held, running):
        run = h.refresh()
        assert run.status == "cancelled" and run.error is not None and run.error["type"] == "Cancelled"
        assert run.finished_at is not None
    assert plain.refresh().status == "pending"
    assert [c.id for c in _claim(store_app, 10, owner="w2")] == [int(plain.id)]  # never the cancelled ones


def test_a_retry_of_a_run_whose_cancellation_was_requested_ends_cancelled(store_app: rota.App) -> None:
    """A cancel request that comes while the attempt fails: the retry would be pending with
    the request set, and claimed again (claims looked at nothing either)."""
    h = store_app.tasks["t"].enqueue(0)
    (c,) = _claim(store_app, 1)
    store_app.cancel(h.id)
    assert store_app.store.finish([Outcome(c.id, c.token, "pending", error='{"type": "E"}', retry_in=0)]) == {c.id}
    assert h.refresh().status == "cancelled"
    assert _claim(store_app, 10) == []


def test_a_held_run_is_handed_back_as_it_was_and_a_started_one_gives_its_attempt_back(store_app: rota.App) -> None:
    h1, h2 = (store_app.tasks["t"].enqueue(i) for i in range(2))
    claims = sorted(_claim(store_app, 2, start=1), key=lambda c: c.id)
    assert [c.held for c in claims] == [False, True]
    store_app.store.hand_back([(c.id, c.token) for c in claims], "shutdown")
    started, held = h1.refresh(), h2.refresh()
    assert (started.status, started.attempt, started.history[-1]["status"]) == ("pending", 0, "handed back")
    assert (held.status, held.attempt, held.history) == ("pending", 0, [])


def test_rescue_returns_a_held_run_to_pending_without_an_attempt(
    app_factory: Callable[..., rota.App], clock: rota.FakeClock
) -> None:
    """Item 5, in the store: with one attempt allowed, a held run of a lost worker ran no
    attempt, so it is pending again, not failed; a started one is failed."""
    app = app_factory(clock=clock, lease=5.0)

    @app.task(name="once")
    def once() -> None: ...

    h1, h2 = once.enqueue(), once.enqueue()
    claims = app.store.claim("w1", 2, None, 5.0, 1)
    assert sorted(c.held for c in claims) == [False, True]
    clock.advance(6)
    rescued = {r.id: r for r in app.store.rescue()}
    assert {rescued[int(h1.id)].status, rescued[int(h2.id)].status} == {"failed", "pending"}
    held = next(h for h in (h1, h2) if rescued[int(h.id)].status == "pending").refresh()
    assert (held.attempt, held.started_at) == (0, None)
    assert "before its start was recorded" in rescued[int(held.id)].message
    # the loss is in its history, marked held: its handler may have started just before
    [entry] = held.history
    assert (entry["status"], entry["held"], entry["attempt"], entry["started_at"]) == ("lost", True, 1, None)
    assert entry["worker"] == "w1" and entry["error"]["type"] == "WorkerLost"
    assert "before its start was recorded" in entry["error"]["message"]
    shown = CliRunner().invoke(main, ["--database-url", app.database_url, "run", held.id]).output
    assert f"attempt 1 on w1: lost (held, no start recorded .. {entry['finished_at']})" in shown, shown


def test_a_run_claimed_ahead_whose_lease_ran_out_before_its_due_time_leaves_no_history(
    app_factory: Callable[..., rota.App], clock: rota.FakeClock
) -> None:
    """A worker starts a held run only at its due time and only under a live lease: one due
    after its lease ran out cannot have started, so its rescue records nothing (a run due
    before then gets the held entry, as above)."""
    app = app_factory(clock=clock, lease=5.0)
    ref = app.task(name="later")(lambda: None).options(delay=timedelta(seconds=8)).enqueue()
    (claim,) = app.store.claim_ahead("w1", 10, None, 5.0, 10.0)
    assert claim.id == int(ref.id)
    clock.advance(6)  # the lease ran out at +5, before the run was due (+8)
    assert [r.status for r in app.store.rescue()] == ["pending"]
    run = ref.refresh()
    assert (run.attempt, run.history, run.due_at) == (0, [], run.scheduled_for)


@pytest.mark.parametrize("how", ["pending", "succeeded", "failed"])
def test_the_outcome_of_a_run_rescued_before_its_start_was_written_is_not_written(
    app_factory: Callable[..., rota.App], clock: rota.FakeClock, how: str
) -> None:
    """A held run its worker started (the start not written yet) and that was rescued when
    the lease ran out: the worker's outcome, its start along, is stale. `finish` writes
    nothing and says so, in a batch with an outcome that is written, too. (SQLite said a
    retry was written: the rescued row, pending with the same token, looked like one.)"""
    app = app_factory(clock=clock, lease=5.0)

    @app.task(name="twice", retries=1)
    def twice() -> None: ...

    twice.enqueue(), twice.enqueue()
    first, held = sorted(app.store.claim("w1", 2, None, 5.0, 1), key=lambda c: c.held)
    clock.advance(6)
    assert {r.id for r in app.store.rescue()} == {first.id, held.id}
    other = app.store.claim("w2", 1, None, 5.0)
    assert [c.id for c in other] == [first.id]  # a retry of the started one: w2 has it now
    stale = Outcome(held.id, held.token, how, error='{"type": "E"}', started=0.0)
    fresh = Outcome(first.id, other[0].token, "succeeded")
    assert app.store.finish([stale, fresh]) == {first.id}
    run = app.get_run(str(held.id))
    assert (run.status, run.attempt, run.started_at, run.error["type"]) == ("pending", 0, None, "WorkerLost")


def test_a_held_run_cancelled_before_it_started_is_recorded_without_an_attempt(
    app_factory: Callable[..., rota.App], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The smaller item: it was recorded with attempt 1 (PostgreSQL)."""
    monkeypatch.setattr(rota.worker.prefetch, "WINDOW", 100.0)
    app = app_factory(lease=1.0)
    job = Held(app)
    handles = job.enqueue(4)
    worker = start_worker(app, concurrency=1, prefetch=2)
    first, second = _holding(app, worker, handles, 2)
    assert first.refresh().held and first.refresh().attempt == 0
    app.cancel(first.id)
    wait_until(lambda: first.refresh().status == "cancelled", 10, "the held run to be cancelled")
    job.release.set()
    assert second.wait(10).status == "succeeded"
    run = first.refresh()
    assert (run.attempt, run.started_at, run.attempts) == (0, None, [])
    assert second.refresh().attempt == 1  # a held run that started counts its attempt


def test_a_running_sync_run_asked_to_cancel_that_outlives_shutdown_is_not_run_again(
    app_factory: Callable[..., rota.App],
) -> None:
    """Item 4: it was handed back and run again from scratch (its handler started twice)."""
    app = app_factory(lease=2.0)
    starts: list[int] = []
    release = threading.Event()

    @app.task(name="stubborn")
    def stubborn() -> None:
        starts.append(1)
        release.wait(20)  # ignores the cancellation

    h = stubborn.enqueue()
    worker = start_worker(app, concurrency=1, shutdown_timeout=0.3)
    wait_until(lambda: starts == [1], 10, "the run to start")
    assert app.cancel(h.id).status == "running"
    worker.stop()
    assert h.refresh().status == "running"  # its handler still runs: kept by the stopped worker (issue 41)
    other = start_worker(app, concurrency=1)
    time.sleep(0.5)
    release.set()
    wait_until(lambda: h.refresh().status == "cancelled", 10, "the hand-back to end it cancelled")
    other.stop()
    run = h.refresh()
    assert starts == [1] and run.status == "cancelled" and run.attempt == 1, run


def test_a_held_run_is_shown_as_held_by_the_cli(store_app: rota.App, db_url: str) -> None:
    h = store_app.tasks["t"].enqueue(0)
    _claim(store_app, 1, start=0)
    runner = CliRunner(env={"COLUMNS": "300"})
    listed = runner.invoke(main, ["--database-url", db_url, "runs"])
    assert listed.exit_code == 0 and " held " in listed.output, listed.output
    shown = runner.invoke(main, ["--database-url", db_url, "run", h.id])
    assert "running (held by w1: not started yet)" in shown.output, shown.output
    data = json.loads(runner.invoke(main, ["--database-url", db_url, "run", h.id, "--json"]).output)
    assert (data["held"], data["started_at"], data["attempt"]) == (True, None, 0)


def _starts(tmp_path: Path) -> set[int]:
    return {int(f[1]) for f in log_lines(tmp_path) if f[0] == "start"}


@pytest.mark.slow
def test_kill9_fails_no_run_that_never_started(db_url: str, tmp_path: Path) -> None:
    """Item 5 with real processes: one attempt allowed (the default). The runs the victim
    held ahead (never started) run on the rescuer; only the started ones are failed."""
    procs = WorkerProcs(db_url, tmp_path)
    procs.env["ROTA_TEST_LOG"] = str(tmp_path / "executions.log")
    app = make_app(db_url)
    try:
        victim = procs.start("tests.apps.prefetch_app:app", concurrency=2)
        calls = [((0, 0.0), {})] + [((i, 30.0), {}) for i in (1, 2)] + [((i, 0.1), {}) for i in (3, 4)]
        runs = [NewRun(task="record", args=json.dumps(list(a)), kwargs=json.dumps(k)) for a, k in calls]
        ids = [run_id for run_id, _ in app.store.insert_runs(runs)]  # one attempt each: the default
        wait_until(lambda: app.store.count_by_status().get("running", 0) == 4, 30, "four runs held by the victim")
        # a run shows `running` as soon as it is claimed, before its handler logs its start
        wait_until(lambda: len(_starts(tmp_path)) == 3, 30, "the first three handlers to start")
        started = _starts(tmp_path)
        held = [run_id for run_id in ids if run_id not in started]
        assert held == ids[3:], [app.get_run(str(i)) for i in ids]  # claimed, their handlers not started
        procs.start(concurrency=4)
        wait_until(lambda: len([w for w in app.list_workers() if w.alive]) == 2, 30, "the rescuer to register")
        procs.kill9(victim)
        wait_until(lambda: all(app.get_run(str(i)).is_final for i in ids), 30, "every run to end after the rescue")
        for run_id in ids[1:3]:
            run = app.get_run(str(run_id))
            assert run.status == "failed" and run.error is not None and "was lost" in run.error["message"]
        for run_id in held:
            run = app.get_run(str(run_id))
            # no attempt counted; the history says the victim held it when it was lost
            assert (run.status, run.attempt) == ("succeeded", 1), run
            assert [(h["status"], h["held"], h["started_at"]) for h in run.history] == [("lost", True, None)], run
        starts = [f for f in log_lines(tmp_path) if f[0] == "start"]
        assert sorted(int(f[1]) for f in starts) == sorted(ids)  # each handler started once
    finally:
        procs.stop_all()
        app.close()


def test_the_web_api_shows_a_held_run_as_held(store_app: rota.App) -> None:
    from starlette.testclient import TestClient

    from rota.web import create_app

    first, second = (store_app.tasks["t"].enqueue(i) for i in range(2))
    store_app.store.claim("w1", 1, None, 30.0, 1)  # the first starts
    store_app.store.claim("w1", 1, None, 30.0, 0)  # the second is held
    with TestClient(create_app(store_app), base_url="http://localhost") as client:
        runs = {r["id"]: r for r in client.get("/api/runs").json()}
        assert (runs[first.id]["held"], runs[second.id]["held"]) == (False, True)
        detail = client.get(f"/api/runs/{second.id}").json()
        assert (detail["held"], detail["started_at"], detail["attempt"], detail["attempts"]) == (True, None, 0, [])
        expected = {**store_app.get_run(second.id).to_json(), "corrupt": [], "raw": {}}
        assert {k: v for k, v in detail.items() if k in expected} == expected  # plus links and due_at


def test_a_held_run_cancelled_while_its_worker_starts_it_is_stopped_and_recorded_as_it_ran(
    app_factory: Callable[..., rota.App], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request races the worker's local start (SQLite has no wake-up; on PostgreSQL the
    NOTIFY may win): either the run never starts (no attempt, no started_at), or the store
    refuses its start, the worker stops the handler at once (long before a heartbeat) and
    the record says it started (attempt 1, started_at): what ran is in the history."""
    monkeypatch.setattr(rota.worker.prefetch, "WINDOW", 100.0)
    app = app_factory(lease=30.0)  # heartbeats every 10 s: the refusal must not wait for one
    starts: list[int] = []
    gate = threading.Event()

    @app.task(name="gated", pass_context=True)
    def gated(ctx: rota.RunContext, i: int) -> int:
        starts.append(i)
        if i == 1:
            gate.wait(20)
        if i == 2:
            for _ in range(200):
                ctx.raise_if_cancelled()
                time.sleep(0.05)
        return i

    handles = [gated.enqueue(i) for i in range(3)]
    worker = start_worker(app, concurrency=1, prefetch=1)
    (target,) = _holding(app, worker, handles, 1)
    assert target is handles[2]
    other = app_factory(lease=30.0)  # another client: no in-process wake-up
    other.cancel(target.id)
    gate.set()  # run 1 ends: the held run 2 starts in its slot unless the worker heard of the request
    run = target.wait(5)
    assert run.status == "cancelled", run
    ran = 2 in starts
    assert (run.attempt, run.started_at is not None) == ((1, True) if ran else (0, False)), (run, starts)


def test_a_held_run_that_runs_on_has_its_start_written_soon(
    app_factory: Callable[..., rota.App], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A held run started by its worker shows as running (started_at, attempt 1) well before
    it ends: its start is written on its own once it has run 50 ms."""
    monkeypatch.setattr(rota.worker.prefetch, "WINDOW", 100.0)
    app = app_factory(lease=30.0)
    gate, long_one = threading.Event(), threading.Event()

    @app.task(name="steps")
    def steps(i: int) -> int:
        if i == 1:
            gate.wait(20)
        if i == 2:
            long_one.wait(20)
        return i

    handles = [steps.enqueue(i) for i in range(3)]
    worker = start_worker(app, concurrency=1, prefetch=1)
    (target,) = _holding(app, worker, handles, 1)
    assert target is handles[2] and target.refresh().held
    gate.set()
    wait_until(lambda: not target.refresh().held, 5, "the start of the held run to be written")
    run = target.refresh()
    assert (run.status, run.attempt) == ("running", 1) and run.started_at is not None
    long_one.set()
    assert target.wait(5).status == "succeeded" and target.refresh().attempt == 1
