"""Durable steps and isolation="process" (issue 43): a child process has no way to the run's
checkpoints, so ctx.step, ctx.sleep, ctx.wait_for and ctx.progress there refuse at their first
call with one line naming the task and what is valid, recorded as the run's error."""

from __future__ import annotations

from typing import Any

import pytest

import rota

from .conftest import start_worker


def _stepping(ctx: rota.RunContext) -> int:
    return int(ctx.step("one", lambda: 1))


async def _sleeping(ctx: rota.RunContext) -> None:
    await ctx.sleep_async(1)


def _reporting(ctx: rota.RunContext) -> None:
    ctx.progress(0.5)


@pytest.mark.parametrize(
    ("handler", "call"), [(_stepping, "ctx.step"), (_sleeping, "ctx.sleep_async"), (_reporting, "ctx.progress")]
)
def test_steps_in_a_process_isolated_task_refuse_with_one_clear_line(app: rota.App, handler: Any, call: str) -> None:
    task = app.task(name="isolated_steps", isolation="process", pass_context=True)(handler)
    start_worker(app)
    run = task.enqueue().wait(60)
    assert run.status == "failed" and run.error is not None
    assert run.error["type"] == "StepError"
    message = run.error["message"]
    assert "\n" not in message
    assert message.startswith(f"{call} in task 'isolated_steps', declared with isolation='process': ")
    assert "declare the task with isolation='none' (the default)" in message
    assert run.steps == []
