"""Parked runs against the lifecycle table (rota/lifecycle.py, issue 43), on every store: each
move a parked run makes through the stores' statements (park, signal, cancel, a replacing
tick, the rate's wait after a resume, a schedule's pause) is a transition the table lists,
from the state `state_of` reads before to the one it reads after. So is a removed schedule's
withdrawal of a handed-back run (a pending state the parked one sits beside)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import rota
from rota import lifecycle
from rota.stores.base import Outcome
from rota.stores.records import PARKED

from .conftest import WITH_MYSQL, make_app, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.fixture
def clocked(db_url: str) -> Iterator[tuple[rota.App, rota.FakeClock]]:
    clock = rota.FakeClock()
    app = make_app(db_url, clock=clock)
    yield app, clock
    app.close()


def _state(app: rota.App, run_id: str) -> str:
    return lifecycle.state_of(app.get_run(run_id), app.store.now())


def _moved(app: rota.App, run_id: str, name: str, before: str) -> str:
    """The run's state now; it must be one `name` leads to from `before`."""
    after = _state(app, run_id)
    t = lifecycle.BY_NAME[name]
    assert before in t.from_states and after in t.to_states, (
        f"{name}: {before} -> {after} is not in rota/lifecycle.py (from {t.from_states}, to {t.to_states})"
    )
    return after


def _claim_and_park(app: rota.App, run_id: str, kind: str = "signal", name: str | None = "go",
                    wake_in: float = 3600.0) -> None:  # fmt: skip
    (c,) = [c for c in app.store.claim("w", 100, None, 30.0) if c.id == int(run_id)]
    assert _state(app, run_id) == lifecycle.STARTED
    app.store.finish([Outcome(c.id, c.token, PARKED, result=json.dumps([kind, name]), retry_in=wake_in)])
    _moved(app, run_id, "park", lifecycle.STARTED)


def _parked(app: rota.App, task: Any) -> rota.RunHandle:
    run = task.enqueue()  # (one at a time: a claim takes every due run)
    _claim_and_park(app, run.id)
    return run  # type: ignore[no-any-return]


def test_park_signal_and_cancel_are_the_tables_transitions(clocked: tuple[rota.App, rota.FakeClock]) -> None:
    app, clock = clocked

    @app.task(name="t")
    def t() -> None: ...

    waiter, sleeper, cancelled = [_parked(app, t) for _ in range(3)]
    assert _state(app, waiter.id) == lifecycle.PARKED
    app.signal(waiter.id, "go")
    assert _moved(app, waiter.id, "signal", lifecycle.PARKED) == lifecycle.DUE
    app.cancel(cancelled.id)
    assert _moved(app, cancelled.id, "cancel", lifecycle.PARKED) == "cancelled"
    assert app.get_run(cancelled.id).waiting is None
    clock.advance(3601)  # the wait's timeout passed: due, by the clock alone (no statement)
    assert _state(app, sleeper.id) == lifecycle.DUE


def test_a_replacing_tick_cancels_a_parked_run_of_its_schedule(clocked: tuple[rota.App, rota.FakeClock]) -> None:
    app, _ = clocked

    @app.task(name="t")
    def t() -> None: ...

    app.add_schedule("flow", "t", every=3600, overlap="replace")
    first = app.trigger("flow")
    _claim_and_park(app, first.id)
    app.trigger("flow")  # overlap="replace": the parked run is the schedule's active run
    assert _moved(app, first.id, "overlap", lifecycle.PARKED) == "cancelled"
    assert app.get_run(first.id).error["type"] == "Replaced"  # type: ignore[index]


def test_a_paused_schedule_leaves_its_parked_run_parked(clocked: tuple[rota.App, rota.FakeClock]) -> None:
    app, _ = clocked

    @app.task(name="t")
    def t() -> None: ...

    app.add_schedule("paused-flow", "t", every=3600)
    run = app.trigger("paused-flow")
    _claim_and_park(app, run.id)
    app.pause("paused-flow")  # withdraw takes back pending runs, not parked ones
    assert _state(app, run.id) == lifecycle.PARKED


def test_a_resume_over_the_rate_is_the_rate_wait_transition(clocked: tuple[rota.App, rota.FakeClock]) -> None:
    app, clock = clocked

    @app.task(name="rated", rate=rota.Rate(1, per=60, name="api"))
    def rated() -> None: ...

    app.migrate()
    app.prepare()  # stores the rate
    run = rated.enqueue()
    _claim_and_park(app, run.id)  # its start stays in the window
    app.signal(run.id, "go")
    assert _moved(app, run.id, "signal", lifecycle.PARKED) == lifecycle.DUE
    assert app.store.claim("w", 100, None, 30.0) == []  # the rate is full: moved to its window
    assert _moved(app, run.id, "rate_wait", lifecycle.DUE) == lifecycle.DUE_LATER
    waiting = app.get_run(run.id).waiting
    assert waiting is not None and (waiting["kind"], waiting["rate"]) == ("rate", "api")
    clock.advance(1)
    newer = make_app(app.store.url, clock=clock)  # a deploy that raises the rate: due again at once
    newer.task(name="rated", rate=rota.Rate(2, per=60, name="api"))(lambda: None)
    newer.prepare()
    newer.close()
    assert _moved(app, run.id, "rate_reopen", lifecycle.DUE_LATER) == lifecycle.DUE
    (c,) = app.store.claim("w", 100, None, 30.0)
    assert c.id == int(run.id) and _state(app, run.id) == lifecycle.STARTED


def test_a_removed_schedule_withdraws_its_handed_back_run(clocked: tuple[rota.App, rota.FakeClock]) -> None:
    app, _ = clocked

    @app.task(name="t")
    def t() -> None: ...

    app.add_schedule("handed", "t", every=3600)
    run = app.trigger("handed")
    (c,) = [c for c in app.store.claim("w", 100, None, 30.0) if c.id == int(run.id)]
    app.store.hand_back([(c.id, c.token)], "stop")
    assert _state(app, run.id) == lifecycle.HANDED_BACK
    app.remove_schedule("handed")  # every pending run of a removed schedule is taken back
    assert _moved(app, run.id, "withdraw", lifecycle.HANDED_BACK) == "cancelled"
