"""Writing a batch of outcomes and claiming the next batch in one transaction
(`Store.finish_and_claim`), against every store, and the worker's use of it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

import rota
from rota.errors import DatabaseError, DatabaseTransient
from rota.stores.base import Outcome, Store, finishes_with_claims

from .conftest import WITH_MYSQL, start_worker, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def _tasks(app: rota.App, n: int) -> list[rota.RunHandle]:
    @app.task(name="t", retries=1)
    def t() -> None: ...

    return [t.enqueue() for _ in range(n)]


def test_writes_outcomes_and_claims_the_next_runs(app: rota.App) -> None:
    _tasks(app, 5)
    a, b = app.store.claim("w", 2, None, 30)
    outcomes = [
        Outcome(a.id, a.token, "succeeded", result="1"),
        Outcome(b.id, b.token + 1, "failed", error='{"type": "X"}'),  # stale: not written
    ]
    written, claimed = app.store.finish_and_claim(outcomes, "w", 2, None, 30)
    assert written == {a.id}
    assert [c.id for c in claimed] == sorted(c.id for c in claimed) and len(claimed) == 2
    assert {a.id, b.id}.isdisjoint(c.id for c in claimed)
    assert all(c.attempt == 1 and c.token > b.token for c in claimed)
    run_a, run_b = app.get_run(a.id), app.get_run(b.id)
    assert (run_a.status, run_a.result, run_b.status) == ("succeeded", 1, "running")
    assert all(app.get_run(c.id).worker == "w" for c in claimed)


def test_a_batch_of_successes_keeps_each_result_exactly_and_writes_only_held_tokens(app: rota.App) -> None:
    """Plain successes are written as one batch (SQLite: one statement reading a JSON
    parameter): every result comes back as it was, a stale token writes nothing, and a held
    run's start goes in with its finish."""
    _tasks(app, 6)
    runs = app.store.claim("w", 6, None, 30, start=5)  # the last one held, not started
    values = ["café \u2028 \U0001f600", 'a "quote" and a \\ back', [1e308, -0.5, 12345678901234567],
              {"nested": {"k": [None, True]}}, None, "held \U0001f680 \t"]  # fmt: skip
    results = [json.dumps(v, ensure_ascii=False) for v in values]
    outcomes = [Outcome(c.id, c.token, "succeeded", result=r) for c, r in zip(runs, results, strict=True)]
    outcomes[1] = Outcome(runs[1].id, runs[1].token + 100, "succeeded", result=results[1])  # stale
    outcomes[5].started = 0.5  # a held run whose handler started half a second ago
    written, _ = app.store.finish_and_claim(outcomes, "w", 0, None, 30)
    assert written == {c.id for i, c in enumerate(runs) if i != 1}
    for i, c in enumerate(runs):
        run = app.get_run(c.id)
        if i == 1:
            assert (run.status, run.attempt) == ("running", 1)
            continue
        assert (run.status, run.result) == ("succeeded", values[i]), i
        assert run.attempt == 1 and run.started_at is not None, i


def test_a_retry_written_with_a_claim_can_be_claimed_by_it(app: rota.App) -> None:
    (h,) = _tasks(app, 1)
    (c,) = app.store.claim("w", 1, None, 30)
    retry = Outcome(c.id, c.token, "pending", error='{"type": "X"}', retry_in=0.0, history='{"status": "failed"}')
    written, claimed = app.store.finish_and_claim([retry], "w", 5, None, 30)
    assert written == {c.id}
    assert [(x.id, x.attempt) for x in claimed] == [(c.id, 2)]
    assert [a["status"] for a in h.refresh().attempts] == ["failed", "running"]


def test_queues_and_limit_apply_to_the_claim(app: rota.App) -> None:
    @app.task(name="t", queue="mail")
    def t() -> None: ...

    t.enqueue()
    t.options(queue="reports").enqueue()
    t.options(queue="reports").enqueue()
    assert app.store.finish_and_claim([], "w", 5, ["other"], 30) == (set(), [])
    written, claimed = app.store.finish_and_claim([], "w", 1, ["reports"], 30)
    assert written == set() and len(claimed) == 1


