"""Step checkpoints ride the worker's own transactions (issue 43): a checkpoint waiting for
its commit goes along in the next finish / finish-and-claim / claim transaction the worker
commits (one more statement in it, no commit of its own), fenced by its run's token as on
its own; a riding transaction that fails hands its checkpoints back, to be written on their
own; `ctx.step` still returns only once its checkpoint committed
(rota/stores/sqlstore/checkpoints.py: GroupCommit.board, Ride)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import rota
from rota.durable import Durable, StepRefused
from rota.errors import DatabaseUnavailable
from rota.stores.base import Outcome

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for
from .test_durable_checkpoints import _claimed

# the transactions a checkpoint rides, per store (the others keep a commit of their own:
# PostgreSQL's finish without a claim is autocommitted statements; MySQL's claim takes its
# tokens on a connection of their own)
RIDES = {
    "sqlite": {"finish", "finish_and_claim", "claim"},
    "postgresql": {"finish_and_claim", "claim"},
    "mysql": {"finish", "finish_and_claim"},
}


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    yield from store_url(request, tmp_path)


class _Steps:
    """Checkpoints made by handler threads, waiting up to `window` s for a ride (the worker
    seen busy); each thread's result (the step's value, or its exception) in `results`."""

    def __init__(self, app: rota.App, window: float) -> None:
        self.app = app
        self.commits = app.store._checkpoints
        self.commits.window = window
        self.commits._offered = time.monotonic() + 3600  # a riding transaction "came recently"
        self.own: list[int] = []  # batches written on their own (their sizes)
        write = self.commits._write

        def counted(rows: Any) -> Any:
            self.own.append(len(rows))
            return write(rows)

        self.commits._write = counted
        self.results: dict[str, Any] = {}
        self.threads: list[threading.Thread] = []

    def step(self, claim: Any, name: str, token: int | None = None) -> None:
        def run() -> None:
            durable = Durable(self.app.store, claim.id, claim.token if token is None else token, "held")
            try:
                self.results[name] = durable.step(name, lambda: name.upper(), (), {})
            except (StepRefused, DatabaseUnavailable) as exc:
                self.results[name] = exc

        self.threads.append(threading.Thread(target=run))
        self.threads[-1].start()
        wait_for(lambda: len(self.commits._queue) == len(self.threads), what="the checkpoints waiting")

    def joined(self, timeout: float) -> bool:
        for t in self.threads:
            t.join(timeout)
        return not any(t.is_alive() for t in self.threads)


def _transaction(app: rota.App, how: str, finished: Any) -> None:
    outcome = Outcome(finished.id, finished.token, "succeeded", result="1")
    if how == "finish":
        assert app.store.finish([outcome]) == {finished.id}
    elif how == "finish_and_claim":
        assert app.store.finish_and_claim([outcome], "w1", 1, None, 30.0, 1)[0] == {finished.id}
    else:
        app.store.claim("w1", 1, None, 30.0, 1)


@pytest.mark.parametrize("how", ["finish", "finish_and_claim", "claim"])
def test_a_waiting_checkpoint_commits_in_the_workers_next_transaction(app: rota.App, how: str) -> None:
    stepper, finished = _claimed(app, 2)
    rides = how in RIDES[app.store.dialect]
    steps = _Steps(app, window=60.0 if rides else 0.3)
    steps.step(stepper, "a")
    _transaction(app, how, finished)
    assert steps.joined(10)  # long before its window ends: the transaction took it along
    assert steps.results == {"a": "A"}
    assert [s.name for s in app.store.steps_of(stepper.id)] == ["a"]
    if rides:  # no statement and no commit of its own: one statement in the worker's transaction
        assert (steps.own, steps.commits.rode, steps.commits.batches) == ([], 1, 0)
    else:  # this transaction is not ridden here: written on its own once its window ended
        assert (steps.own, steps.commits.rode) == ([1], 0)


def test_a_riding_checkpoint_is_fenced_by_its_own_token(app: rota.App) -> None:
    mine, stale, finished = _claimed(app, 3)
    steps = _Steps(app, window=60.0)
    steps.step(mine, "mine")
    steps.step(stale, "stale", token=stale.token + 1000)  # its lease taken over
    _transaction(app, "finish_and_claim", finished)
    assert steps.joined(10)
    assert steps.results["mine"] == "MINE" and steps.own == []
    assert isinstance(steps.results["stale"], StepRefused)  # refused: the handler stops
    assert app.store.steps_of(stale.id) == []  # nothing saved under the stale token
    assert [s.name for s in app.store.steps_of(mine.id)] == ["mine"]
    assert app.get_run(str(finished.id)).status == "succeeded"


def _cut_before_commit(app: rota.App, monkeypatch: pytest.MonkeyPatch) -> str:
    """Make the worker's next riding transaction fail after the checkpoints' statement ran,
    before its commit (it rolls back); returns which transaction that is."""
    store: Any = app.store
    if store.dialect == "postgresql":
        session = store._session

        @contextlib.contextmanager
        def cut(*args: Any, **kwargs: Any) -> Iterator[Any]:
            with session(*args, **kwargs) as s:
                yield s
                monkeypatch.setattr(store, "_session", session)
                raise DatabaseUnavailable("the connection died before the commit")

        monkeypatch.setattr(store, "_session", cut)
        return "finish_and_claim"
    finish = store._finish

    def cut_finish(s: Any, outcomes: Any) -> Any:
        monkeypatch.setattr(store, "_finish", finish)
        raise DatabaseUnavailable("the connection died before the commit")

    monkeypatch.setattr(store, "_finish", cut_finish)
    return "finish"


def test_a_rolled_back_riding_transaction_hands_its_checkpoints_back(
    app: rota.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, finished = _claimed(app, 3)
    steps = _Steps(app, window=60.0)
    steps.step(first, "a")
    steps.step(second, "b")
    how = _cut_before_commit(app, monkeypatch)
    with pytest.raises(DatabaseUnavailable):
        _transaction(app, how, finished)
    assert steps.joined(10)  # not left waiting: written on their own at once
    assert steps.results == {"a": "A", "b": "B"}
    assert steps.commits.rode == 0 and sum(steps.own) == 2  # nothing reported saved by the ride
    assert [s.name for s in app.store.steps_of(first.id)] == ["a"]
    assert [s.name for s in app.store.steps_of(second.id)] == ["b"]
    assert app.get_run(str(finished.id)).status == "running"  # the transaction did roll back


def test_a_step_returns_only_once_its_checkpoint_committed_in_a_busy_worker(app: rota.App) -> None:
    """Through a worker draining runs (its finishes and claims ridden): every step seen saved
    from another connection as soon as it returned, none lost, none run twice."""
    unsaved: list[str] = []
    calls: list[str] = []

    @app.task(name="stepper", pass_context=True)
    def stepper(ctx: rota.RunContext) -> int:
        value = int(ctx.step("s", lambda: calls.append(ctx.run_id) or 1))
        if [s.name for s in app.store.steps_of(int(ctx.run_id))] != ["s"]:
            unsaved.append(ctx.run_id)
        return value + 1

    ids = stepper.enqueue_many([((), {}) for _ in range(60)])
    start_worker(app, concurrency=4)
    wait_for(lambda: app.stats()["runs"].get("succeeded", 0) == 60, 30, "the runs to succeed")
    assert unsaved == [] and sorted(calls) == sorted(ids)
    commits = app.store._checkpoints
    assert commits.written + commits.rode == 60
