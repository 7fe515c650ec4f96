"""A plain claim's tokens come from the store's token connection, a transaction of its own
that the server cannot see the claim waiting on (review of ed05dfd). A transaction that holds
the token counter's row and then waits for a lock the claim holds (App.retry: retry_lock, then
the retry's key, which the claim's finish just freed) made a cycle InnoDB cannot detect: both
waited out the lock wait timeout (5 s), and every claim of every worker queued on the counter
behind them. Taken in the claim's own transaction, as before, the cycle is a deadlock the
server breaks at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rota.stores.records import Outcome

from .conftest import MYSQL, store_url


@pytest.fixture(params=[MYSQL])
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    yield from store_url(request, tmp_path)


def test_a_retry_holding_the_counter_does_not_stall_a_finishing_claim(app_factory: Any) -> None:
    app = app_factory()
    app.migrate()
    store = app.store
    task = app.task(name="t")(lambda x: x)
    failed = task.options(key="K").enqueue(1)
    (c,) = store.claim("w", 1, None, 30.0)
    store.finish([Outcome(c.id, c.token, "failed", error='{"type": "E"}')])
    active = task.options(key="K").enqueue(2)
    (a,) = store.claim("w", 1, None, 30.0)
    task.enqueue(3)  # the claim's run
    paused, go = threading.Event(), threading.Event()
    take = store._take_tokens

    def held(n: int) -> int | None:  # the claim's finish done (the key freed) and its run locked
        paused.set()
        go.wait(10)
        return take(n)  # type: ignore[no-any-return]

    store._take_tokens = held
    took: dict[str, float] = {}

    def finish_and_claim() -> None:
        began = time.monotonic()
        store.finish_and_claim([Outcome(a.id, a.token, "succeeded", result="2")], "w", 1, None, 30.0)
        took["claim"] = time.monotonic() - began

    def retry() -> None:
        began = time.monotonic()
        app.retry(failed.id)
        took["retry"] = time.monotonic() - began

    claimer = threading.Thread(target=finish_and_claim)
    claimer.start()
    assert paused.wait(10)
    retrier = threading.Thread(target=retry)
    retrier.start()
    time.sleep(0.5)  # the retry holds the counter and waits for the key
    go.set()
    claimer.join(30)
    retrier.join(30)
    assert set(took) == {"claim", "retry"}, took
    assert took["claim"] < 3.0 and took["retry"] < 3.5, took  # before: 5 s each (the lock wait timeout)
    assert app.get_run(active.id).status == "succeeded"
