"""Rate limits (rota.Rate), enforced by the database on its clock: contract tests on both
stores with a FakeClock (a sliding window, not fixed buckets; retries count; a waiting run
costs no attempt and is due when the window opens), plus an idle worker's CPU while 10,000
runs wait on a rate of 1 a minute."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import rota
from rota.stores.base import Outcome
from rota.stores.records import REFUSE_DELAY, REFUSED

from .conftest import WITH_MYSQL, make_app, store_url
from .procs import WorkerProcs, cpu_seconds, wait_until


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


T0 = datetime(2030, 1, 1, tzinfo=UTC)


def _app(db_url: str, clock: rota.FakeClock) -> tuple[rota.App, Any, Any]:
    app = make_app(db_url, clock=clock)

    @app.task(rate=rota.Rate(2, per=timedelta(seconds=10), by="account"), name="call", retries=3)
    def call(account: str, n: int = 0) -> None: ...

    @app.task(rate=rota.Rate(1, per=5, name="github"), name="gh")
    def gh(n: int) -> None: ...

    app.migrate()
    app.prepare()
    return app, call, gh


def _claim(app: rota.App) -> list[Any]:
    return app.store.claim("w", 100, None, 30.0)


@pytest.fixture
def rated(db_url: str) -> Any:
    clock = rota.FakeClock(T0)
    app, call, gh = _app(db_url, clock)
    yield app, call, gh, clock
    app.close()


def test_at_most_n_starts_per_window_the_rest_wait_without_an_attempt(rated: Any) -> None:
    app, call, _, clock = rated
    for n in range(5):
        call.enqueue("acme", n)
    call.enqueue("other")
    first = _claim(app)
    assert sorted(json.loads(c.args) for c in first) == [["acme", 0], ["acme", 1], ["other"]]
    assert _claim(app) == []
    waiting = app.list_runs(status="pending")
    assert len(waiting) == 3 and all(r.attempt == 0 for r in waiting)
    # the waiting runs are due when the window opens: a worker sleeps until then
    state = app.store.poll_state(None)
    assert state.next_run_due == T0 + timedelta(seconds=10)
    clock.advance(9.9)
    assert _claim(app) == []
    clock.advance(0.1)
    assert len(_claim(app)) == 2


def test_the_window_slides_rather_than_resetting_on_a_boundary(rated: Any) -> None:
    app, call, _, clock = rated
    for n in range(6):
        call.enqueue("acme", n)
    assert len(_claim(app)) == 2
    clock.advance(6)  # starts at 0 and 0: full until 10
    assert _claim(app) == []
    clock.advance(4)  # at 10 both leave: two more
    assert len(_claim(app)) == 2
    clock.advance(9)  # at 19 those two (at 10) are still in the window
    assert _claim(app) == []
    clock.advance(1)
    assert len(_claim(app)) == 2


def test_retries_count_as_starts(rated: Any) -> None:
    app, call, _, clock = rated
    call.enqueue("acme")
    call.enqueue("acme", 1)
    call.enqueue("acme", 2)
    first = _claim(app)
    assert len(first) == 2
    err = '{"type":"E","message":"m"}'
    app.store.finish([Outcome(first[0].id, first[0].token, "pending", error=err, retry_in=0.0, history="{}")])
    assert _claim(app) == []  # the retry waits for the window like any start
    clock.advance(10)
    again = _claim(app)
    assert len(again) == 2 and first[0].id in {c.id for c in again}


def test_a_named_rate_is_shared_and_starts_as_soon_as_the_window_allows(rated: Any) -> None:
    app, _, gh, clock = rated
    for n in range(3):
        gh.enqueue(n)
    assert len(_claim(app)) == 1
    clock.advance(2)
    assert _claim(app) == []
    assert app.store.poll_state(None).next_run_due == T0 + timedelta(seconds=5)
    clock.advance(3)
    assert len(_claim(app)) == 1
    (info,) = [r for r in app.store.list_rates() if r.name == "github"]  # type: ignore[attr-defined]
    assert (info.max, info.per, info.started, info.waiting) == (1, 5.0, 1, 1)


def _started_in_window(app: rota.App, name: str) -> int:
    (info,) = [r for r in app.store.list_rates() if r.name == name]  # type: ignore[attr-defined]
    return int(info.started)


def test_a_refused_rated_run_gives_its_start_back_to_the_window(rated: Any) -> None:
    """A run given back by a worker that lacks its task (a rolling deploy: `refuse`) never
    started its handler: its start leaves the window, so refusals use no room, and the window
    still never holds more than N real starts. (Refusals kept their starts: after N of them a
    rate of N per window let nothing start until the window passed.)"""
    app, call, _, clock = rated
    for n in range(3):
        call.enqueue("acme", n)
    first = _claim(app)  # two starts in one claim (the same start time): the window is full
    assert len(first) == 2 and _started_in_window(app, "call") == 2
    refused = [Outcome(c.id, c.token, REFUSED, error='{"type":"TaskNotFound","message":"m"}') for c in first]
    assert app.store.finish(refused) == {c.id for c in first}
    assert [o.written_status for o in refused] == ["pending", "pending"]
    assert _started_in_window(app, "call") == 0
    clock.advance(REFUSE_DELAY[0])  # the refused runs are due again, the window still open
    again = _claim(app)  # a worker that registers the task: their room is theirs again
    assert {c.id for c in again} == {c.id for c in first} and _started_in_window(app, "call") == 2
    clock.advance(9)  # T0 + 10: the two real starts (at T0 + 1) still fill the window
    assert _claim(app) == []
    clock.advance(1)
    assert len(_claim(app)) == 1


def test_a_rated_run_is_never_held_and_one_handed_back_after_its_start_keeps_it(rated: Any) -> None:
    """Rated runs are only claimed into free slots (their start logged at the claim), so no
    held rated run is ever handed back; one handed back after its handler started (at a
    shutdown) keeps its start in the window: the handler ran."""
    app, call, _, _ = rated
    call.enqueue("acme")
    call.enqueue("acme", 1)
    assert app.store.claim("w", 10, None, 30.0, 0) == []  # no free slot: none claimed, none held
    (c,) = app.store.claim("w", 10, None, 30.0, 1)
    assert not c.held and c.started_at is not None
    assert app.store.hand_back([(c.id, c.token)], "shutdown") == {c.id}
    assert _started_in_window(app, "call") == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"per": 0}, "per= must be seconds"),
        ({"per": "1m"}, "per= must be seconds"),
        ({"per": 1, "by": 3}, "by= must be a parameter name"),
    ],
)
def test_a_bad_rate_is_refused_in_one_line(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(rota.ConfigurationError, match=message):
        rota.Rate(5, **kwargs)


def test_10000_runs_waiting_on_a_rate_cost_an_idle_worker_under_one_percent_of_a_core(
    db_url: str, tmp_path: Path
) -> None:
    app = make_app(db_url)

    @app.task(rate=rota.Rate(1, per=60, name="slow"), name="tests.apps.flow.slow")
    def slow(n: int) -> None: ...

    app.migrate()
    app.prepare()
    slow.enqueue_many([((n,), {}) for n in range(10_000)])
    procs = WorkerProcs(db_url, tmp_path)
    try:
        proc = procs.start("tests.apps.flow:app", concurrency=4, poll=0.5)
        wait_until(lambda: len(app.list_runs(status="succeeded")) == 1, 60, "the first run to start")
        time.sleep(2.0)  # settle: the waiting runs are now due in a minute
        # two windows of 5 s, the quieter counted: polling shows in both, a load spike of the
        # machine (a neighbour's tests on both cores) or the worker's minute check in one only
        used = min(_cpu_used(proc.pid, 5.0) for _ in range(2))
        # No busy polling, by construction: the waiting runs are due when the window opens
        # (about a minute on), so the worker sleeps on its next-due time until then.
        now = app.store.now()
        waiting = app.list_runs(status="pending", limit=50)
        assert waiting and all((r.due_at - now).total_seconds() > 40 for r in waiting), waiting[:3]
        # The CPU it uses meanwhile (measured ~0.8 % of a core, as an idle worker with no runs)
        # is a bench figure; here only a gross regression (polling them) fails: 10 % of a core
        # (on 2026-12-07 this machine measured 5-6 % at this commit and at the session's start
        # alike, against ~0.8 % before: noted for an issue of its own, not this test's subject).
        assert used < 0.5, f"an idle worker used {used:.3f} s of CPU in 5 s"
        assert len(app.list_runs(status="succeeded")) == 1
    finally:
        procs.stop_all()
        app.close()


def _cpu_used(pid: int, seconds: float) -> float:
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return cpu_seconds(pid) - before


def _redeploy(db_url: str, clock: rota.FakeClock, rate: rota.Rate) -> rota.App:
    """A newer deploy of the task `gh` with another rate (a worker storing it at start)."""
    app = make_app(db_url, clock=clock)

    @app.task(rate=rate, name="gh")
    def gh(n: int) -> None: ...

    app.prepare()
    return app


@pytest.mark.parametrize(
    ("rate", "claimable"),
    [(rota.Rate(3, per=5, name="github"), 2), (rota.Rate(1, per=1, name="github"), 0)],
    ids=["raised max", "shorter per"],
)
def test_a_deploy_that_changes_a_rate_frees_the_runs_waiting_for_the_old_window(
    rated: Any, db_url: str, rate: rota.Rate, claimable: int
) -> None:
    app, _, gh, clock = rated
    for n in range(3):
        gh.enqueue(n)
    later = gh.options(delay=60).enqueue(9)  # due later of its own accord: not the rate's doing
    soon = gh.options(delay=2).enqueue(8)  # due before the window opens: not moved before it is due
    exact = gh.options(run_at=T0 + timedelta(seconds=5)).enqueue(7)  # due at the opening itself, by chance
    assert len(_claim(app)) == 1
    assert _claim(app) == []  # the other two wait for 00:00:05, the old window's opening
    clock.advance(0.5)
    newer = _redeploy(db_url, clock, rate)
    try:
        assert len(_claim(app)) == claimable  # a bigger rate: at once
        if claimable == 0:  # a shorter window: it opens after 1 s, not 5 s
            assert app.store.poll_state(None).next_run_due == T0 + timedelta(seconds=1)
            clock.advance(0.5)
            assert len(_claim(app)) == 1
        assert app.get_run(later.id).due_at == T0 + timedelta(seconds=60)
        assert app.get_run(soon.id).due_at == T0 + timedelta(seconds=2)
        assert app.get_run(exact.id).due_at == T0 + timedelta(seconds=5)  # not the rate's doing: kept
    finally:
        newer.close()


def test_a_named_rate_declared_by_two_tasks_allows_one_start_between_them(db_url: str) -> None:
    """Two different tasks naming rota.Rate(1, per=60, name="github") share one window: once
    one of them started, the other's run waits pending (no attempt) until the window opens."""
    clock = rota.FakeClock(T0)
    app = make_app(db_url, clock=clock)

    @app.task(rate=rota.Rate(1, per=60, name="github"), name="issues")
    def issues(n: int) -> None: ...

    @app.task(rate=rota.Rate(1, per=60, name="github"), name="pulls")
    def pulls(n: int) -> None: ...

    app.migrate()
    app.prepare()
    try:
        first = issues.enqueue(1)
        second = pulls.enqueue(2)
        assert [str(c.id) for c in _claim(app)] == [first.id]
        clock.advance(30)
        assert _claim(app) == []  # the other task's run: the shared window is full
        run = second.refresh()
        assert (run.status, run.attempt, run.started_at) == ("pending", 0, None)
        assert _started_in_window(app, "github") == 1
        assert app.store.poll_state(None).next_run_due == T0 + timedelta(seconds=60)
        clock.advance(29.9)
        assert _claim(app) == []
        clock.advance(0.1)
        assert [str(c.id) for c in _claim(app)] == [second.id]
    finally:
        app.close()


