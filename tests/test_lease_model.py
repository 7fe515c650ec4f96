"""A property-based test of the lease protocol against a model.

Random interleavings of claim, heartbeat, finish, rescue and clock advance, by workers whose
memory of what they hold may be stale (a paused process), must never give a run two owners
nor accept a write with a stale token."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import rota
from rota.stores.base import NewRun, Outcome

from .conftest import WITH_MYSQL, make_app, postgres_schema, require, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


WORKERS = ("A", "B")
LEASE = 10.0


@dataclass
class ModelRun:
    status: str = "pending"
    owner: str | None = None
    token: int = 0
    lease_until: float = 0.0
    attempt: int = 0


class LeaseProtocol(RuleBasedStateMachine):
    url: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.clock = rota.FakeClock()
        self.app = make_app(self.url_factory(), clock=self.clock)
        ids = self.app.store.insert_runs([NewRun(task="t", max_attempts=1000) for _ in range(2)])
        self.model = {run_id: ModelRun() for run_id, _ in ids}
        self.beliefs: dict[str, dict[int, int]] = {w: {} for w in WORKERS}  # worker -> run -> token
        self.t = 0.0

    def url_factory(self) -> str:
        raise NotImplementedError

    def teardown(self) -> None:
        self.app.close()

    @rule(worker=st.sampled_from(WORKERS), n=st.integers(1, 3))
    def claim(self, worker: str, n: int) -> None:
        claimed = self.app.store.claim(worker, n, None, LEASE)
        expected = [rid for rid, m in self.model.items() if m.status == "pending"]
        assert len(claimed) == min(n, len(expected))
        for c in claimed:
            m = self.model[c.id]
            assert m.status == "pending", "claimed a run that was not pending"
            assert c.token > m.token, "a claim must get a token the run never had"
            m.status, m.owner, m.token, m.lease_until, m.attempt = (
                "running",
                worker,
                c.token,
                self.t + LEASE,
                m.attempt + 1,
            )
            assert c.attempt == m.attempt
            self.beliefs[worker][c.id] = c.token

    @rule(worker=st.sampled_from(WORKERS))
    def heartbeat(self, worker: str) -> None:
        held = sorted(self.beliefs[worker].items())
        alive, _ = self.app.store.heartbeat(held, LEASE)
        expected = {rid for rid, tok in held if self.model[rid].status == "running" and self.model[rid].token == tok}
        assert alive == expected
        for rid in alive:
            self.model[rid].lease_until = self.t + LEASE

    @precondition(lambda self: any(self.beliefs.values()))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        worker = data.draw(st.sampled_from([w for w in WORKERS if self.beliefs[w]]))
        rid = data.draw(st.sampled_from(sorted(self.beliefs[worker])))
        token = self.beliefs[worker].pop(rid)
        written = self.app.store.finish([Outcome(rid, token, "succeeded", result=str(token))])
        m = self.model[rid]
        should = m.status == "running" and m.token == token
        assert (rid in written) == should, "a stale token was accepted" if not should else "a valid finish was refused"
        if should:
            m.status = "succeeded"

    @rule()
    def rescue(self) -> None:
        rescued = {r.id for r in self.app.store.rescue()}
        expired = {rid for rid, m in self.model.items() if m.status == "running" and m.lease_until < self.t}
        assert rescued == expired
        for rid in rescued:
            self.model[rid].status = "pending"

    @rule(seconds=st.sampled_from([3.0, 10.5]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(timedelta(seconds=seconds))
        self.t += seconds

    @invariant()
    def database_matches_model_and_one_owner_at_most(self) -> None:
        for rid, m in self.model.items():
            run = self.app.get_run(rid)
            assert run.status == m.status
            if m.status in ("running", "succeeded"):
                assert (run.worker, run.token, run.attempt) == (m.owner, m.token, m.attempt)
            if m.status == "succeeded":
                assert run.result == m.token
            holders = [w for w in WORKERS if self.beliefs[w].get(rid) == run.token and run.status == "running"]
            assert len(holders) <= 1, f"run {rid} has two owners: {holders}"


class SQLiteLeaseProtocol(LeaseProtocol):
    def url_factory(self) -> str:
        self._dir = tempfile.TemporaryDirectory()
        return f"sqlite:///{self._dir.name}/rota.db"

    def teardown(self) -> None:
        super().teardown()
        self._dir.cleanup()


class PostgresLeaseProtocol(LeaseProtocol):
    def url_factory(self) -> str:
        self._schema = postgres_schema()
        return self._schema.__enter__()

    def teardown(self) -> None:
        super().teardown()
        self._schema.__exit__(None, None, None)


TestSQLiteLeaseProtocol = SQLiteLeaseProtocol.TestCase
TestSQLiteLeaseProtocol.settings = settings(max_examples=400, stateful_step_count=25, deadline=None)


@pytest.mark.postgres
class TestPostgresLeaseProtocol(PostgresLeaseProtocol.TestCase):  # type: ignore[misc,name-defined]
    settings = settings(max_examples=25, stateful_step_count=40, deadline=None)

    def setUp(self) -> None:
        require("postgres")


def test_the_stale_finish_scenario_explicitly(db_url: str) -> None:
    """The sequence the property test hunts for, spelled out: A's lease expires, the run is
    rescued and claimed by B, then A (back from a pause) tries to write its result."""
    clock = rota.FakeClock()
    app = make_app(db_url, clock=clock)
    ((rid, _),) = app.store.insert_runs([NewRun(task="t", max_attempts=5)])
    (a,) = app.store.claim("A", 1, None, LEASE)
    clock.advance(LEASE + 0.5)
    assert [r.id for r in app.store.rescue()] == [rid]
    (b,) = app.store.claim("B", 1, None, LEASE)
    assert app.store.heartbeat([(rid, a.token)], LEASE) == (set(), set())
    assert app.store.finish([Outcome(rid, a.token, "succeeded", result='"A"')]) == set()
    assert app.store.finish([Outcome(rid, a.token, "failed", error='{"type": "X"}')]) == set()
    assert app.store.hand_back([(rid, a.token)], "stale") == set()
    assert app.get_run(rid).status == "running" and app.get_run(rid).worker == "B"
    assert app.store.finish([Outcome(rid, b.token, "succeeded", result='"B"')]) == {rid}
    assert app.get_run(rid).result == "B"
    app.close()