def test_an_outcome_the_store_refuses_writes_nothing_and_claims_nothing(app: rota.App) -> None:
    _tasks(app, 3)
    a, b = app.store.claim("w", 2, None, 30)
    bad = Outcome(a.id, a.token, "succeeded", result='"\udcff"')  # bypasses encoding
    good = Outcome(b.id, b.token, "succeeded", result="7")
    with pytest.raises(Exception) as raised:
        app.store.finish_and_claim([good, bad], "w", 5, None, 30)
    assert not isinstance(raised.value, DatabaseTransient)  # permanent: the worker writes one by one
    assert app.get_run(b.id).status == "running"  # rolled back with the rest
    assert app.store.count_by_status() == {"running": 2, "pending": 1}
    written, claimed = app.store.finish_and_claim([good], "w", 5, None, 30)  # the store is still usable
    assert written == {b.id} and len(claimed) == 1


def test_a_store_that_does_not_override_it_is_used_with_two_calls() -> None:
    class Plain(Store):  # the abstract methods stay abstract: only the check is exercised
        pass

    assert not finishes_with_claims(Plain)
    assert not finishes_with_claims(object())


def test_stores_say_they_finish_with_claims(app: rota.App) -> None:
    assert finishes_with_claims(app.store)


def test_the_worker_writes_outcomes_with_its_next_claim(app: rota.App) -> None:
    @app.task(name="n")
    def n(i: int) -> int:
        return i

    ids = n.enqueue_many([((i,), {}) for i in range(200)])
    worker = start_worker(app, concurrency=5)
    runs = [rota.RunHandle(app, run_id).wait(30) for run_id in ids]
    assert [r.result for r in runs] == list(range(200))
    assert worker.counters.written_with_claims > 0
    assert worker.counters.stale_writes == 0


def test_a_transient_error_puts_the_outcomes_back_and_claims_nothing(app: rota.App) -> None:
    _tasks(app, 2)
    (c,) = app.store.claim("w", 1, None, 30)
    worker = app.worker(install_signal_handlers=False)
    calls: list[int] = []

    def broken(*args: object) -> object:
        calls.append(1)
        raise DatabaseTransient("injected: the connection was reset")

    app.store.finish_and_claim = broken  # type: ignore[method-assign]
    outcome = Outcome(c.id, c.token, "succeeded", result="3")

    async def attempt() -> None:
        worker._bind_loop()
        worker._outbox = [outcome]
        with pytest.raises(DatabaseError):
            await worker._completer.finish_and_claim(worker.id, 5, None, 30)
        assert worker._outbox == [outcome] and worker._completer.writing == []
        assert (c.id, c.token) in worker._completer.held()
        assert await worker._flush()

    asyncio.run(attempt())
    assert calls and app.get_run(c.id).status == "succeeded"
    assert app.store.count_by_status() == {"succeeded": 1, "pending": 1}


def test_a_permanent_error_writes_the_outcomes_one_by_one_and_claims_nothing(app: rota.App) -> None:
    _tasks(app, 3)
    a, b = app.store.claim("w", 2, None, 30)
    worker = app.worker(install_signal_handlers=False)
    bad = Outcome(a.id, a.token, "succeeded", result='"\udcff"')
    good = Outcome(b.id, b.token, "succeeded", result="7")

    async def attempt() -> list[object] | None:
        worker._bind_loop()
        worker._outbox = [bad, good]
        return await worker._completer.finish_and_claim(worker.id, 5, None, 30)  # type: ignore[return-value]

    assert asyncio.run(attempt()) is None
    first, second = app.get_run(a.id), app.get_run(b.id)
    assert first.status == "failed" and first.error is not None and first.error["type"] == "UnstorableOutcome"
    assert (second.status, second.result) == ("succeeded", 7)
    assert app.store.count_by_status()["pending"] == 1  # the claim did not happen
