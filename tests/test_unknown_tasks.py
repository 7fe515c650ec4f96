"""A run of a task its worker does not register (a release that adds a task, deployed worker by
worker; two codebases on one database): the worker gives it back (the `refuse` transition) for
a worker that registers it, with no attempt counted, due again after half the time since its
first refusal (1 to 60 s); refused for longer than UNKNOWN_TASK_GRACE since the first time, it
fails with TaskNotFound. Contract tests, both stores."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

import rota
from rota.stores.base import Outcome
from rota.stores.records import REFUSE_DELAY, REFUSED, UNKNOWN_TASK_GRACE

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


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
    events: list[str] = []
    old.on("run_retrying", "run_failed", "run_cancelled", "run_succeeded")(lambda event: events.append(event.name))
    observed: list[str] = []
    old_worker = old.worker(install_signal_handlers=False)
    old_worker.observe(lambda event, claim, when: observed.append(event))
    old_worker.start()
    wait_for(lambda: old_worker.counters.refused >= 2, 10, "two refusals")  # (1 s apart)
    old_worker.stop(wait=True, timeout=10)
    assert events == [] and observed == []  # given back: no run event, no start or end to observe
    run = new.get_run(handle.id)
    assert (run.status, run.attempt, run.started_at, run.history) == ("pending", 0, None, [])
    assert run.error is not None and "not registered in worker" in run.error["message"]
    assert "given back for a worker that registers it" in run.error["message"]
    assert run.due_at > run.scheduled_for  # due again after a delay, not at once (no busy loop)
    start_worker(new)  # the new release's worker
    done = handle.wait(10)
    assert (done.status, done.attempt, ran) == ("succeeded", 1, [1])


def _refused_long_ago(app: rota.App, run_id: str) -> None:
    """Move the run's first refusal (and its due time) an hour back (a time seam: no sleep)."""
    store: Any = app.store
    shift = (
        "- 3600"
        if app.database_url.startswith("sqlite")
        else "- interval '3600' second"
        if app.database_url.startswith("mysql")
        else "- interval '3600 seconds'"
    )
    with store._tx() as s:
        s.q_text(
            f"UPDATE rota_runs SET refused_at = refused_at {shift}, due_at = due_at {shift} WHERE id = {int(run_id)}"
        )


def test_a_run_refused_for_longer_than_the_grace_fails_with_task_not_found(
    app_factory: Callable[..., rota.App],
) -> None:
    producer = app_factory()
    producer.task(name="only.in.producer")(lambda: None)
    handle = producer.get_task("only.in.producer").enqueue()
    consumer = app_factory()
    consumer.task(name="known")(lambda: None)
    failed: list[str] = []
    consumer.on("run_failed")(lambda event: failed.append(event.run_id))
    worker = start_worker(consumer)
    wait_for(lambda: producer.get_run(handle.id).error is not None, 10, "a refusal")
    worker.stop(wait=True, timeout=10)
    _refused_long_ago(producer, handle.id)
    start_worker(consumer)
    run = handle.wait(10)
    assert (run.status, run.attempt, run.started_at) == ("failed", 0, None)  # no handler ever ran
    assert run.error is not None and run.error["type"] == "TaskNotFound"
    message = run.error["message"]
    assert "task 'only.in.producer' is not registered in worker" in message and "(registered: known)" in message
    assert f"within {UNKNOWN_TASK_GRACE:g} s of its first refusal" in message and f"rota retry {run.id}" in message
    wait_for(lambda: failed == [handle.id], 5, "the run_failed event")


def _claimed(app: rota.App, start: int) -> Any:
    app.task(name="gone")(lambda: None)
    app.migrate()
    handle = app.get_task("gone").enqueue()
    (claimed,) = app.store.claim("w", 1, None, 30.0, start)
    assert claimed.id == int(handle.id)
    return claimed


def _refuse(app: rota.App, c: Any) -> set[int]:
    outcome = Outcome(c.id, c.token, REFUSED, error=TASK_NOT_FOUND)
    written: set[int] = app.store.finish([outcome])
    return written


