"""Damaged durable rows met by a worker (rota.quarantine; rota/durable.py): a saved step, a
parked wait or a signal whose stored value cannot be used. The run whose row it is ends
failed as damaged (DamagedRow, never retried, one line naming the row and the field) or, if
the damaged field is not needed (a time), goes on with it read as empty; the other runs of
the same worker and queue succeed, and the worker goes on taking runs. On every store."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

import rota
from rota import quarantine
from rota.cli import main

from .conftest import WITH_MYSQL, start_worker, store_url
from .damaged_durable import bad_time, now, signal_row, sql, step_row

GOOD = 3


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.fixture(autouse=True)
def _fresh_names() -> None:
    quarantine.forget()


def _tasks(app: rota.App, ran: list[str]) -> dict[str, Any]:
    """Handlers that meet a saved step, a sleep and a signal; `ran` records the steps run."""

    def fresh(name: str) -> str:
        ran.append(name)
        return "fresh"

    @app.task(name="stepper", pass_context=True, retries=2, backoff=0.01)
    def stepper(ctx: rota.RunContext, n: int) -> Any:
        return [ctx.step("a", fresh, "a"), n]

    @app.task(name="async_stepper", pass_context=True, retries=2, backoff=0.01)
    async def async_stepper(ctx: rota.RunContext, n: int) -> Any:
        return [await ctx.step_async("a", fresh, "a"), n]

    @app.task(name="sleeper", pass_context=True, retries=2, backoff=0.01)
    def sleeper(ctx: rota.RunContext, n: int) -> Any:
        ctx.sleep(0.2)
        return n

    @app.task(name="waiter", pass_context=True, retries=2, backoff=0.01)
    def waiter(ctx: rota.RunContext, n: int) -> Any:
        got = ctx.wait_for("go", timeout=0.2)
        return [None if got is None else got.payload, None if got is None else got.sent_at, n]

    return {"stepper": stepper, "async_stepper": async_stepper, "sleeper": sleeper, "waiter": waiter}


def _named(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if getattr(r, "event", None) == quarantine.EVENT]


def _run(app: rota.App, task: str, damage: Any) -> tuple[rota.Run, list[rota.Run], list[str]]:
    """One run of `task` with `damage(app, run_id)` written before any worker sees it, and
    GOOD runs of each task beside it in the same queue; then a worker works them all."""
    ran: list[str] = []
    tasks = _tasks(app, ran)
    bad = tasks[task].enqueue(-1)
    damage(app, bad.id)
    good = [t.enqueue(i) for t in tasks.values() for i in range(GOOD)]
    start_worker(app, concurrency=4)
    runs = [g.wait(timeout=30) for g in good]
    assert [r.status for r in runs] == ["succeeded"] * len(runs), [(r.task, r.error) for r in runs]
    assert tasks["stepper"].enqueue(99).wait(timeout=30).status == "succeeded"  # the worker goes on
    return bad.wait(timeout=30), runs, ran


def _assert_damaged(run: rota.Run, caplog: pytest.LogCaptureFixture, *words: str) -> None:
    assert run.status == "failed", (run.status, run.result, run.error)
    assert run.error is not None and run.error["type"] == "DamagedRow", run.error
    assert run.attempt == 1, "never retried: its next attempt meets the same damage"
    for word in words:
        assert word in run.error["message"], run.error["message"]
    named = _named(caplog)
    assert len(named) == 1 and f"damaged run '{run.id}'" in named[0], named
    assert "\n" not in run.error["message"]


NOT_JSON = "{oops"
DEEP = "[" * 100_000 + "]" * 100_000  # JSON nested deeper than the decoder's recursion limit


@pytest.mark.parametrize("task", ["stepper", "async_stepper"])
@pytest.mark.parametrize("result", [NOT_JSON, DEEP], ids=["not-json", "nested-too-deep"])
def test_a_saved_step_whose_result_cannot_be_read_fails_its_run_as_damaged(
    app_factory: Any, caplog: pytest.LogCaptureFixture, result: str, task: str
) -> None:
    """Before: json.loads raised in the handler: the run failed with a ValueError (or
    RecursionError) and was retried twice, meeting the same row each time."""
    app = app_factory()
    caplog.set_level(logging.WARNING, logger="rota")
    run, _, ran = _run(app, task, lambda a, i: step_row(a, i, "a", result=result))
    _assert_damaged(run, caplog, "step 'a'", "result")
    assert ran.count("a") == 2 * GOOD + 1  # the damaged step was not run again either
    assert app.retry_many(status="failed") == 0  # a run set aside as damaged is passed over
    again = app.retry(run.id).wait(timeout=30)  # an explicit retry: a new run, its steps all run
    assert (again.status, again.result) == ("succeeded", ["fresh", -1]), again.error


@pytest.mark.parametrize(
    "result",
    [
        "[1, 2]",
        '{"until": "soon"}',
        '{"until": "9999-12-31T23:59:59+00:00", "since": 5}',
        NOT_JSON,
        '{"until": "9999-12-31T23:59:59-05:00"}',
        '{"until": "0001-01-01T00:00:00+05:00"}',
    ],
    ids=[
        "not-an-object",
        "until-not-a-time",
        "since-not-a-time",
        "not-json",
        "until-past-9999-in-utc",
        "until-before-year-1-in-utc",
    ],
)
def test_a_parked_sleep_whose_saved_wait_cannot_be_read_fails_its_run_as_damaged(
    app_factory: Any, caplog: pytest.LogCaptureFixture, result: str
) -> None:
    """The run resumes from a park whose saved wait (rota_steps, outcome 'waiting') is
    damaged. Before: AttributeError / ValueError in the handler, retried."""
    app = app_factory()
    caplog.set_level(logging.WARNING, logger="rota")
    run, _, _ = _run(app, "sleeper", lambda a, i: step_row(a, i, "sleep#1", outcome="waiting", result=result))
    _assert_damaged(run, caplog, "step 'sleep#1'", "result")


def test_a_signal_whose_payload_cannot_be_read_fails_its_run_as_damaged(
    app_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: json.loads of the payload raised in ctx.wait_for: failed and retried."""
    app = app_factory()
    caplog.set_level(logging.WARNING, logger="rota")
    run, _, _ = _run(app, "waiter", lambda a, i: signal_row(a, i, "go", NOT_JSON))
    _assert_damaged(run, caplog, "signal 'go'", "payload")
    listed = CliRunner().invoke(main, ["--database-url", app.database_url, "runs", "--damaged", "--json"])
    assert listed.exit_code == 0 and [r["id"] for r in json.loads(listed.output)] == [run.id], listed.output


