"""What a step checkpoint costs (issue 43), on every store: checkpoints of concurrent runs go
to the store together (rota/stores/sqlstore/checkpoints.py: one fenced statement per batch)
without weakening the guarantees, and a run that cannot have saved steps does not read them
at its first step (the claim says so: Claimed.steps)."""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import rota
from rota.durable import Durable, StepRefused
from rota.errors import DatabaseUnavailable
from rota.stores.base import NewRun
from rota.stores.sqlite import sqlite_path

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def _claimed(app: rota.App, n: int) -> list[Any]:
    task = app.task(name="held")(lambda: None)
    for _ in range(n):
        task.enqueue()
    claims = app.store.claim("w1", n, None, 30.0, n)
    assert len(claims) == n
    return sorted(claims, key=lambda c: c.id)


class _Gate:
    """Holds the first batch in flight until released: the checkpoints made meanwhile queue
    up and go together as the next batch."""

    def __init__(self, app: rota.App) -> None:
        self.commits = app.store._checkpoints
        self.write = self.commits._write
        self.sizes: list[int] = []
        self.writing = threading.Event()
        self.release = threading.Event()
        self.commits._write = self._held

    def _held(self, rows: Any) -> Any:
        self.sizes.append(len(rows))
        if len(self.sizes) == 1:
            self.writing.set()
            assert self.release.wait(10)
        return self.write(rows)

    def queued(self, n: int) -> None:
        wait_for(lambda: len(self.commits._queue) == n, what=f"{n} checkpoints queued")


def test_a_batch_refuses_a_stale_workers_checkpoint_and_commits_the_others(app: rota.App) -> None:
    first, mine, stale = _claimed(app, 3)
    gate = _Gate(app)
    results: dict[str, Any] = {}

    def step(name: str, claim: Any, token: int) -> None:
        try:
            results[name] = Durable(app.store, claim.id, token, "held", steps=claim.steps).step(
                name, lambda: name.upper(), (), {}
            )
        except StepRefused as exc:
            results[name] = exc

    threads = [threading.Thread(target=step, args=("lead", first, first.token))]
    threads[0].start()
    assert gate.writing.wait(10)  # the first batch in flight: the next two queue up
    threads += [
        threading.Thread(target=step, args=("mine", mine, mine.token)),
        threading.Thread(target=step, args=("stale", stale, stale.token + 1000)),  # its lease taken over
    ]
    for t in threads[1:]:
        t.start()
    gate.queued(2)
    gate.release.set()
    for t in threads:
        t.join(10)
    assert gate.sizes == [1, 2]  # the two went to the store as one batch
    assert results["lead"] == "LEAD" and results["mine"] == "MINE"
    assert isinstance(results["stale"], StepRefused) and "'stale' was refused" in str(results["stale"])
    assert [s.name for s in app.store.steps_of(mine.id)] == ["mine"]
    assert app.store.steps_of(stale.id) == []  # nothing saved under the stale token


def test_a_checkpoint_in_a_batch_returns_only_after_its_batch_commits(app: rota.App) -> None:
    first, second = _claimed(app, 2)
    gate = _Gate(app)
    done = threading.Event()

    def step(claim: Any, name: str, after: threading.Event | None = None) -> None:
        Durable(app.store, claim.id, claim.token, "held").step(name, lambda: 1, (), {})
        if after is not None:
            after.set()

    lead = threading.Thread(target=step, args=(first, "a"))
    lead.start()
    assert gate.writing.wait(10)
    follower = threading.Thread(target=step, args=(second, "b", done))
    follower.start()
    gate.queued(1)
    assert not done.wait(0.3)  # its batch is not written yet: the step has not returned
    gate.release.set()
    assert done.wait(10)
    lead.join(10)
    assert [s.name for s in app.store.steps_of(second.id)] == ["b"]


def test_a_failed_batch_is_written_again_one_checkpoint_at_a_time(app: rota.App) -> None:
    lead, *claims = _claimed(app, 4)
    gate = _Gate(app)
    write = gate.write

    def batch_fails(rows: Any) -> Any:
        if len(rows) > 1:
            raise DatabaseUnavailable("the batch failed")
        return write(rows)

    gate.write = batch_fails
    commits = app.store._checkpoints
    one = commits._one

    def one_or_fail(row: dict[str, Any]) -> bool:
        if row["name"] == "bad":
            raise DatabaseUnavailable("this checkpoint cannot be written")
        return bool(one(row))

    commits._one = one_or_fail
    errors: dict[str, BaseException] = {}

    def step(claim: Any, name: str) -> None:
        try:
            Durable(app.store, claim.id, claim.token, "held").step(name, lambda: 1, (), {})
        except DatabaseUnavailable as exc:
            errors[name] = exc

    threads = [threading.Thread(target=step, args=(lead, "lead"))]
    threads[0].start()
    assert gate.writing.wait(10)
    threads += [threading.Thread(target=step, args=(c, n)) for c, n in zip(claims, ("x", "bad", "y"), strict=True)]
    for t in threads[1:]:
        t.start()
    gate.queued(3)
    gate.release.set()
    for t in threads:
        t.join(10)
    assert gate.sizes == [1, 3]
    assert set(errors) == {"bad"} and "cannot be written" in str(errors["bad"])  # it fails alone
    assert [s.name for s in app.store.steps_of(claims[0].id)] == ["x"]
    assert [s.name for s in app.store.steps_of(claims[2].id)] == ["y"]


