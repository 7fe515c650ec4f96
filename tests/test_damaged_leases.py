"""A running run whose lease no worker can have granted (issue 41, review): `lease_until` NULL,
infinite (PostgreSQL) or more than 366 days past now. The rescue looked only at leases that
ran out, so such a run blocked its exclusive schedule (every tick skipped: "run N was still
running"), its limit slot and its unique key forever, never named. Now the rescue's sweep ends
it failed as damaged (DamagedRow, never retried, named once) and the rest goes on. On every
store, with a real worker."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

import rota
from rota import quarantine

from .conftest import WITH_MYSQL, start_worker, store_url, wait_for


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


@pytest.fixture(autouse=True)
def _fresh_names() -> None:
    quarantine.forget()


def _dialect(app: rota.App) -> str:
    return str(app.store.dialect)  # type: ignore[attr-defined]


def _far(app: rota.App) -> str:
    """A lease ten years from now, in the store's own terms."""
    return {
        "postgresql": "now() + interval '10 years'",
        "sqlite": "unixepoch() + 315360000",
    }.get(_dialect(app), "UTC_TIMESTAMP(6) + INTERVAL 10 YEAR")


def _leases(app: rota.App) -> list[str]:
    leases = ["NULL", _far(app)]
    if _dialect(app) == "postgresql":
        leases.append("'infinity'")
    elif _dialect(app) == "sqlite":
        leases.append("9e999")  # +Inf
    return leases


def _hold(app: rota.App, run_id: str, lease: str, extra: str = "") -> None:
    """Make a pending run look held by a worker that never was, with `lease` (SQL) as its lease."""
    store: Any = app.store
    started = {"postgresql": "now()", "sqlite": "unixepoch()"}.get(_dialect(app), "UTC_TIMESTAMP(6)")
    with store._tx() as s:
        s.q_text(
            f"UPDATE rota_runs SET status = 'running', owner = 'ghost', token = 1, attempt = 1, "
            f"started_at = {started}, lease_until = {lease}{extra} WHERE id = {store._p('id')}",
            id=int(run_id),
        )


def _named(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if getattr(r, "event", None) == quarantine.EVENT]


def _assert_damaged(app: rota.App, caplog: pytest.LogCaptureFixture, bad: list[str]) -> None:
    for run_id in bad:
        run = app.get_run(run_id)
        assert run is not None and run.status == "failed", run
        assert run.error is not None and run.error["type"] == quarantine.ERROR_TYPE, run.error
        assert "lease" in run.error["message"] and "not retried" in run.error["message"]
    named = _named(caplog)
    assert sorted(m.split("'")[1] for m in named) == sorted(bad), named
    assert {r.id for r in app.list_runs(damaged=True)} == set(bad)


def test_a_schedule_blocked_by_a_run_with_a_damaged_lease_ticks_again(
    app: rota.App, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    ran: list[int] = []

    @app.task(name="tick")
    def tick() -> None:
        ran.append(1)

    app.add_schedule("s", "tick", every=1)
    blocker = app.trigger("s")
    _hold(app, blocker.id, "NULL")
    start_worker(app, poll_interval=0.05)
    wait_for(lambda: bool(ran), timeout=20, what="a tick of the schedule after the damaged run was swept")
    _assert_damaged(app, caplog, [blocker.id])


def test_runs_with_damaged_leases_free_their_limit_and_are_named_once(
    app: rota.App, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)

    @app.task(name="one", limit=1)
    def one(n: int) -> int:
        return n

    bad = [one.enqueue(-i - 1).id for i in range(len(_leases(app)))]
    for run_id, lease in zip(bad, _leases(app), strict=True):
        _hold(app, run_id, lease)
    good = [one.enqueue(i) for i in range(3)]
    start_worker(app, poll_interval=0.05)
    for g in good:
        assert g.wait(timeout=20).status == "succeeded"
    _assert_damaged(app, caplog, bad)


def test_a_lease_within_a_year_is_left_alone(app: rota.App, caplog: pytest.LogCaptureFixture) -> None:
    """A lease 300 days ahead (rota grants up to a year) is a live worker's, not damage."""
    caplog.set_level(logging.WARNING)

    @app.task(name="t")
    def t() -> None:
        pass

    run = t.enqueue()
    near = {"postgresql": "now() + interval '300 days'", "sqlite": "unixepoch() + 25920000"}.get(
        _dialect(app), "UTC_TIMESTAMP(6) + INTERVAL 300 DAY"
    )
    _hold(app, run.id, near)
    assert app.store.rescue() == []
    got = app.get_run(run.id)
    assert got is not None and got.status == "running" and not _named(caplog)