@pytest.mark.parametrize("retries", [1, 0], ids=["retried", "failed"])
def test_a_rated_run_rescued_after_its_worker_was_lost_keeps_its_start_in_the_window(db_url: str, retries: int) -> None:
    """A worker lost while running a rated run (its lease ran out: kill -9, a partition): the
    rescue retries or fails the run, and its start stays in the window, since its handler may
    have run. Only the window's opening lets the next run (or the retry) start."""
    clock = rota.FakeClock(T0)
    app = make_app(db_url, clock=clock)

    @app.task(rate=rota.Rate(1, per=10, name="api"), name="fetch", retries=retries)
    def fetch(n: int) -> None: ...

    app.migrate()
    app.prepare()
    try:
        lost = fetch.enqueue(1)
        (c,) = app.store.claim("w", 1, None, 1.0)  # a one-second lease, never renewed
        assert str(c.id) == lost.id and _started_in_window(app, "api") == 1
        clock.advance(2)
        assert [r.id for r in app.store.rescue()] == [c.id]
        assert lost.refresh().status == ("pending" if retries else "failed")
        assert _started_in_window(app, "api") == 1  # the lost start still counts
        waiting = fetch.enqueue(2)  # due now, like the retry
        assert _claim(app) == []  # neither it nor the retry starts before T0 + 10
        assert waiting.refresh().attempt == 0
        clock.advance(8)
        assert len(_claim(app)) == 1  # the window opened: one start
        assert _claim(app) == []
    finally:
        app.close()