def test_a_crash_between_a_step_and_its_commit_runs_only_that_step_again(app: rota.App) -> None:
    """The checkpoint's statement ran but its transaction never committed (the worker died
    there): on the retry, the saved step is skipped and the unsaved one runs again."""
    calls: list[str] = []
    store = app.store
    write = store._checkpoints._write
    crashed: list[str] = []

    def write_then_crash(rows: Any) -> Any:
        if any(r["name"] == "b" for r in rows) and not crashed:
            crashed.append("b")
            with store._tx() as s:  # the statement runs, then its transaction rolls back
                s.q("save_steps", rows=rota.stores.sqlstore.checkpoints.rows_json(rows))
                raise DatabaseUnavailable("the connection died before the commit")
        return write(rows)

    store._checkpoints._write = write_then_crash

    @app.task(name="two", retries=1, backoff=rota.Backoff(base=0.01, jitter=0), pass_context=True)
    def two(ctx: rota.RunContext) -> list[str]:
        return [ctx.step("a", calls.append, "a") or "a", ctx.step("b", calls.append, "b") or "b"]

    start_worker(app)
    run = two.enqueue().wait(15)
    assert run.status == "succeeded", run.error
    assert calls == ["a", "b", "b"]  # a was saved: never again; b's checkpoint was lost: b again
    assert [(s["name"], s["attempt"]) for s in run.steps] == [("a", 1), ("b", 2)]


