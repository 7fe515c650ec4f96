"""Parked runs and rates (issue 43) on every store: a park frees the worker and limit slots
but not the rate's window (the start it made stays counted), each resume is a start that
takes room in the window again, and a run resumed while its rate is full waits for the
window as any run over its rate does: pending, due later, `Run.waiting` saying it is the
rate (not the old sleep or signal), and shown so by `rota run ID`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from click.testing import CliRunner

import rota
from rota import lifecycle
from rota.cli import main

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def _starts(app: rota.App, name: str) -> int:
    return next(r.started for r in app.store.list_rates() if r.name == name)  # type: ignore[attr-defined]


def _waits_for(app: rota.App, run_id: str, kind: str) -> bool:
    run = app.get_run(run_id)
    return run.status == "pending" and run.waiting is not None and run.waiting["kind"] == kind


def test_each_resume_takes_room_in_the_rates_window(app: rota.App) -> None:
    @app.task(name="rated_flow", rate=rota.Rate(3, per=timedelta(hours=1), name="api"), pass_context=True)
    def rated_flow(ctx: rota.RunContext) -> str:
        ctx.step("one", lambda: 1)
        got = ctx.wait_for("go", timeout=timedelta(hours=1))
        return "went" if got else "timed out"

    start_worker(app)
    ref = rated_flow.enqueue()
    wait_for(lambda: _waits_for(app, ref.id, "signal"), what="the park")
    assert _starts(app, "api") == 1  # the park keeps its start in the window
    app.signal(ref.id, "go")
    assert ref.wait(10).result == "went"
    assert _starts(app, "api") == 2  # the resume was a start of its own


def test_a_run_resumed_while_its_rate_is_full_waits_for_the_window(app: rota.App) -> None:
    per = 4.0

    @app.task(name="rated_waiter", rate=rota.Rate(1, per=per, name="slow-api"), pass_context=True)
    def rated_waiter(ctx: rota.RunContext) -> str:
        ctx.step("one", lambda: 1)
        got = ctx.wait_for("go", timeout=timedelta(hours=1))
        return "went" if got else "timed out"

    start_worker(app)
    ref = rated_waiter.enqueue()
    wait_for(lambda: _waits_for(app, ref.id, "signal"), what="the park")
    assert app.signal(ref.id, "go").woken  # due now, but its one start per window is used
    wait_for(lambda: _waits_for(app, ref.id, "rate"), what="the wait for the rate")
    run = app.get_run(ref.id)
    now = app.store.now()
    assert run.waiting is not None
    assert (run.waiting["rate"], run.waiting["kind"]) == ("slow-api", "rate")
    until = datetime.fromisoformat(run.waiting["until"])
    assert until == run.due_at and now < until <= now + timedelta(seconds=per)
    assert lifecycle.state_of(run, now) == lifecycle.DUE_LATER  # not parked: its wait is over
    assert run.attempt == 0 and run.started_at is None  # the park gave its attempt back; none taken since

    out = CliRunner(env={"COLUMNS": "300"}).invoke(main, ["--database-url", app.store.url, "run", ref.id])
    assert out.exit_code == 0, out.output
    assert "waiting: rate 'slow-api' full until " in out.output and "parked" not in out.output
    data = json.loads(CliRunner().invoke(main, ["--database-url", app.store.url, "run", ref.id, "--json"]).output)
    assert data["waiting"]["kind"] == "rate"

    done = ref.wait(per + 10)
    assert (done.status, done.result, done.attempt) == ("succeeded", "went", 1)
    assert done.waiting is None
    assert [s["name"] for s in done.steps] == ["one", "wait:go"]


def test_a_run_over_its_rate_shows_the_rate_it_waits_for(app: rota.App) -> None:
    @app.task(name="plain_rated", rate=rota.Rate(1, per=timedelta(hours=1), name="quota"))
    def plain_rated(n: int) -> int:
        return n

    start_worker(app)
    assert plain_rated.enqueue(1).wait(10).result == 1
    second = plain_rated.enqueue(2)
    wait_for(lambda: _waits_for(app, second.id, "rate"), what="the wait for the rate")
    run = app.get_run(second.id)
    assert run.waiting is not None and run.waiting["rate"] == "quota"
    assert lifecycle.state_of(run, app.store.now()) == lifecycle.DUE_LATER
    assert app.cancel(second.id).status == "cancelled"
    assert app.get_run(second.id).waiting is None
