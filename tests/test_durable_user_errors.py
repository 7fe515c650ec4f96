"""Durable steps used wrongly, as a new user does (issue 43): each mistake gets one clear line
naming the value and what is valid, on every store; and `rota run` shows a step's start."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from click.testing import CliRunner

import rota
from rota.cli import main

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.mark.parametrize(
    ("body", "line"),
    [
        (
            "set",
            "the result of step 'b' of wrong (run {id}) cannot be saved as JSON: the value is a builtins.set "
            "({{1, 2}}), which is not JSON; pass str, int, float, bool, None, list or dict",
        ),
        ("nan", "the result of step 'b' of wrong (run {id}) cannot be saved as JSON: the value is nan, which"),
        ("nested", "cannot be saved as JSON: the value['at'] is a builtins.object"),
        ("called", "ctx.step('b', {{'id': 1}}): pass the step's function and its arguments"),
        ("long_name", "invalid step name 'xxxxxxxxxx"),
        (
            "naive_sleep",
            "invalid sleep duration datetime.datetime(2026, 12, 8, 10, 0): a timedelta or a number of seconds, not a datetime",
        ),
        (
            "aware_timeout",
            "invalid wait timeout datetime.datetime(2026, 12, 8, 10, 0, tzinfo=datetime.timezone.utc): a timedelta",
        ),
        ("wait_twice", "ctx.wait_for('go') is called twice in run {id} of wrong (or a step is named 'wait:go')"),
        # MySQL/MariaDB compare 'b' and 'b ' as one name: the second step's checkpoint was
        # refused there as if the run's lease were lost ("no longer holds the run")
        (
            "trailing_space",
            "invalid step name 'b ': a non-blank string of at most 200 characters, not ending in a space",
        ),
        ("signal_space", "invalid signal name 'go ': a non-blank string"),
    ],
)
def test_a_step_used_wrongly_fails_with_one_line_naming_the_value(app: rota.App, body: str, line: str) -> None:
    @app.task(name="wrong", pass_context=True)
    def wrong(ctx: rota.RunContext) -> None:
        if body == "set":
            ctx.step("b", lambda: {1, 2})
        elif body == "nan":
            ctx.step("b", lambda: float("nan"))
        elif body == "nested":
            ctx.step("b", lambda: {"at": object()})
        elif body == "called":  # the function's result passed instead of the function
            ctx.step("b", {"id": 1})
        elif body == "naive_sleep":
            ctx.sleep(datetime(2026, 12, 8, 10, 0))
        elif body == "aware_timeout":
            ctx.wait_for("go", timeout=datetime(2026, 12, 8, 10, 0, tzinfo=UTC))
        elif body == "trailing_space":
            ctx.step("b", lambda: 1)
            ctx.step("b ", lambda: 2)
        elif body == "signal_space":
            ctx.wait_for("go ", timeout=0)
        elif body == "wait_twice":
            ctx.wait_for("go", timeout=0)
            ctx.wait_for("go", timeout=0)
        else:
            ctx.step("x" * 1000, lambda: 1)

    start_worker(app)
    ref = wrong.enqueue()
    run = ref.wait(15)
    assert run.status == "failed" and run.error is not None
    message = run.error["message"]
    assert run.error["type"] == "StepError", run.error
    assert line.format(id=ref.id) in message
    assert "\n" not in message and message.count("the result of") <= 1, message
    assert len(message) < 300, message  # a long value is cut, not printed whole


def test_app_signal_refuses_a_name_ending_in_a_space(app: rota.App) -> None:
    ref = app.task(name="idle")(lambda: None).enqueue()
    with pytest.raises(rota.durable.StepError, match=r"invalid signal name 'go ': .*not ending in a space"):
        app.signal(ref.id, "go ")


def test_a_signal_payload_that_is_not_json_is_named_once(app: rota.App) -> None:
    @app.task(name="waits", pass_context=True)
    def waits(ctx: rota.RunContext) -> None:
        ctx.wait_for("go", timeout=60)

    ref = waits.enqueue()
    with pytest.raises(rota.SerializationError) as info:
        app.signal(ref.id, "go", {"when": {1, 2}})
    assert str(info.value).startswith(
        "the payload of signal 'go'['when'] is a builtins.set ({1, 2}), which is not JSON; pass str, int"
    ), str(info.value)


def test_rota_run_shows_when_a_step_started_and_a_wait_that_ended_with_the_run(app: rota.App, db_url: str) -> None:
    import time

    @app.task(name="slow", pass_context=True)
    def slow(ctx: rota.RunContext) -> None:
        ctx.step("nap", time.sleep, 0.3)
        ctx.wait_for("go", timeout=60)

    start_worker(app, poll_interval=0.05)
    ref = slow.enqueue()
    wait_for(lambda: app.get_run(ref.id).waiting is not None, what="the park")
    run = app.get_run(ref.id)
    nap = run.steps[0]
    shown = CliRunner().invoke(main, ["--database-url", db_url, "run", ref.id]).output
    assert f"1. nap: succeeded (attempt 1, {nap['started_at']}, took 3" in shown, shown
    assert f"2. wait:go: waiting (attempt 1, {run.steps[1]['started_at']})\n" in shown, shown  # no "took"
    app.cancel(ref.id)
    shown = CliRunner().invoke(main, ["--database-url", db_url, "run", ref.id]).output
    assert "2. wait:go: not resumed, the run was cancelled (attempt 1, " in shown, shown


def test_a_signalled_run_in_a_paused_queue_is_due_not_parked(app: rota.App, db_url: str) -> None:
    from rota import lifecycle

    @app.task(name="confirm", pass_context=True)
    def confirm(ctx: rota.RunContext) -> str:
        got = ctx.wait_for("go", timeout=3600)
        return "expired" if got is None else f"got {got.payload}"

    start_worker(app, poll_interval=0.05)
    ref = confirm.enqueue()
    wait_for(lambda: app.get_run(ref.id).waiting is not None, what="the park")
    assert lifecycle.state_of(app.get_run(ref.id), app.store.now()) == lifecycle.PARKED
    app.pause_queue("default")
    app.signal(ref.id, "go", 1)
    run = app.get_run(ref.id)
    assert run.status == "pending" and run.waiting is None, run.waiting  # its signal came: due, not parked
    assert lifecycle.state_of(run, app.store.now()) == lifecycle.DUE
    shown = CliRunner().invoke(main, ["--database-url", db_url, "run", ref.id]).output
    assert "parked:" not in shown, shown
    app.resume_queue("default")
    assert ref.wait(15).result == "got 1"


def test_the_worker_log_says_what_a_parked_run_waits_for(app: rota.App, caplog: pytest.LogCaptureFixture) -> None:
    @app.task(name="parks", pass_context=True)
    def parks(ctx: rota.RunContext) -> None:
        ctx.wait_for("email-confirmed", timeout=60)

    caplog.set_level("INFO", logger="rota")
    start_worker(app, poll_interval=0.05)
    ref = parks.enqueue()
    wait_for(lambda: app.get_run(ref.id).waiting is not None, what="the park")
    wait_for(lambda: "parked" in caplog.text, what="the log line")
    line = f"run {ref.id} parks parked, waiting for signal 'email-confirmed', for up to 60 s"
    assert line in caplog.text, caplog.text


def test_a_handler_taking_a_run_context_without_pass_context_is_refused_at_registration(tmp_path: Any) -> None:
    app = rota.App(f"sqlite:///{tmp_path}/rota.db")

    def onboard(ctx: rota.RunContext, user_id: int) -> str:  # the example, pass_context forgotten
        return str(ctx.step("create-account", lambda: user_id))

    with pytest.raises(rota.ConfigurationError) as info:
        app.task(retries=5)(onboard)
    assert str(info.value) == (
        f"task '{__name__}.{onboard.__qualname__}': its first parameter 'ctx' is annotated RunContext, but the task "
        "is declared without pass_context=True, so it would get the run's first argument: declare "
        "@app.task(pass_context=True, ...)"
    )
    assert app.task(pass_context=True)(onboard).name.endswith("onboard")

    def plain(user_id: int) -> int:
        return user_id

    app.task()(plain)  # other handlers as before
    app.close()
