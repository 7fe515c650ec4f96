"""Finishes of parents whose dependents cross never deadlock (PostgreSQL). Dependent C1 waits
for runs 1 and 3, C2 for runs 2 and 4. One worker finishes {1, 4}, another {2, 3}: the
rota_run_settled trigger updates each parent's dependents as that parent's row is written, so
the first would take C1 then C2 and the second C2 then C1. Each finish locks the waiting
dependents of its whole batch in id order first (as it locks the schedules), so one waits
for the other instead of both waiting for deadlock_timeout."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import psycopg
import pytest

import rota
from rota.stores.base import Claimed, Outcome

from .conftest import make_app


def _blocked(url: str, blocker: int, count: int, timeout: float = 10.0) -> None:
    """Until `count` sessions wait for a lock behind the blocker's session (directly or not)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "WITH RECURSIVE behind(pid) AS (SELECT %s::int UNION"
                " SELECT a.pid FROM pg_stat_activity a, behind b WHERE b.pid = ANY(pg_blocking_pids(a.pid)))"
                " SELECT count(*) - 1 FROM behind",
                (blocker,),
            ).fetchone()
            if row is not None and row[0] >= count:
                return
            time.sleep(0.02)
    raise AssertionError(f"fewer than {count} sessions waited for a lock")


def _crossed(app: rota.App) -> tuple[dict[int, Claimed], list[str]]:
    @app.task(name="step")
    def step(n: int) -> int:
        return n

    app.migrate()
    parents = [step.enqueue(n) for n in range(4)]
    children = [
        step.options(after=[parents[0], parents[2]]).enqueue(10),
        step.options(after=[parents[1], parents[3]]).enqueue(20),
    ]
    claims = {c.id: c for c in app.store.claim("w", 4, None, 30)}
    assert sorted(claims) == sorted(int(p.id) for p in parents)
    return {i: claims[int(p.id)] for i, p in enumerate(parents)}, [c.id for c in children]


def _ok(c: Claimed) -> Outcome:
    return Outcome(c.id, c.token, "succeeded", result=str(c.id))


def _failed(c: Claimed) -> Outcome:
    return Outcome(c.id, c.token, "failed", error='{"type": "X"}', history='{"status": "failed"}')


@pytest.mark.parametrize("two_statements", [False, True], ids=["one-statement", "two-statements"])
def test_crossed_dependents_do_not_deadlock_their_parents_finishes(
    pg_url: str, caplog: pytest.LogCaptureFixture, two_statements: bool
) -> None:
    app = make_app(pg_url)
    p, children = _crossed(app)
    if two_statements:  # a success and a failure: finish_succeeded, then finish, in one transaction
        one, two = [_ok(p[0]), _failed(p[3])], [_ok(p[1]), _failed(p[2])]
    else:
        one, two = [_ok(p[0]), _ok(p[3])], [_ok(p[1]), _ok(p[2])]
    written: list[set[int]] = []
    errors: list[BaseException] = []

    def finish(outcomes: list[Outcome]) -> Callable[[], None]:
        def run() -> None:
            try:
                written.append(app.store.finish_and_claim(outcomes, "w", 0, None, 30)[0])
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        return run

    caplog.set_level(logging.INFO, logger="rota.store")
    threads: list[threading.Thread] = []
    with psycopg.connect(pg_url) as blocker:
        # Hold the first dependent's row: the first finish waits on it (holding what it took
        # before), then the second takes what it can and waits too.
        blocker.execute("SELECT id FROM rota_runs WHERE id = %s FOR UPDATE", (int(children[0]),))
        for outcomes, waiting in ((one, 1), (two, 2)):
            threads.append(threading.Thread(target=finish(outcomes)))
            threads[-1].start()
            _blocked(pg_url, blocker.info.backend_pid, waiting)
        began = time.monotonic()
        blocker.commit()
    for t in threads:
        t.join(30)
    elapsed = time.monotonic() - began
    assert not errors, errors
    retried = [r.getMessage() for r in caplog.records if "retrying at once" in r.getMessage()]
    assert not retried, retried
    assert elapsed < 0.8, elapsed  # one waited for the other, not for deadlock_timeout (1 s)
    assert len(written) == 2 and all(len(w) == 2 for w in written)
    statuses = [app.get_run(c).status for c in children]
    assert statuses == (["cancelled", "cancelled"] if two_statements else ["pending", "pending"])
    app.close()