def _count_reads(app: rota.App, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    reads: list[int] = []
    steps_of = app.store.steps_of

    def counted(run_id: int) -> Any:
        if sys._getframe(1).f_code is Durable.saved.__code__:  # a handler's read (not Run.steps)
            reads.append(run_id)
        return steps_of(run_id)

    monkeypatch.setattr(app.store, "steps_of", counted)
    return reads


def test_a_first_run_does_not_read_its_steps_and_a_retried_one_does(
    app: rota.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    @app.task(name="twice", retries=1, backoff=rota.Backoff(base=0.01, jitter=0), pass_context=True)
    def twice(ctx: rota.RunContext) -> int:
        n = int(ctx.step("count", lambda: len(calls.append(ctx.attempt) or calls)))
        if ctx.attempt == 1:
            raise ConnectionError("fails after its step")
        return n

    start_worker(app)
    reads = _count_reads(app, monkeypatch)
    run = twice.enqueue().wait(15)
    assert run.status == "succeeded" and run.result == 1
    assert calls == [1]  # the retry got the saved result
    assert reads == [int(run.id)]  # the retry read the steps; the first attempt had none to read


def test_a_resumed_run_reads_its_steps(app: rota.App, monkeypatch: pytest.MonkeyPatch) -> None:
    """A parked run comes back with the attempt it parked with (a park is not an attempt's
    end): its claim still says it has steps, so they are read and not run again."""
    calls: list[str] = []

    @app.task(name="napper", pass_context=True)
    def napper(ctx: rota.RunContext) -> str:
        ctx.step("before", calls.append, "before")
        ctx.sleep(timedelta(seconds=0.2))
        ctx.step("after", calls.append, "after")
        return f"attempt {ctx.attempt}"

    start_worker(app)
    reads = _count_reads(app, monkeypatch)
    run = napper.enqueue().wait(15)
    assert run.status == "succeeded" and run.result == "attempt 1", run.error
    assert calls == ["before", "after"]  # the resume skipped the saved step
    assert reads == [int(run.id)]  # read once: by the resume, not by the first execution


@pytest.mark.parametrize("limited", [False, True], ids=["claim", "flow-claim"])
def test_the_claim_says_whether_a_run_has_saved_steps(app: rota.App, limited: bool) -> None:
    """A run claimed with no saved step skips the read; claimed again after saving one (a
    retry; a limited run comes through the flow claim), it reads."""
    seen: list[bool] = []
    options: dict[str, Any] = {"limit": 5} if limited else {}

    @app.task(name="noted", retries=1, backoff=rota.Backoff(base=0.01, jitter=0), pass_context=True, **options)
    def noted(ctx: rota.RunContext) -> None:
        seen.append(ctx._durable.steps)
        ctx.step("s", lambda: 1)
        if ctx.attempt == 1:
            raise ConnectionError("once")

    start_worker(app)
    run = noted.enqueue().wait(15)
    assert run.status == "succeeded", run.error
    assert seen == [False, True]


def test_a_step_returned_at_once_is_saved_with_the_runs_finish(app: rota.App) -> None:
    calls: list[str] = []

    @app.task(name="last", pass_context=True)
    def last(ctx: rota.RunContext) -> Any:
        ctx.step("first", calls.append, "first")
        return ctx.step("second", lambda: calls.append("second") or {"n": 2})  # its commit: the finish's

    start_worker(app)
    run = last.enqueue().wait(15)
    assert run.status == "succeeded" and run.result == {"n": 2}, run.error
    assert [(s["name"], s["outcome"]) for s in run.steps] == [("first", "succeeded"), ("second", "succeeded")]
    assert [s.result for s in app.store.steps_of(int(run.id))] == ["null", '{"n":2}']
    commits = app.store._checkpoints
    assert commits.written == 1  # 'first' alone went through the group commit


@pytest.mark.parametrize("shape", ["value", "assigned", "finally"])
def test_a_step_the_handler_does_not_return_at_once_commits_before_it_returns(app: rota.App, shape: str) -> None:
    seen: list[int] = []

    @app.task(name="not_last", pass_context=True)
    def not_last(ctx: rota.RunContext) -> Any:
        if shape == "value":
            return ctx.step("s", lambda: 1) + 1
        if shape == "assigned":
            x = ctx.step("s", lambda: 1)
            seen.append(len(app.store.steps_of(int(ctx.run_id))))  # saved by now
            return x
        try:
            return ctx.step("s", lambda: 1)
        finally:
            seen.append(len(app.store.steps_of(int(ctx.run_id))))  # saved by now

    start_worker(app)
    assert not_last.enqueue().wait(15).status == "succeeded"
    assert app.store._checkpoints.written == 1
    assert seen == ([] if shape == "value" else [1])


def test_a_deferred_checkpoint_is_fenced_by_the_finish(app: rota.App) -> None:
    """A checkpoint written with the finish is written only if the finish's token holds."""
    from rota.stores.base import Outcome

    stale, mine = _claimed(app, 2)

    def outcome(c: Any, token: int) -> Outcome:
        row = {"id": c.id, "token": token, "name": "last", "seq": 0, "took": 0.01, "outcome": "succeeded",
               "result": "7", "error": None}  # fmt: skip
        return Outcome(c.id, token, "succeeded", result="7", steps=[row])

    assert app.store.finish([outcome(stale, stale.token + 1000), outcome(mine, mine.token)]) == {mine.id}
    assert app.store.steps_of(stale.id) == [] and app.get_run(str(stale.id)).status == "running"
    assert [(s.name, s.result) for s in app.store.steps_of(mine.id)] == [("last", "7")]


@contextlib.contextmanager
def _holding_run(url: str, run_id: int) -> Iterator[None]:
    """The run's row locked (SQLite: the database's write lock) by a transaction of the test's
    own: the worker's finish waits for it."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(sqlite_path(url), isolation_level=None, timeout=30)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    if url.startswith("mysql"):
        from .test_txn import mysql_connection

        my = mysql_connection(url)
        my.begin()
        my.execute("SELECT id FROM rota_runs WHERE id = %s FOR UPDATE", (run_id,))
        try:
            yield
        finally:
            my.rollback()
            my.close()
        return
    with psycopg.connect(url) as pg:
        pg.execute("SELECT id FROM rota_runs WHERE id = %s FOR UPDATE", (run_id,))
        try:
            yield
        finally:
            pg.rollback()


def test_a_kill9_before_the_finish_commits_runs_only_the_returned_step_again(
    db_url: str, procs: Any, tmp_path: Any
) -> None:
    """The worker dies after the handler returned its last step, before the finish (which
    carries that step's checkpoint) committed: on the rescue, 'one' is skipped (saved) and
    'two' runs again unless its checkpoint committed (PostgreSQL's finish without a claim
    commits the checkpoint in a statement of its own, just before the outcome)."""
    from .conftest import make_app

    app = make_app(db_url)
    app.migrate()
    victim = procs.start("tests.apps.checkpoints:app", lease=1.5)
    run_id = app.store.insert_runs([NewRun(task="returned", args="[1.0]", kwargs="{}", max_attempts=4)])[0][0]
    log = tmp_path / "executions.log"
    wait_for(lambda: log.exists() and "step two" in log.read_text(), 30, "step two to start")
    with _holding_run(db_url, run_id):
        wait_for(lambda: "ended two" in log.read_text(), 10, "step two to end")
        time.sleep(0.5)  # the handler returned; its finish waits for the test's lock
        procs.kill9(victim)
    assert [s.name for s in app.store.steps_of(run_id)] in (["one"], ["one", "two"])
    procs.start("tests.apps.checkpoints:app", lease=1.5)
    wait_for(lambda: app.get_run(str(run_id)).status == "succeeded", 40, "the rescue and resume")
    started = [line.split()[1] for line in log.read_text().splitlines() if line.startswith("step")]
    run = app.get_run(str(run_id))
    assert run.result == "two" and [s["name"] for s in run.steps] == ["one", "two"]
    # 'two' saved by the dead worker's finish (on PostgreSQL its checkpoint statement, which waited
    # for the test's lock on the run's row, may commit once that lock is gone, its token still
    # holding the run) or by the resume: a saved step never runs again
    saved_first = run.steps[1]["attempt"] == 1
    assert started == (["one", "two"] if saved_first else ["one", "two", "two"])
    assert [s["attempt"] for s in run.steps] == ([1, 1] if saved_first else [1, 2])
    app.close()
