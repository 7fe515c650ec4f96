"""Runs held ahead (rota.worker.prefetch) start in the claim's order: priority DESC, due_at,
id; a higher-priority run claimed later goes ahead of those held (both stores)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import rota
import rota.worker.prefetch

from .conftest import WITH_MYSQL, start_worker, store_url
from .procs import wait_until


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def _recording(app: rota.App, gate: threading.Event | None = None) -> tuple[rota.Task[..., int], list[int]]:
    ran: list[int] = []

    @app.task(name="p")
    def p(priority: int) -> int:
        if priority == 100 and gate is not None:
            gate.wait(30)
        ran.append(priority)
        return priority

    return p, ran


@pytest.mark.parametrize("window", [None, 100.0], ids=["default", "always-on"])
def test_held_runs_start_in_priority_order_at_concurrency_1(
    app_factory: Callable[..., rota.App], monkeypatch: pytest.MonkeyPatch, window: float | None
) -> None:
    """Instant handlers, the default prefetch: after the first claim the other six are held
    at once; they start by priority, as with prefetch=0 (`always-on`: a horizon no loaded
    machine can defeat)."""
    if window is not None:
        monkeypatch.setattr(rota.worker.prefetch, "WINDOW", window)
    app = app_factory()
    p, ran = _recording(app)
    for priority in (10, 0, 5, 1, 3, 7, 2):
        p.options(priority=priority).enqueue(priority)
    start_worker(app, concurrency=1)
    wait_until(lambda: len(ran) == 7, 20, "seven runs")
    assert ran == [10, 7, 5, 3, 2, 1, 0]


def test_a_higher_priority_run_claimed_later_starts_before_held_ones(
    app_factory: Callable[..., rota.App], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rota.worker.prefetch, "WINDOW", 100.0)
    app = app_factory()
    gate = threading.Event()
    p, ran = _recording(app, gate)
    worker = start_worker(app, concurrency=1)
    p.enqueue(50).wait(10)  # a handler has ended: the worker knows the pace
    p.options(priority=100).enqueue(100)  # takes the slot and waits for the gate
    for _ in range(30):
        p.options(priority=1).enqueue(1)  # claimed, held behind it
    wait_until(lambda: len(worker._prefetch.held) >= 2, 10, "runs held ahead")
    high = [p.options(priority=9).enqueue(9) for _ in range(2)]
    wait_until(lambda: worker.counters.claimed >= 34 or len(worker._prefetch.held) >= 32, 10, "the later claim")
    gate.set()
    for h in high:
        h.wait(10)
    first_low = ran.index(1)
    assert ran[:first_low].count(9) == 2, ran