def test_a_rescue_and_a_finish_whose_dependents_cross_do_not_deadlock(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The rescue ends lost parents (failed: their dependents are cancelled) while a worker
    finishes the other parents of the same dependents: the rescue locks them in id order too."""
    clock = rota.FakeClock()
    app = make_app(pg_url, clock=clock)

    @app.task(name="step")
    def step(n: int) -> int:
        return n

    app.migrate()
    parents = [step.enqueue(n) for n in range(4)]
    # C1 waits for runs 1 and 2, C2 for runs 0 and 3; runs 0 and 1 are lost (0's lease
    # expires first: the rescue ends 0, then 1), runs 2 and 3 are finished
    children = [step.options(after=[parents[1], parents[2]]).enqueue(10).id]
    children.append(step.options(after=[parents[0], parents[3]]).enqueue(20).id)
    lost = app.store.claim("lost", 1, None, 1.0)
    clock.advance(0.1)
    lost += app.store.claim("lost", 1, None, 1.0)
    clock.advance(0.4)
    kept = {c.id: c for c in app.store.claim("w", 2, None, 60.0)}
    assert [c.id for c in lost] == [int(p.id) for p in parents[:2]]
    clock.advance(1.0)  # the lost worker's leases expired
    outcomes = [_ok(kept[int(parents[2].id)]), _ok(kept[int(parents[3].id)])]
    errors: list[BaseException] = []

    def run(op: Callable[[], object]) -> Callable[[], None]:
        def call() -> None:
            try:
                op()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        return call

    caplog.set_level(logging.INFO, logger="rota.store")
    threads: list[threading.Thread] = []
    with psycopg.connect(pg_url) as blocker:
        blocker.execute("SELECT id FROM rota_runs WHERE id = %s FOR UPDATE", (int(children[0]),))
        ops: list[Callable[[], object]] = [lambda: app.store.finish(outcomes), lambda: app.store.rescue()]
        for n, op in enumerate(ops, 1):
            threads.append(threading.Thread(target=run(op)))
            threads[-1].start()
            _blocked(pg_url, blocker.info.backend_pid, n)
        began = time.monotonic()
        blocker.commit()
    for t in threads:
        t.join(30)
    elapsed = time.monotonic() - began
    assert not errors, errors
    retried = [r.getMessage() for r in caplog.records if "retrying at once" in r.getMessage()]
    assert not retried, retried
    assert elapsed < 0.8, elapsed
    assert [app.get_run(p.id).status for p in parents] == ["failed", "failed", "succeeded", "succeeded"]
    assert [app.get_run(c).status for c in children] == ["cancelled", "cancelled"]
    app.close()


def test_a_hand_back_that_cancels_runs_and_a_finish_lock_their_schedules_in_one_order(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A hand-back ends the runs whose cancellation was requested (cancelled: the schedule's
    counters are updated by rota_run_finished). It locks their schedules in name order first,
    as a finish does: here it hands back runs of b then a, while a finisher ends runs of a and b."""
    from datetime import timedelta

    app = make_app(pg_url)
    for name in ("a", "b"):

        @app.schedule(name=name, every=timedelta(hours=1), overlap="concurrent")
        def job() -> None: ...

    app.prepare()
    for name in ("b", "a", "a", "b"):
        app.trigger(name)
    claims = sorted(app.store.claim("w", 4, None, 30), key=lambda c: c.id)
    assert [c.schedule for c in claims] == ["b", "a", "a", "b"]
    for c in claims[:2]:
        app.cancel(str(c.id))  # running: cancellation requested
    back = [(c.id, c.token) for c in claims[:2]]
    errors: list[BaseException] = []

    def run(op: Callable[[], object]) -> Callable[[], None]:
        def call() -> None:
            try:
                op()
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        return call

    caplog.set_level(logging.INFO, logger="rota.store")
    threads: list[threading.Thread] = []
    with psycopg.connect(pg_url) as blocker:
        blocker.execute("SELECT name FROM rota_schedules WHERE name = 'a' FOR UPDATE")
        ops: list[Callable[[], object]] = [
            lambda: app.store.finish([_ok(claims[2]), _ok(claims[3])]),
            lambda: app.store.hand_back(back, "stopping"),
        ]
        for n, op in enumerate(ops, 1):
            threads.append(threading.Thread(target=run(op)))
            threads[-1].start()
            _blocked(pg_url, blocker.info.backend_pid, n)
        began = time.monotonic()
        blocker.commit()
    for t in threads:
        t.join(30)
    elapsed = time.monotonic() - began
    assert not errors, errors
    retried = [r.getMessage() for r in caplog.records if "retrying at once" in r.getMessage()]
    assert not retried, retried
    assert elapsed < 0.8, elapsed
    assert [app.get_run(str(c.id)).status for c in claims] == ["cancelled", "cancelled", "succeeded", "succeeded"]
    app.close()
