"""A run of a task its worker does not register (a release that adds a task, deployed worker by
worker; two codebases on one database): the worker gives it back (the `refuse` transition) for
a worker that registers it, with no attempt counted, until UNKNOWN_TASK_GRACE past its scheduled
time; after that it fails with TaskNotFound, as it always did. Contract tests, both stores."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import rota
from rota.stores.base import Outcome
from rota.stores.records import REFUSED
from rota.worker.outcomes import UNKNOWN_TASK_GRACE

from .conftest import start_worker, wait_for

TASK_NOT_FOUND = json.dumps({"type": "TaskNotFound", "message": "not here", "traceback": None})


def test_a_new_tasks_run_claimed_by_an_old_worker_is_given_back_and_runs_on_a_new_one(
    app_factory: Callable[..., rota.App],
) -> None:
    new = app_factory()
    ran: list[int] = []
    new.task(name="added.in.this.release")(lambda: ran.append(1))
    handle = new.get_task("added.in.this.release").enqueue()
    old = app_factory()  # the previous release: its code lacks the task
    old.task(name="known")(lambda: None)
    old_worker = start_worker(old)
    wait_for(lambda: (new.get_run(handle.id).error or {}).get("type") == "TaskNotFound", 10, "a refusal")
    old_worker.stop(wait=True, timeout=10)
    run = new.get_run(handle.id)
    assert (run.status, run.attempt, run.started_at, run.history) == ("pending", 0, None, [])
    assert run.error is not None and "not registered in worker" in run.error["message"]
    assert "given back for a worker that registers it" in run.error["message"]
    assert run.due_at > run.scheduled_for  # due again after a delay, not at once (no busy loop)
    start_worker(new)  # the new release's worker
    done = handle.wait(10)
    assert (done.status, done.attempt, ran) == ("succeeded", 1, [1])


def test_a_run_past_the_grace_still_fails_with_task_not_found(app_factory: Callable[..., rota.App]) -> None:
    producer = app_factory()
    producer.task(name="only.in.producer")(lambda: None)
    long_ago = datetime.now(UTC) - timedelta(seconds=UNKNOWN_TASK_GRACE + 60)
    handle = producer.get_task("only.in.producer").options(run_at=long_ago).enqueue()
    consumer = app_factory()
    consumer.task(name="known")(lambda: None)
    start_worker(consumer)
    run = handle.wait(10)
    assert run.status == "failed" and run.attempt == 1
    assert run.error is not None and run.error["type"] == "TaskNotFound"
    message = run.error["message"]
    assert "task 'only.in.producer' is not registered in worker" in message and "(registered: known)" in message
    assert f"within {UNKNOWN_TASK_GRACE:g} s of its scheduled time" in message and f"rota retry {run.id}" in message


def _claimed(app: rota.App, start: int) -> Any:
    app.task(name="gone")(lambda: None)
    app.migrate()
    handle = app.get_task("gone").enqueue()
    (claimed,) = app.store.claim("w", 1, None, 30.0, start)
    assert claimed.id == int(handle.id)
    return claimed


def test_a_refused_started_run_gives_its_attempt_back_and_is_due_after_the_delay(
    app_factory: Callable[..., rota.App],
) -> None:
    app = app_factory()
    c = _claimed(app, start=1)
    before = app.store.now()
    assert app.store.finish([Outcome(c.id, c.token, REFUSED, error=TASK_NOT_FOUND, retry_in=30.0)]) == {c.id}
    run = app.get_run(c.id)
    assert (run.status, run.attempt, run.started_at, run.history) == ("pending", 0, None, [])
    assert run.error == json.loads(TASK_NOT_FOUND)
    assert timedelta(seconds=29) < run.due_at - before < timedelta(seconds=60)
    assert app.store.claim("w", 1, None, 30.0) == []  # not before its delay
    # a stale token (the run was rescued and claimed elsewhere) writes nothing
    assert app.store.finish([Outcome(c.id, c.token, REFUSED, error=TASK_NOT_FOUND, retry_in=1.0)]) == set()


def test_a_refused_held_run_keeps_its_attempt_uncounted(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory()
    c = _claimed(app, start=0)  # held: claimed, not started
    assert c.held
    app.store.finish([Outcome(c.id, c.token, REFUSED, error=TASK_NOT_FOUND, retry_in=5.0)])
    run = app.get_run(c.id)
    assert (run.status, run.attempt, run.started_at) == ("pending", 0, None)


def test_a_refused_run_whose_cancellation_was_requested_ends_cancelled(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory()
    c = _claimed(app, start=1)
    app.cancel(c.id)  # running: a request
    app.store.finish([Outcome(c.id, c.token, REFUSED, error=TASK_NOT_FOUND, retry_in=5.0)])
    run = app.get_run(c.id)
    assert (run.status, run.attempt, run.started_at) == ("cancelled", 0, None)
    assert run.error is not None and run.error["type"] == "Cancelled"
