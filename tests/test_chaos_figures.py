"""The chaos matrix's figures (bench/chaos/measure.py) from a made-up cell: what counts as
lost, as executed twice beyond at-least-once, as late, and where recovery ends."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import rota
from bench.chaos.measure import Marks, figures

MARKS = Marks(baseline=100.0, fault=110.0, cleared=110.0, stop=130.0)


def run(status: str, *given_up: str) -> rota.Run:
    return cast(rota.Run, SimpleNamespace(status=status, history=[{"status": s} for s in given_up]))


def steady(first: int, last: int) -> tuple[dict[str, float], dict[str, list[tuple[float, int]]], dict[str, Any]]:
    """One run a second, each picked up 0.05 s after its enqueue, once."""
    enqueued = {f"r{t}": float(t) for t in range(first, last)}
    starts = {i: [(at + 0.05, 1)] for i, at in enqueued.items()}
    return enqueued, starts, {i: run("succeeded") for i in enqueued}


def test_a_run_rescued_after_a_kill_sets_the_recovery_and_counts_at_least_once() -> None:
    enqueued, starts, runs = steady(100, 130)
    starts["r109"] = [(109.05, 1), (112.5, 2)]  # its worker killed at 110; rescued at 112.5
    runs["r109"] = run("succeeded", "lost")
    cell = figures("kill", enqueued, 0, starts, runs, MARKS)
    assert (cell.lost, cell.twice, cell.beyond) == (0, 1, 0)
    assert cell.recovery is not None and abs(cell.recovery - 2.5) < 1e-9
    assert cell.recovered and abs(cell.worst - 3.5) < 1e-9


def test_a_second_execution_without_a_lost_attempt_is_beyond_at_least_once() -> None:
    enqueued, starts, runs = steady(100, 130)
    starts["r120"] = [(120.05, 1), (120.3, 2)]
    cell = figures("dup", enqueued, 0, starts, runs, MARKS)
    assert (cell.twice, cell.beyond, cell.beyond_ids) == (1, 1, ["r120"])


def test_a_run_never_final_is_lost_and_the_cell_not_recovered() -> None:
    enqueued, starts, runs = steady(100, 130)
    runs["r125"] = run("running")
    del starts["r125"]
    cell = figures("lost", enqueued, 2, starts, runs, MARKS)
    assert (cell.lost, cell.lost_ids, cell.refused) == (1, ["r125"], 2)
    assert not cell.recovered and cell.recovery is None


def test_workers_that_never_catch_up_are_not_recovered() -> None:
    enqueued, starts, runs = steady(100, 130)
    for t in range(110, 130):  # from the fault on, every run waits 5 s
        starts[f"r{t}"] = [(t + 5.0, 1)]
    cell = figures("stuck", enqueued, 0, starts, runs, MARKS)
    assert not cell.recovered and cell.p95_after == 5.0
