"""A stateful model test of the run lifecycle (rota/lifecycle.py) against the real stores.

Simulated workers with caps claim (starting what fits, holding the rest; or, idle, holding
the runs due within a window: claim_ahead), start held runs
(through Store.start before the handler, or as the real worker does: the handler at once,
the start written later by Store.start or with the outcome), heartbeat, finish, retry, hand
back, refuse (a worker without the run's task) and crash; a client enqueues, cancels, triggers an
exclusive schedule, retries and prunes final runs; the clock moves and any worker rescues. After every step the
database must show: a cancelled run never starts (the one exception: a held run whose worker
started it before it heard of the request, see rota/lifecycle.py); attempts count only starts; no worker has
more runs running than its cap; the exclusive schedule never has two active runs; and a
claim starts due runs in priority order (the held ones after the started ones, all before
any run left due)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import rota
from rota.models import Run
from rota.stores.base import Claimed, Outcome
from rota.stores.records import REFUSED

from .conftest import WITH_MYSQL, make_app, postgres_schema, require, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


LEASE = 10.0
CAPS = {"A": 1, "B": 2}
SCHEDULE = "ex"


@dataclass
class SimWorker:
    """What one worker process believes it holds."""

    id: str
    cap: int
    held: dict[int, Claimed] = field(default_factory=dict)
    running: dict[int, int] = field(default_factory=dict)  # run id -> token; start written
    local: dict[int, int] = field(default_factory=dict)  # started here, start not written (or refused)

    def tokens(self) -> list[tuple[int, int]]:
        return sorted(
            [(i, c.token) for i, c in self.held.items()] + list(self.running.items()) + list(self.local.items())
        )

    def busy(self) -> int:
        return len(self.running) + len(self.local)


def key(run: Run) -> tuple[int, datetime, int]:
    return (-run.priority, run.due_at, int(run.id))


class Lifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = rota.FakeClock()
        self.app = make_app(self.url_factory(), clock=self.clock, lease=LEASE)

        @self.app.task(name="t", retries=1)
        def t() -> None: ...

        self.task = t
        self.app.add_schedule(SCHEDULE, "t", every=3600, overlap="queue")
        # run id -> handler starts the database must count
        self.starts: dict[int, int] = {int(self.task.options(priority=p).enqueue().id): 0 for p in (1, 0, 2)}
        # cancelled before it started -> (attempt, started_at) then: they must never change
        self.unstarted_cancel: dict[int, tuple[int, datetime | None]] = {}
        # ... but started by its worker before it heard of the request (the one race allowed)
        self.raced: set[int] = set()
        self.caps: dict[str, int] = {}
        self.lives = 0
        self.workers = {name: self._new_worker(name) for name in CAPS}

    def url_factory(self) -> str:
        raise NotImplementedError

    def teardown(self) -> None:
        self.app.close()

    def _new_worker(self, name: str) -> SimWorker:
        self.lives += 1
        worker = SimWorker(f"{name}{self.lives}", CAPS[name])
        self.caps[worker.id] = worker.cap
        return worker

    def runs(self) -> list[Run]:
        return self.app.list_runs(limit=1000)

    # -- the client ----------------------------------------------------------------------
    @rule(priorities=st.lists(st.integers(0, 3), min_size=1, max_size=3), delay=st.sampled_from([0, 0, 5]))
    def enqueue(self, priorities: list[int], delay: int) -> None:
        for priority in priorities:
            h = self.task.options(priority=priority, delay=timedelta(seconds=delay) if delay else None).enqueue()
            self.starts[int(h.id)] = 0

    @rule()
    def trigger(self) -> None:
        self.starts[int(self.app.trigger(SCHEDULE).id)] = 0

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        if not self.starts:
            return
        run_id = data.draw(st.sampled_from(sorted(self.starts)))
        run = self.app.get_run(str(run_id))
        started_here = any(run_id in w.local for w in self.workers.values())  # the database does not know yet
        if (run.status == "pending" or run.held) and not started_here:
            self.unstarted_cancel.setdefault(run_id, (run.attempt, run.started_at))
        self.app.cancel(str(run_id))

    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        final = [r for r in self.runs() if r.is_final]
        if final:
            run = data.draw(st.sampled_from(final))
            with contextlib.suppress(rota.TriggerRefused):
                self.starts[int(self.app.retry(run.id).id)] = 0

    @rule(status=st.sampled_from(["succeeded", "failed", "cancelled"]))
    def prune(self, status: str) -> None:
        """Retention (transition prune): final runs of `status` finished before now go, and
        nothing else: every run not final before the prune is still there after it."""
        before = {int(r.id) for r in self.runs() if not r.is_final}
        self.app.store.prune(status, 0.0, 1000)
        left = {int(r.id): r for r in self.runs()}
        assert before <= left.keys(), f"prune deleted runs that were not final: {before - left.keys()}"
        for run_id in set(self.starts) - left.keys():
            del self.starts[run_id]  # gone: later rules draw only runs that exist

    @rule(seconds=st.sampled_from([0.0, 3.0, 10.5]))
    def advance_and_rescue(self, seconds: float) -> None:
        self.clock.advance(timedelta(seconds=seconds))
        self.app.store.rescue()  # any worker's poll

    # -- the workers ---------------------------------------------------------------------
    @rule(name=st.sampled_from(sorted(CAPS)), extra=st.integers(1, 3))
    def claim(self, name: str, extra: int) -> None:
        w = self.workers[name]
        free = w.cap - w.busy()
        if free + extra <= 0:
            return
        now = self.app.store.now()
        due = [r for r in self.runs() if r.status == "pending" and not r.queued and r.due_at <= now]
        claimed = self.app.store.claim(w.id, free + extra, None, LEASE, free)
        by_id = {int(r.id): r for r in due}
        assert {c.id for c in claimed} <= by_id.keys(), "claimed a run that was not due"
        order = sorted((by_id[c.id] for c in claimed), key=key)
        started = {c.id for c in claimed if not c.held}
        assert len(started) <= free
        assert {int(r.id) for r in order[: len(started)]} == started, "started out of priority order"
        left = [key(r) for r in due if int(r.id) not in by_id.keys() & {c.id for c in claimed}]
        assert not order or not left or key(order[-1]) < min(left), "a higher priority due run was left"
        for c in claimed:
            # claimed again while an older attempt of it is ours (rescued before we noticed):
            # that attempt is lost, as the real worker's dispatch makes it (tests/test_reclaim.py)
            w.running.pop(c.id, None)
            w.local.pop(c.id, None)
            if c.held:
                w.held[c.id] = c
            else:
                w.running[c.id] = c.token
                self.starts[c.id] += 1

    @rule(name=st.sampled_from(sorted(CAPS)), ahead=st.sampled_from([0.0, 6.0]))
    def claim_ahead(self, name: str, ahead: float) -> None:
        """An idle worker claims, held, the runs due within `ahead` seconds (the start rule
        then starts them, as the worker does at their due time)."""
        w = self.workers[name]
        free = w.cap - w.busy()
        if free <= 0 or w.held:
            return
        now = self.app.store.now()
        window = [
            r for r in self.runs()
            if r.status == "pending" and not r.queued and r.due_at <= now + timedelta(seconds=ahead)
            and not r.cancel_requested
        ]  # fmt: skip
        by_id = {int(r.id): r for r in window}
        claimed = self.app.store.claim_ahead(w.id, free, None, LEASE, ahead)
        assert {c.id for c in claimed} <= by_id.keys(), "claimed ahead a run not due within the window"
        assert all(c.held and c.started_at is None for c in claimed), "a run claimed ahead was started"
        order = sorted((by_id[c.id] for c in claimed), key=key)
        left = [key(r) for r in window if int(r.id) not in {c.id for c in claimed}]
        assert not order or not left or key(order[-1]) < min(left), "a higher priority run was left"
        for c in claimed:
            assert c.attempt == by_id[c.id].attempt, "a claim ahead counted an attempt"
            w.running.pop(c.id, None)
            w.local.pop(c.id, None)
            w.held[c.id] = c

    @rule(name=st.sampled_from(sorted(CAPS)), here=st.booleans())
    def start(self, name: str, here: bool) -> None:
        """Start the worker's best held run: through Store.start before its handler, or (here)
        as the real worker does: the handler at once, its start written later."""
        w = self.workers[name]
        if not w.held:
            return
        if w.busy() >= w.cap:  # a handler ends: its slot takes the next held run
            run_id, token = min({**w.running, **w.local}.items())
            self._end(w, run_id, Outcome(run_id, token, "succeeded"))
        snapshot = {int(r.id): r for r in self.runs()}
        c = min(w.held.values(), key=lambda c: key(snapshot[c.id]))  # priority order within the worker
        del w.held[c.id]
        if here:
            if c.id in self.unstarted_cancel:  # requested while held, and the worker has not heard of it
                self.raced.add(c.id)
            w.local[c.id] = c.token
            return
        run = snapshot[c.id]
        may = run.held and run.token == c.token and not run.cancel_requested
        ok = self.app.store.start([(c.id, c.token, 0.0)]) == {c.id}
        assert ok == may, f"start of {run} was {'accepted' if ok else 'refused'}"
        if ok:
            w.running[c.id] = c.token
            self.starts[c.id] += 1
        elif run.token == c.token and run.status == "running":  # cancel requested: it never starts
            self.app.store.finish([Outcome(c.id, c.token, "cancelled", error='{"type": "Cancelled"}')])

    @rule(name=st.sampled_from(sorted(CAPS)))
    def write_starts(self, name: str) -> None:
        w = self.workers[name]
        if not w.local:
            return
        snapshot = {int(r.id): r for r in self.runs()}
        written = self.app.store.start([(i, tok, 0.0) for i, tok in sorted(w.local.items())])
        for run_id, token in sorted(w.local.items()):
            run = snapshot[run_id]
            may = run.held and run.token == token and not run.cancel_requested
            assert (run_id in written) == may, f"start of {run} was {'accepted' if run_id in written else 'refused'}"
            if run_id in written:
                del w.local[run_id]
                w.running[run_id] = token
                self.starts[run_id] += 1
            elif run.token != token or run.status != "running":
                del w.local[run_id]  # lost: the worker stops it; its outcome would be refused
            # else cancel requested: it stays local, its outcome will record the start

    def _end(self, w: SimWorker, run_id: int, outcome: Outcome) -> None:
        """Write an outcome; a run started here carries its start (Outcome.started)."""
        if run_id in w.local:
            del w.local[run_id]
            outcome.started = 0.0
            if self.app.store.finish([outcome]):
                self.starts[run_id] += 1
            return
        w.running.pop(run_id, None)
        if run_id in w.held and w.held[run_id].token == outcome.token:
            del w.held[run_id]
        self.app.store.finish([outcome])

    @rule(name=st.sampled_from(sorted(CAPS)))
    def heartbeat(self, name: str) -> None:
        w = self.workers[name]
        alive, cancel = self.app.store.heartbeat(w.tokens(), LEASE)
        for run_id, token in w.tokens():
            if run_id not in alive:
                w.held.pop(run_id, None)
                w.running.pop(run_id, None)
                w.local.pop(run_id, None)
            elif run_id in cancel:
                self._end(w, run_id, Outcome(run_id, token, "cancelled", error='{"type": "Cancelled"}'))

    @rule(name=st.sampled_from(sorted(CAPS)), how=st.sampled_from(["succeeded", "failed", "retry"]))
    def finish(self, name: str, how: str) -> None:
        w = self.workers[name]
        if not w.busy():
            return
        run_id, token = min({**w.running, **w.local}.items())
        if how == "retry":
            outcome = Outcome(run_id, token, "pending", error='{"type": "E"}', retry_in=0.0)
        else:
            outcome = Outcome(run_id, token, how, error=None if how == "succeeded" else '{"type": "E"}')
        self._end(w, run_id, outcome)

    @rule(name=st.sampled_from(sorted(CAPS)))
    def refuse(self, name: str) -> None:
        """The worker lacks the task of its first run (held, started here or running): it
        gives the run back, its attempt with it, due no sooner than its own due time."""
        w = self.workers[name]
        tokens = w.tokens()
        if not tokens:
            return
        run_id, token = tokens[0]
        before = {int(r.id): r for r in self.runs()}[run_id]
        w.held.pop(run_id, None)
        w.running.pop(run_id, None)
        w.local.pop(run_id, None)
        if self.app.store.finish([Outcome(run_id, token, REFUSED, error='{"type": "TaskNotFound"}')]):
            if before.started_at is not None:
                self.starts[run_id] -= 1
            after = {int(r.id): r for r in self.runs()}[run_id]
            assert after.started_at is None and after.due_at >= before.due_at, (before, after)

    @rule(name=st.sampled_from(sorted(CAPS)), crash=st.booleans())
    def stop(self, name: str, crash: bool) -> None:
        """A worker stops: cleanly (it hands back what it holds), or killed -9 (its runs wait
        for their lease to expire and a rescue)."""
        w = self.workers[name]
        if crash:
            self.workers[name] = self._new_worker(name)
            return
        snapshot = {int(r.id): r for r in self.runs()}
        back = self.app.store.hand_back(w.tokens(), "shutdown")
        for run_id in back:
            run = snapshot[run_id]
            if run.started_at is not None and not run.cancel_requested:
                self.starts[run_id] -= 1  # a started run handed back gives its attempt back
        self.workers[name] = self._new_worker(name)

    # -- what the database must show after every step ------------------------------------
    @invariant()
    def the_lifecycle_holds(self) -> None:
        runs = self.runs()
        running: dict[str, int] = {}
        active = 0
        for run in runs:
            run_id = int(run.id)
            assert run.attempt == self.starts[run_id], f"attempts count only starts: {run}"
            if run_id in self.unstarted_cancel and run_id not in self.raced:
                assert (run.attempt, run.started_at) == self.unstarted_cancel[run_id], f"a cancelled run started: {run}"

            if run.status == "running" and not run.held:
                running[run.worker or ""] = running.get(run.worker or "", 0) + 1
            if run.schedule == SCHEDULE and run.status in ("pending", "running") and not run.queued:
                active += 1
            assert run.is_final == (run.finished_at is not None), run
        for worker, n in running.items():
            assert n <= self.caps[worker], f"{worker} runs {n} > its cap {self.caps[worker]}"
        assert active <= 1, "the exclusive schedule has two active runs"


SETTINGS: dict[str, Any] = {
    "max_examples": 200,
    "stateful_step_count": 50,
    "deadline": None,
    "derandomize": True,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
}


class SQLiteLifecycle(Lifecycle):
    def url_factory(self) -> str:
        self._dir = tempfile.TemporaryDirectory()
        return f"sqlite:///{self._dir.name}/rota.db"

    def teardown(self) -> None:
        super().teardown()
        self._dir.cleanup()


class PostgresLifecycle(Lifecycle):
    def url_factory(self) -> str:
        self._schema = postgres_schema()
        return self._schema.__enter__()

    def teardown(self) -> None:
        super().teardown()
        self._schema.__exit__(None, None, None)


TestSQLiteLifecycle = SQLiteLifecycle.TestCase
TestSQLiteLifecycle.settings = settings(**SETTINGS)


@pytest.mark.postgres
class TestPostgresLifecycle(PostgresLifecycle.TestCase):  # type: ignore[misc, valid-type]
    settings = settings(**{**SETTINGS, "max_examples": 60})

    def setUp(self) -> None:
        require("postgres")
