"""The flow claim of a backlog of limited runs alone, in one round trip on PostgreSQL
(rota/stores/postgres/flow.py, PostgresFlow._flow_one_trip): it keeps every limit under
concurrent claimers, and the runs it does not try (a plain run, a rated one) are claimed by
the very next claim, not at a poll. The same bodies run on SQLite, whose flow claim has no
round trips to save."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import rota
from rota.stores.base import Outcome
from tests.faults.invariants import attempt_intervals, max_overlap

from .conftest import WITH_MYSQL, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


OWNER = "w"


def _app(app_factory: Callable[..., rota.App]) -> tuple[rota.App, dict[str, Any]]:
    app = app_factory()

    @app.task(limit=3, name="three")
    def three(n: int) -> int:
        return n

    @app.task(rate=rota.Rate(100, per=60), name="rated")
    def rated(n: int) -> int:
        return n

    @app.task(name="plain")
    def plain(n: int) -> int:
        return n

    app.migrate()
    app.prepare()
    return app, {"three": three, "rated": rated, "plain": plain}


def _done(claimed: list[Any]) -> list[Outcome]:
    return [Outcome(c.id, c.token, "succeeded", result="1") for c in claimed]


def _steady(store: Any, runs: int = 4) -> list[Any]:
    """Claim and finish a few times, so the store has seen a backlog of limited runs alone."""
    got: list[Any] = store.claim(OWNER, 3, None, 30.0)
    for _ in range(runs):
        _, got = store.finish_and_claim(_done(got), OWNER, 3, None, 30.0)
    return got


def test_one_trip_flow_claims_keep_the_limit_under_concurrent_claimers(app_factory: Callable[..., rota.App]) -> None:
    app, t = _app(app_factory)
    t["three"].enqueue_many([((i,), {}) for i in range(90)])
    store: Any = app.store
    errors: list[BaseException] = []

    def claimer(n: int) -> None:
        try:
            got: list[Any] = []
            for _ in range(40):
                _, got = store.finish_and_claim(_done(got), f"w{n}", 2, None, 30.0)
            store.finish(_done(got))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    runs = app.list_runs(task="three", limit=1000)
    intervals = [i for run in runs for i in attempt_intervals(run)]
    assert max_overlap(intervals) <= 3, "more than 3 runs of a limit=3 task ran at once"
    assert sum(r.status == "succeeded" for r in runs) >= 40
    if type(store).__name__ == "PostgresStore":
        assert store.one_trips > 0, "the limited backlog was never claimed in one round trip"


@pytest.mark.parametrize("other", ["plain", "rated"])
def test_a_plain_or_rated_run_due_while_limited_runs_fill_the_claims_is_taken_by_the_next_claim(
    app_factory: Callable[..., rota.App], other: str
) -> None:
    app, t = _app(app_factory)
    t["three"].enqueue_many([((i,), {}) for i in range(60)])
    store: Any = app.store
    got = _steady(store)
    t[other].enqueue(7)
    _, got = store.finish_and_claim(_done(got), OWNER, 5, None, 30.0)  # 3 slots of the limit, 2 more free
    if other not in {c.task for c in got}:
        assert store.claim_cut_short(), f"a {other} run is due and not taken: the worker must claim again at once"
        assert not store.limits_wait(), "the worker would sleep until a slot frees"
        _, more = store.finish_and_claim([], OWNER, 2, None, 30.0)
        got += more
    assert other in {c.task for c in got}
