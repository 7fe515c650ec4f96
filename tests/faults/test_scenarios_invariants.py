"""The invariants catch what they promise to catch (on data written through the store)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import rota
from rota.stores.base import NewRun

from .conftest import enqueue_rec
from .invariants import check_invariants


def test_a_returned_result_that_was_not_recorded_is_caught(client: rota.App, exec_log: Path) -> None:
    (run_id,) = enqueue_rec(client, 1)
    check_invariants(client, exec_log, enqueued=[run_id])  # pending: legitimately waiting
    line = {"event": "end", "run": run_id, "attempt": 1, "token": 7, "result": {"i": 0, "token": 7}}
    exec_log.write_text(json.dumps(line) + "\n")
    with pytest.raises(AssertionError, match="returned outcomes not recorded"):
        check_invariants(client, exec_log, enqueued=[run_id])


def test_a_vanished_run_is_caught(client: rota.App, exec_log: Path) -> None:
    with pytest.raises(AssertionError, match="enqueued runs vanished"):
        check_invariants(client, exec_log, enqueued=["987654"])


def test_a_tick_without_a_row_is_caught(client: rota.App, exec_log: Path) -> None:
    client.add_schedule("gappy", "faults.rec", every=1, args=[0])
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=10)
    ticks = [start, start + timedelta(seconds=1), start + timedelta(seconds=3)]
    client.store.insert_runs(
        [NewRun(task="faults.rec", schedule="gappy", tick=t, scheduled_for=t, status="skipped") for t in ticks]
    )
    client.remove_schedule("gappy")
    with pytest.raises(AssertionError, match="ticks without a run row"):
        check_invariants(client, exec_log)
