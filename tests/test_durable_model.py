"""A stateful model test of durable steps (rota/durable.py) against the real stores.

Simulated workers claim runs of one durable task and execute its handler (steps a, b, a
30 s sleep, step c, a wait for signal "go" of at most 60 s, step d), fully or crashing after
any instruction; a worker may also freeze (keep believing it holds a run past its lease) and
go on later with its stale token. A client signals runs; the clock moves; any worker rescues
and heartbeats. After every step: no saved step ran again, no checkpoint was saved under a
token that did not hold its run, and no parked run holds a slot (pending, no lease, held by no
simulated worker); no worker has more runs running than its cap."""

from __future__ import annotations

import json
import tempfile
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import rota
from rota.durable import Durable, Parked, StepRefused
from rota.stores.base import Claimed, Outcome
from rota.stores.records import PARKED

from .conftest import MYSQL_URL, make_app, postgres_schema, require

LEASE = 10.0
CAPS = {"A": 1, "B": 2}
PROGRAM = ("a", "b", "sleep", "c", "wait", "d")


class FencedStore:
    """The store as a handler's Durable sees it, recording every checkpoint it saves and
    whether the saving token held its run at that moment."""

    def __init__(self, store: Any, model: DurableModel) -> None:
        self._store = store
        self._model = model

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def save_step(self, run_id: int, token: int, step: Any, took: float, session: Any = None) -> bool:
        run = self._store.get_run(run_id)
        holds = run.status == "running" and run.token == token
        saved = bool(self._store.save_step(run_id, token, step, took))
        if saved and not holds:
            self._model.violations.append(f"run {run_id}: step {step.name!r} saved under stale token {token}")
        return saved


class DurableModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = rota.FakeClock()
        self.app = make_app(self.url_factory(), clock=self.clock, lease=LEASE)
        self.task = self.app.task(name="t", retries=20)(lambda: None)
        self.runs = [int(self.task.enqueue().id) for _ in range(3)]
        self.held: dict[str, dict[int, Claimed]] = {w: {} for w in CAPS}  # what each worker believes it holds
        self.lives = dict.fromkeys(CAPS, 0)  # a crashed worker comes back as a new process (a new id)
        self.calls: dict[tuple[int, str], int] = {}
        self.violations: list[str] = []
        self.fenced = FencedStore(self.app.store, self)

    def url_factory(self) -> str:
        raise NotImplementedError

    def teardown(self) -> None:
        self.app.close()

    # -- the handler -------------------------------------------------------------------
    def _effect(self, run_id: int, name: str) -> str:
        saved = {s.name: s.outcome for s in self.app.store.steps_of(run_id)}  # type: ignore[attr-defined]
        if saved.get(name) == "succeeded":
            self.violations.append(f"run {run_id}: saved step {name!r} ran again")
        self.calls[(run_id, name)] = self.calls.get((run_id, name), 0) + 1
        return f"{name}-done"

    def _execute(self, c: Claimed, crash_after: int | None) -> str:
        """Run the handler; 'crashed', 'refused', 'parked' or 'done'."""
        d = Durable(self.fenced, c.id, c.token, "t", steps=c.steps)  # the read-skip as a worker does it
        try:
            for i, what in enumerate(PROGRAM):
                if crash_after is not None and i == crash_after:
                    return "crashed"
                if what == "sleep":
                    d.sleep(30)
                elif what == "wait":
                    d.wait_for("go", 60)
                else:
                    d.step(what, self._effect, (c.id, what), {})
        except StepRefused:
            return "refused"
        except Parked as parked:
            result = json.dumps([parked.kind, parked.name])
            self.app.store.finish([Outcome(c.id, c.token, PARKED, result=result, retry_in=parked.wake_in)])
            return "parked"
        self.app.store.finish([Outcome(c.id, c.token, "succeeded", result='"ok"')])
        return "done"

    # -- rules -------------------------------------------------------------------------
    @rule(worker=st.sampled_from(sorted(CAPS)))
    def claim(self, worker: str) -> None:
        free = CAPS[worker] - len(self.held[worker])
        if free > 0:
            for c in self.app.store.claim(f"{worker}{self.lives[worker]}", free, None, LEASE, free):
                self.held[worker][c.id] = c

    @rule(worker=st.sampled_from(sorted(CAPS)), which=st.integers(0, 2), crash=st.none() | st.integers(0, 5))
    def execute(self, worker: str, which: int, crash: int | None) -> None:
        held = sorted(self.held[worker])
        if not held:
            return
        c = self.held[worker].pop(held[which % len(held)])
        outcome = self._execute(c, crash)
        if outcome == "crashed":  # its process died: every run it held is lost until rescued
            self.lives[worker] += 1
            self.held[worker] = {}
        if outcome == "refused":
            run = self.app.get_run(str(c.id))
            assert run.status != "running" or run.token != c.token, "a holding token was refused"

    @rule(worker=st.sampled_from(sorted(CAPS)))
    def heartbeat(self, worker: str) -> None:
        held = [(i, c.token) for i, c in self.held[worker].items()]
        alive, _ = self.app.store.heartbeat(held, LEASE)
        if held and len(alive) < len(held) and worker == "A":
            return  # worker A freezes: it keeps believing it holds its lost runs (stale tokens)
        self.held[worker] = {i: c for i, c in self.held[worker].items() if i in alive}

    @rule(seconds=st.sampled_from([1, 11, 31, 61]))
    def tick(self, seconds: int) -> None:
        self.clock.advance(timedelta(seconds=seconds))

    @rule()
    def rescue(self) -> None:
        self.app.store.rescue()

    @rule(which=st.integers(0, 2), payload=st.integers(0, 9))
    def signal(self, which: int, payload: int) -> None:
        try:
            self.app.signal(self.runs[which], "go", payload)
        except rota.SignalRefused:
            assert self.app.get_run(self.runs[which]).is_final

    # -- invariants ----------------------------------------------------------------------
    @invariant()
    def no_saved_step_ran_again_and_no_stale_token_saved(self) -> None:
        assert not self.violations, self.violations

    @invariant()
    def parked_runs_hold_no_slot(self) -> None:
        believed = {i for held in self.held.values() for i in held}
        running: dict[str, int] = {}
        store: Any = self.app.store
        for run_id in self.runs:
            run = store.get_run(run_id)  # (the store's: without steps)
            if run.status == "running" and run.worker is not None:
                running[run.worker] = running.get(run.worker, 0) + 1
            if store.wait_of(run_id) is not None:
                assert run.status == "pending" and run.lease_until is None and run.started_at is None, run
                if run_id in believed:  # only a frozen worker's stale belief may name it
                    assert any(c.token != run.token for h in self.held.values() for i, c in h.items() if i == run_id)
        for worker, n in running.items():
            assert n <= CAPS[worker[0]], (worker, n)


SETTINGS: dict[str, Any] = {
    "max_examples": 50,
    "stateful_step_count": 40,
    "deadline": None,
    "derandomize": True,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
}


class SQLiteDurableModel(DurableModel):
    def url_factory(self) -> str:
        self._dir = tempfile.TemporaryDirectory()
        return f"sqlite:///{self._dir.name}/rota.db"

    def teardown(self) -> None:
        super().teardown()
        self._dir.cleanup()


class PostgresDurableModel(DurableModel):
    def url_factory(self) -> str:
        self._schema = postgres_schema()
        return self._schema.__enter__()

    def teardown(self) -> None:
        super().teardown()
        self._schema.__exit__(None, None, None)


class MySQLDurableModel(DurableModel):
    def url_factory(self) -> str:
        from tests import mysql_db

        self._database = mysql_db.database(MYSQL_URL)
        return self._database.__enter__()

    def teardown(self) -> None:
        super().teardown()
        self._database.__exit__(None, None, None)


TestSQLiteDurableModel = SQLiteDurableModel.TestCase
TestSQLiteDurableModel.settings = settings(**SETTINGS)


@pytest.mark.postgres
class TestPostgresDurableModel(PostgresDurableModel.TestCase):  # type: ignore[misc, valid-type]
    settings = settings(**{**SETTINGS, "max_examples": 20})

    def setUp(self) -> None:
        require("postgres")


@pytest.mark.mysql
class TestMySQLDurableModel(MySQLDurableModel.TestCase):  # type: ignore[misc, valid-type]
    settings = settings(**{**SETTINGS, "max_examples": 20})

    def setUp(self) -> None:
        require("mysql")
