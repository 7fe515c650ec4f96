"""The tick path under random interleavings (issue 18, the tick invariants of the model
test), against both stores. One schedule per misfire and overlap policy pair, all on the
same interval; two simulated workers plan ticks (with and without the lead), runs are
claimed and finished, a client triggers by hand, the clock jumps. A worker that made a
tick ahead and never claims it is a worker killed. After every step, from the database:
every tick has exactly one row, each missed tick meets its misfire policy, and a trigger
is refused only while a run really is active."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

import rota
from rota.stores.base import Outcome

from .conftest import WITH_MYSQL, store_url
from .test_ticks_ahead import START


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


pytestmark = pytest.mark.slow
LEAD = 0.3
POLICIES = list(itertools.product(["skip", "coalesce", "all"], ["skip", "queue", "replace", "concurrent"]))
Row = tuple[int, datetime, str, Any, datetime | None, datetime | None, Any]


def tick_model(app: rota.App, fake: rota.FakeClock) -> type[RuleBasedStateMachine]:
    store: Any = app.store

    def rows_of(names: list[str]) -> dict[str, list[Row]]:
        """The tick rows of each schedule named, in one query (the invariants read them
        after every step: one round trip, not one per schedule)."""
        marks = ", ".join(store._p(f"n{i}") for i in range(len(names)))
        sql = (
            "SELECT id, tick, status, error, started_at, finished_at, misfire_at, schedule FROM rota_runs"
            f" WHERE schedule IN ({marks}) AND tick IS NOT NULL ORDER BY schedule, tick"
        )
        with store._read() as s:
            found = s.q_text(sql, **{f"n{i}": name for i, name in enumerate(names)})
        out: dict[str, list[Row]] = {name: [] for name in names}
        for r in found:
            row = (int(r[0]), store._dt(r[1]), r[2], r[3], store._dt(r[4]), store._dt(r[5]), r[6])
            out[r[7]].append(row)
        return out

    class Ticks(RuleBasedStateMachine):
        @initialize(every=st.sampled_from([1, 10]), grace=st.sampled_from([0.5, 5.0]))
        def add(self, every: int, grace: float) -> None:
            fake.set(START)  # every example from the same time: replays behave the same
            for left in app.list_schedules():  # an example that failed left its schedules
                app.remove_schedule(left.name)
            self.workers = [app.worker(install_signal_handlers=False) for _ in range(2)]
            self.every, self.grace = every, timedelta(seconds=grace)
            tag = uuid.uuid4().hex[:6]
            self.queue = f"q{tag}"  # claims see this example's runs only
            self.names = {f"m{tag}_{misfire}_{overlap}": (misfire, overlap) for misfire, overlap in POLICIES}
            for name, (misfire, overlap) in self.names.items():
                app.add_schedule(
                    name, "t", every=every, misfire=misfire, misfire_grace=grace, overlap=overlap, queue=self.queue
                )
            first = app.get_schedule(next(iter(self.names))).next_run_at
            assert first is not None
            self.first: datetime = first
            self.created: dict[int, datetime] = {}  # run id -> the (fake) time its row was made
            self.active: list[Any] = []

        @rule(seconds=st.sampled_from([0.1, 0.25, 0.5, 1.0, 3.0, 12.0, 70.0]))
        def advance(self, seconds: float) -> None:
            """Time passes with every worker killed (or not yet restarted)."""
            fake.advance(timedelta(seconds=seconds))

        @rule(offset=st.sampled_from([-0.2, 0.0, 0.4, 1.0, 6.0]))
        def near_a_tick(self, offset: float) -> None:
            """To the next tick plus `offset`: inside the lead, at the tick, past a short
            grace, past a long one."""
            now = fake.now()
            k = int((now - self.first).total_seconds() // self.every) + 1
            then = self.first + timedelta(seconds=self.every * k + offset)
            if then > now:
                fake.set(then)

        @rule(
            seconds=st.sampled_from([0.1, 0.15, 0.25]),
            steps=st.sampled_from([1, 4, 10]),
            claim_first=st.booleans(),
            workers=st.sampled_from([1, 2]),
        )
        def live(self, seconds: float, steps: int, claim_first: bool, workers: int) -> None:
            """Time passes with live workers: at each step each plans ahead and claims, in
            either order (a worker's ticker and claimer run side by side). A restarted
            worker may claim before its ticker's first pass; a busy one claims nothing."""
            for _ in range(steps):
                fake.advance(timedelta(seconds=seconds))
                for worker in range(workers):
                    if claim_first:
                        self.claim()
                    self.plan(worker, LEAD)
                    if not claim_first:
                        self.claim()

        @rule(
            at=st.sampled_from([-0.25, -0.1, 0.0, 0.3]),
            down=st.sampled_from([0.3, 1.0, 3.0, 12.0, 70.0]),
            claim_first=st.booleans(),
        )
        def kill_and_restart(self, at: float, down: float, claim_first: bool) -> None:
            """The worker plans (ahead) near a tick, is killed -9, and a worker starts
            `down` seconds later: its claimer may run before its ticker."""
            self.near_a_tick(at)
            self.plan(0, LEAD)
            fake.advance(timedelta(seconds=down))
            if claim_first:
                self.claim()
            self.plan(1, LEAD)
            self.claim()

        @rule(which=st.sampled_from(range(len(POLICIES))), claim=st.booleans())
        def trigger_in_the_lead(self, which: int, claim: bool) -> None:
            """A live worker made the next tick ahead; a client triggers before it comes."""
            self.near_a_tick(-0.2)
            self.plan(0, LEAD)
            self.trigger(which)
            if claim:
                self.claim()

        @rule(worker=st.sampled_from([0, 1]), lead=st.sampled_from([0.0, LEAD]))
        def plan(self, worker: int, lead: float) -> None:
            asyncio.run(self.workers[worker]._ticker.ticks(lead))
            now = fake.now()
            for found in rows_of(list(self.names)).values():
                for row in found:
                    self.created.setdefault(row[0], now)

        @rule()
        def claim(self) -> None:
            if len(self.active) < 8:  # at capacity: nothing more is claimed
                self.active.extend(store.claim("model", 8 - len(self.active), [self.queue], 3600))

        @rule(status=st.sampled_from(["succeeded", "failed"]), n=st.sampled_from([1, 4, 100]))
        def finish(self, status: str, n: int) -> None:
            done, self.active = self.active[:n], self.active[n:]
            store.finish([Outcome(c.id, c.token, status, result="null", error='{"type": "E"}') for c in done])

        @rule(which=st.sampled_from(range(len(POLICIES))))
        def trigger(self, which: int) -> None:
            name = list(self.names)[which]
            try:
                app.trigger(name)
            except rota.TriggerRefused:  # only while a run really is active: due or running
                now = fake.now()
                live = [r for r in app.list_runs(schedule=name, limit=1000) if r.status in ("pending", "running")]
                assert any(r.status == "running" or (r.scheduled_for <= now and not r.queued) for r in live), live

        @invariant()
        def ticks_keep_their_promises(self) -> None:
            """From the database, one read per step: every tick has exactly one row, and
            the missed ticks meet the misfire policy."""
            names = getattr(self, "names", {})
            if not names:
                return
            found = rows_of(list(names))
            upto = {s.name: s.next_run_at for s in app.list_schedules() if s.name in names}
            for name, (misfire, _) in names.items():
                self.every_tick_has_exactly_one_row(name, found[name], upto[name])
                self.missed_ticks_meet_the_misfire_policy(name, misfire, found[name])

        def every_tick_has_exactly_one_row(self, name: str, found: list[Row], upto: datetime | None) -> None:
            ticks = [row[1] for row in found]
            assert upto is not None
            n = round((upto - self.first).total_seconds() / self.every)
            assert ticks == [self.first + timedelta(seconds=self.every * k) for k in range(n)], name

        def missed_ticks_meet_the_misfire_policy(self, name: str, misfire: str, found: list[Row]) -> None:
            ran_late: dict[datetime, list[datetime]] = {}
            for row in found:
                late = self._check_row(misfire, row)
                if late is not None:
                    ran_late.setdefault(late, []).append(row[1])
            if misfire == "coalesce":  # of the missed ticks planned at once, one runs
                assert all(len(ticks) == 1 for ticks in ran_late.values()), (name, ran_late)

        def _check_row(self, misfire: str, row: Row) -> datetime | None:
            """Check one tick's row; if it was made late and started all the same, when it
            was made (the missed ticks made at one time are one catch-up)."""
            run_id, tick, _, error, started, finished, _ = row
            if error is not None and '"Misfire"' in error:
                assert misfire != "all" and started is None, row
                assert finished is not None and finished - tick > self.grace, row  # really missed
                return None
            if error is not None and '"Replaced"' in error and "manual trigger" in error:
                assert finished is not None and tick <= finished, row  # not a run made ahead of its tick
            if started is None:
                return None
            made = self.created.get(run_id, fake.now())
            late = started - tick > self.grace if made < tick else made - tick > self.grace
            if not late:
                return None
            assert misfire != "skip", f"tick {tick} ran late under misfire=skip: {row}"
            return made if made >= tick else None  # made ahead: judged later, on its own

        def teardown(self) -> None:
            if not hasattr(self, "names"):
                return
            store.finish([Outcome(c.id, c.token, "succeeded", result="null") for c in self.active])
            for name in self.names:
                app.remove_schedule(name)
            for worker in self.workers:
                worker._threads.close()
                worker._db_pool.close()

    return Ticks


def test_the_tick_path_keeps_its_invariants(app_factory: Callable[..., rota.App]) -> None:
    fake = rota.FakeClock(START)
    app = app_factory(clock=fake)
    app.task(name="t")(lambda *a, **k: None)
    run_state_machine_as_test(
        tick_model(app, fake),
        settings=settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        ),
    )
