"""A busy worker's claim starts where the claims stood lately, not at the front of the claim
index, where a transaction held open elsewhere keeps the dead entries of every run claimed
since (issue 45, item 3; rota.stores.postgres.claim_from). What it must never cost: a run put
back, or one of a higher priority, is still claimed; at once when this process did it, within
FRONT_EVERY when another did."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from rota.stores.base import NewRun, Outcome
from rota.stores.postgres import claim_from as _pg_claim_from

from .conftest import WITH_MYSQL, make_app, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.fixture
def from_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """Claims start where the last one ended (no lag), never from the front on a timer."""
    monkeypatch.setattr(_pg_claim_from, "FROM_LAG", 0.0)
    monkeypatch.setattr(_pg_claim_from, "FRONT_EVERY", 3600.0)


def drain(store: Any, n: int, batch: int = 100) -> None:
    done = 0
    while done < n:
        runs = store.claim("w", batch, None, 30.0)
        assert runs, f"{done} of {n} claimed"
        store.finish([Outcome(r.id, r.token, "succeeded", result="null") for r in runs])
        done += len(runs)


def claim_buffers(store: Any, params: dict[str, Any]) -> int:
    """The buffers the claim's walk of rota_runs reads (EXPLAIN ANALYZE, rolled back)."""
    sql = store.queries["claim"]
    params = {"owner": "w", "limit": 10, "start": 10, "lease": 30.0, **params}
    with store._tx() as s:
        s.q("claim_plan")
        plan = [str(r[0]) for r in s.q_text("EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) " + sql, **params)]
        s.q_text("ROLLBACK")
    scan = next(i for i, line in enumerate(plan) if "Index Scan using rota_runs_claim_from" in line)
    line = next(line for line in plan[scan:] if "Buffers: shared" in line)
    return sum(int(part.split("=")[1]) for part in line.split(":")[1].split() if "=" in part)


@pytest.mark.postgres
def test_under_a_held_xmin_a_busy_claim_does_not_walk_the_runs_claimed_before(pg_url: str, from_now: None) -> None:
    app = make_app(pg_url)
    app.migrate()
    store: Any = app.store
    with psycopg.connect(pg_url) as holder:  # idle in a transaction: no dead entry can go
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT 1")
        store.insert_runs([NewRun(task="t") for _ in range(3100)], notify=False)
        drain(store, 3000)
        front = claim_buffers(store, dict(_pg_claim_from.FRONT))
        since = claim_buffers(store, store.claim_from.params(None))
    assert front > 50 and since < 12 and since * 5 < front, (since, front)  # front: the 3000 dead entries
    app.close()


def test_a_higher_priority_run_enqueued_here_is_claimed_next(db_url: str, from_now: None) -> None:
    app = make_app(db_url)
    app.migrate()
    store: Any = app.store
    store.insert_runs([NewRun(task="t") for _ in range(5)])
    assert len(store.claim("w", 2, None, 30.0)) == 2
    (urgent,) = store.insert_runs([NewRun(task="t", priority=5)])
    (late,) = store.insert_runs([NewRun(task="t", scheduled_for=datetime.now(UTC) - timedelta(hours=1))])
    assert [r.id for r in store.claim("w", 2, None, 30.0)] == sorted([urgent[0], late[0]])
    app.close()


def test_a_run_handed_back_here_is_claimed_again_at_once(db_url: str, from_now: None) -> None:
    app = make_app(db_url)
    app.migrate()
    store: Any = app.store
    store.insert_runs([NewRun(task="t") for _ in range(5)])
    first, *_ = store.claim("w", 2, None, 30.0)
    assert store.hand_back([(first.id, first.token)], "stopping") == {first.id}
    assert first.id in [r.id for r in store.claim("w", 10, None, 30.0)]
    app.close()


@pytest.mark.postgres
def test_a_higher_priority_run_another_process_enqueues_is_claimed_within_front_every(
    pg_url: str, from_now: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, other = make_app(pg_url), make_app(pg_url)
    app.migrate()
    store: Any = app.store
    store.insert_runs([NewRun(task="t") for _ in range(5)])
    assert len(store.claim("w", 2, None, 30.0)) == 2
    (urgent,) = other.store.insert_runs([NewRun(task="t", priority=5)])
    # before where this store's claims stand: its next claim does not see it ...
    assert urgent[0] not in {r.id for r in store.claim("w", 1, None, 30.0)}
    monkeypatch.setattr(_pg_claim_from, "FRONT_EVERY", 0.2)
    time.sleep(0.25)  # ... but one from the front comes within FRONT_EVERY
    assert urgent[0] in {r.id for r in store.claim("w", 1, None, 30.0)}
    app.close()
    other.close()


def _row(run_id: Any, priority: Any, due: Any) -> tuple[Any, ...]:
    """A claimed row as the claim returns it (fragments.sql's claimed_columns): id first,
    priority and due time (Unix seconds) at 13 and 14, whether it has saved steps last."""
    return (run_id, "t", "[]", "{}", 1, 1, 1, None, None, None, None, None, None, priority, due, False)


def test_claim_from_walks_from_where_the_claims_stood_from_lag_ago(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(_pg_claim_from.time, "monotonic", lambda: now[0])
    place = _pg_claim_from.ClaimFrom()
    assert place.params(None) == _pg_claim_from.FRONT  # nothing claimed yet
    place.claimed(None, [_row(7, 0, 1700000000.0), _row(9, 0, 1700000001.0)])
    now[0] += 0.1
    assert place.params(None) == _pg_claim_from.FRONT  # not FROM_LAG old yet
    now[0] += _pg_claim_from.FROM_LAG
    assert place.params(["b", "a"]) == _pg_claim_from.FRONT  # another set of queues: its own
    place._front_at[None] = now[0]
    assert place.params(None) == {"from_p": 0, "from_due": 1700000001.0, "from_id": 9}
    place.claimed(None, [_row(3, 2, 1600000000.0)])  # a later claim, higher in the order
    now[0] += _pg_claim_from.FROM_LAG
    assert place.params(None) == {"from_p": -2, "from_due": 1600000000.0, "from_id": 3}
    now[0] += _pg_claim_from.FRONT_EVERY
    assert place.params(None) == _pg_claim_from.FRONT  # from the front every FRONT_EVERY
    place.claimed(None, [_row(None, None, None)])  # a damaged row teaches nothing
    place.enqueued([NewRun(task="t")])
    assert place.params(None) == {"from_p": -2, "from_due": 1600000000.0, "from_id": 3}
    place.enqueued([NewRun(task="t", priority=3)])  # sorts before: from the front
    assert place.params(None) == _pg_claim_from.FRONT