def test_a_refused_run_gives_its_attempt_back_and_waits_longer_each_time_then_fails(
    app_factory: Callable[..., rota.App],
) -> None:
    clock = rota.FakeClock()
    app = app_factory(clock=clock)
    c = _claimed(app, start=1)
    first = app.store.now()
    assert _refuse(app, c) == {c.id}
    run = app.get_run(c.id)
    assert (run.status, run.attempt, run.started_at, run.history) == ("pending", 0, None, [])
    assert run.error == json.loads(TASK_NOT_FOUND)
    assert run.due_at == first + timedelta(seconds=REFUSE_DELAY[0])  # at least a second
    assert app.store.claim("w", 1, None, 30.0) == []  # not before that
    assert _refuse(app, c) == set()  # a stale token writes nothing
    for wait, delay in ((100.0, 50.0), (300.0, REFUSE_DELAY[1])):  # half the time since the first
        clock.advance(wait)
        (c,) = app.store.claim("w", 1, None, 30.0)
        assert _refuse(app, c) == {c.id}
        run = app.get_run(c.id)
        assert (run.status, run.attempt) == ("pending", 0)
        assert run.due_at == app.store.now() + timedelta(seconds=delay)
    clock.advance(UNKNOWN_TASK_GRACE - 400.0 + 1.0)  # refused for longer than the grace
    (c,) = app.store.claim("w", 1, None, 30.0)
    outcome = Outcome(c.id, c.token, REFUSED, error=TASK_NOT_FOUND)
    assert app.store.finish([outcome]) == {c.id} and outcome.written_status == "failed"
    run = app.get_run(c.id)
    assert (run.status, run.attempt, run.started_at, run.finished_at) == ("failed", 0, None, app.store.now())


def test_a_refused_held_run_keeps_its_attempt_uncounted(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory()
    c = _claimed(app, start=0)  # held: claimed, not started
    assert c.held
    _refuse(app, c)
    run = app.get_run(c.id)
    assert (run.status, run.attempt, run.started_at) == ("pending", 0, None)


def test_a_refused_run_whose_cancellation_was_requested_ends_cancelled(app_factory: Callable[..., rota.App]) -> None:
    app = app_factory()
    c = _claimed(app, start=1)
    app.cancel(c.id)  # running: a request
    outcome = Outcome(c.id, c.token, REFUSED, error=TASK_NOT_FOUND)
    app.store.finish([outcome])
    assert outcome.written_status == "cancelled"
    run = app.get_run(c.id)
    assert (run.status, run.attempt, run.started_at) == ("cancelled", 0, None)
    assert run.error is not None and run.error["type"] == "Cancelled"


def test_a_retry_after_a_handler_ran_is_refused_anew_not_failed_for_an_old_refusal(
    app_factory: Callable[..., rota.App],
) -> None:
    clock = rota.FakeClock()
    app = app_factory(clock=clock)
    c = _claimed(app, start=1)
    _refuse(app, c)  # an old worker, at first
    clock.advance(UNKNOWN_TASK_GRACE)
    (c,) = app.store.claim("w", 1, None, 30.0)  # a new worker runs it; it fails, retried later
    app.store.finish([Outcome(c.id, c.token, "pending", error=TASK_NOT_FOUND, retry_in=0.0, history="{}")])
    clock.advance(1.0)
    (c,) = app.store.claim("w", 1, None, 30.0)  # the retry lands on an old worker again
    outcome = Outcome(c.id, c.token, REFUSED, error=TASK_NOT_FOUND)
    app.store.finish([outcome])
    assert outcome.written_status == "pending"
    assert (app.get_run(c.id).status, app.get_run(c.id).attempt) == ("pending", 1)


def test_a_run_a_new_worker_started_and_gave_back_is_refused_anew(app_factory: Callable[..., rota.App]) -> None:
    """Handed back at a new worker's shutdown (or rescued after its crash) once it started,
    the run's next refusal starts a new grace: a registering worker did take it."""
    clock = rota.FakeClock()
    app = app_factory(clock=clock, lease=5.0)
    app.task(name="gone", retries=3)(lambda: None)  # (a rescued attempt is retried)
    app.migrate()
    app.get_task("gone").enqueue()
    (c,) = app.store.claim("w", 1, None, 5.0)
    _refuse(app, c)
    for end in ("hand_back", "rescue"):
        clock.advance(UNKNOWN_TASK_GRACE)
        (c,) = app.store.claim("w", 1, None, 5.0)  # a new worker starts it, then stops or dies
        if end == "hand_back":
            app.store.hand_back([(c.id, c.token)], "shutdown")
        else:
            clock.advance(6.0)
            assert [r.id for r in app.store.rescue()] == [c.id]
        clock.advance(1.0)
        (c,) = app.store.claim("w", 1, None, 5.0)  # an old worker again
        outcome = Outcome(c.id, c.token, REFUSED, error=TASK_NOT_FOUND)
        app.store.finish([outcome])
        assert outcome.written_status == "pending", end