@pytest.mark.parametrize(
    "result", ["5", '{"signal": 1, "sent_at": "yesterday"}'], ids=["not-an-object", "sent_at-not-a-time"]
)
def test_a_wait_saved_as_over_whose_result_cannot_be_read_fails_its_run_as_damaged(
    app_factory: Any, caplog: pytest.LogCaptureFixture, result: str
) -> None:
    """The wait's step saved as succeeded (its signal received) with a result of another
    shape. Before: TypeError or ValueError in ctx.wait_for, retried."""
    app = app_factory()
    caplog.set_level(logging.WARNING, logger="rota")
    run, _, _ = _run(app, "waiter", lambda a, i: step_row(a, i, "wait:go", result=result))
    _assert_damaged(run, caplog, "step 'wait:go'", "result")


def test_a_saved_step_with_a_time_out_of_range_still_gives_its_result(
    app_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A damaged time of a saved step (shown only) does not stop its run: the result is used
    and the time is named once. Before: steps_of raised while decoding every step of the run."""
    app = app_factory()
    caplog.set_level(logging.WARNING, logger="rota")
    run, _, ran = _run(app, "stepper", lambda a, i: step_row(a, i, "a", started=bad_time(a)))
    assert (run.status, run.result) == ("succeeded", ["saved", -1]), run.error
    assert ran.count("a") == 2 * GOOD + 1
    named = _named(caplog)
    assert len(named) == 1 and "started_at" in named[0] and f"{run.id}" in named[0], named
    assert run.steps[0]["started_at"] is None and run.steps[0]["name"] == "a"


def test_a_parked_wait_whose_saved_start_is_out_of_range_resumes(
    app_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The wait's row keeps its start when its end is saved. On MySQL/MariaDB the kept zero
    date was NULL under the strict sql_mode: the checkpoint failed (a DatabaseError, retried)."""
    app = app_factory()
    caplog.set_level(logging.WARNING, logger="rota")
    over = '{"until": "2020-01-01T00:00:00+00:00"}'  # an older release's: no since
    run, _, _ = _run(app, "sleeper", lambda a, i: step_row(a, i, "sleep#1", outcome="waiting", result=over,
                                                            started=bad_time(a)))  # fmt: skip
    assert (run.status, run.result) == ("succeeded", -1), run.error
    assert [(s["name"], s["outcome"]) for s in run.steps] == [("sleep#1", "succeeded")]
    assert all("started_at" in line for line in _named(caplog)), _named(caplog)


def test_a_signal_with_a_time_out_of_range_is_still_received(
    app_factory: Any, caplog: pytest.LogCaptureFixture
) -> None:
    app = app_factory()
    caplog.set_level(logging.WARNING, logger="rota")
    run, _, _ = _run(app, "waiter", lambda a, i: signal_row(a, i, "go", '{"ok": 1}', sent=bad_time(a)))
    assert (run.status, run.result) == ("succeeded", [{"ok": 1}, None, -1]), run.error
    named = _named(caplog)
    assert len(named) == 1 and "sent_at" in named[0], named


@pytest.mark.parametrize("outcome", ["bogus", ""], ids=["unknown", "empty"])
def test_a_saved_step_of_an_unknown_outcome_runs_again(app_factory: Any, outcome: str) -> None:
    """Not a saved success: the step runs again and its checkpoint replaces the row."""
    app = app_factory()
    run, _, ran = _run(app, "stepper", lambda a, i: step_row(a, i, "a", outcome=outcome, attempt=-7, seq=-3))
    assert (run.status, run.result) == ("succeeded", ["fresh", -1]), run.error
    assert ran.count("a") == 2 * GOOD + 2
    assert [(s["outcome"], s["attempt"]) for s in run.steps] == [("succeeded", 1)]


def test_rows_of_an_unknown_run_harm_nothing(app_factory: Any) -> None:
    """Steps, a wait, a signal and progress of a run id that does not exist (its run deleted
    by hand): every run goes on, and the rows are shown nowhere."""
    app = app_factory()
    ghost = 987654321
    step_row(app, ghost, "a", result=NOT_JSON)
    signal_row(app, ghost, "go", NOT_JSON)
    sql(app, "INSERT INTO rota_waits (run_id, token, kind, name, until, since) "
             f"VALUES ({ghost}, 1, 'signal', 'go', {now(app)}, {now(app)})")  # fmt: skip
    sql(
        app, f"INSERT INTO rota_progress (run_id, fraction, message, updated_at) VALUES ({ghost}, 0.5, 'x', {now(app)})"
    )
    run, _, _ = _run(app, "stepper", lambda a, i: None)
    assert run.status == "succeeded"
    with pytest.raises(rota.errors.RunNotFound):
        app.signal(ghost, "go")
