"""Two finish-and-claim transactions with mirrored outcomes never deadlock (PostgreSQL): one
finishes {A succeeded, B failed}, the other {B succeeded, A failed}, where A and B are runs
of two schedules whose counters the outcomes update. Each writes its batch in two
statements; the schedules of the whole batch are locked in one order first."""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import rota
import rota.stores.postgres.store
from rota.stores.base import Claimed, Outcome

from .conftest import make_app

PAUSE = 0.3  # between a transaction's two finish statements: the other one starts meanwhile


def _two_runs_each(app: rota.App) -> dict[str, list[Claimed]]:
    for name in ("a", "b"):

        @app.schedule(name=name, every=timedelta(hours=1), overlap="concurrent")
        def job() -> None: ...

    app.prepare()
    for name in ("a", "b", "a", "b"):
        app.trigger(name)
    claims = app.store.claim("w", 4, None, 30)
    by_schedule: dict[str, list[Claimed]] = {"a": [], "b": []}
    for c in claims:
        by_schedule[c.schedule or ""].append(c)
    assert [len(v) for v in by_schedule.values()] == [2, 2]
    return by_schedule


def _failed(c: Claimed) -> Outcome:
    return Outcome(c.id, c.token, "failed", error='{"type": "X"}', history='{"status": "failed"}')


def test_mirrored_finish_and_claim_transactions_do_not_deadlock(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(pg_url)
    runs = _two_runs_each(app)
    store: Any = app.store
    # no rows (they would count as written ids): pg_sleep's void, as text, is not NULL
    store.queries["pause"] = f"SELECT p FROM (SELECT pg_sleep({PAUSE})::text AS p) AS x WHERE p IS NULL"
    real = rota.stores.postgres.store.finish_batches

    def paused(outcomes: Any) -> list[tuple[str, dict[str, Any]]]:
        batches = real(outcomes)
        return [batches[0], ("pause", {}), *batches[1:]]

    monkeypatch.setattr(rota.stores.postgres.store, "finish_batches", paused)
    (a1, a2), (b1, b2) = runs["a"], runs["b"]
    one = [Outcome(a1.id, a1.token, "succeeded", result="1"), _failed(b1)]  # locks a, then b
    two = [Outcome(b2.id, b2.token, "succeeded", result="2"), _failed(a2)]  # locks b, then a
    written: list[set[int]] = []
    errors: list[BaseException] = []

    def finish(outcomes: list[Outcome]) -> None:
        try:
            written.append(app.store.finish_and_claim(outcomes, "w", 0, None, 30)[0])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    with psycopg.connect(pg_url) as conn:
        deadlock_timeout = conn.execute("SHOW deadlock_timeout").fetchone()
    caplog.set_level(logging.INFO, logger="rota.store")
    began = time.monotonic()
    first = threading.Thread(target=finish, args=(one,))
    first.start()
    time.sleep(PAUSE / 3)  # the first holds its first statement's locks, in its pause
    second = threading.Thread(target=finish, args=(two,))
    second.start()
    first.join(30)
    second.join(30)
    elapsed = time.monotonic() - began
    assert not errors, errors
    assert {frozenset(w) for w in written} == {frozenset({a1.id, b1.id}), frozenset({b2.id, a2.id})}
    retried = [r.getMessage() for r in caplog.records if "retrying at once" in r.getMessage()]
    assert not retried, f"deadlock (deadlock_timeout {deadlock_timeout}): {retried}"
    assert elapsed < 4 * PAUSE + 0.5, elapsed  # one waits for the other's locks, not for deadlock_timeout
    counts = {s.name: (s.success_count, s.failure_count) for s in app.list_schedules()}
    assert counts == {"a": (1, 1), "b": (1, 1)}
    app.close()
