"""Two cheap cells of the chaos matrix (bench/chaos), through the code `python -m bench.chaos`
runs: a worker killed with SIGKILL and backends terminated at a steady rate, each on a
PostgreSQL cluster of the test's own (tests/pg_cluster.py), with small sizes. No run lost,
none executed twice beyond the at-least-once cases, and the workers caught up within two
leases."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos.cell import run_cell
from bench.chaos.rig import Settings
from bench.chaos.scenarios import BY_KEY

from .. import pg_cluster

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

SMALL = Settings(rate=10, warmup=1, baseline=3, fault=3, recovery=6, drain=20)


@pytest.mark.parametrize("key", ["kill9", "terminate"])
def test_chaos_cell_loses_nothing_and_runs_nothing_twice(key: str, tmp_path: Path) -> None:
    why = pg_cluster.problem()
    if why:
        pytest.skip(why)
    cell = run_cell(BY_KEY[key], SMALL, tmp_path / key)
    assert cell.enqueued > 50, cell
    assert (cell.lost, cell.beyond) == (0, 0), cell
    assert cell.recovered, cell
    assert cell.recovery is not None and cell.recovery <= 2 * SMALL.lease, cell
