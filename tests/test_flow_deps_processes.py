"""Uniqueness windows and runs after others with real processes (issue 20): a fan-in finished
by two worker processes at once, and keyed enqueues racing from several processes. The
invariants are checked from the database at the end."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import WITH_MYSQL, make_app, store_url
from .procs import ROOT, WorkerProcs, wait_until


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


pytestmark = pytest.mark.slow


def test_a_fan_in_of_200_parents_finished_by_two_workers_starts_once_after_all(
    db_url: str, procs: WorkerProcs, tmp_path: Path
) -> None:
    app = make_app(db_url)
    app.migrate()
    from .apps.basic import record

    parents = app.store.insert_runs([record.options()._new_run((i,), {"seconds": 0.05}) for i in range(200)])
    ((child_id, _),) = app.store.insert_runs([record.options(after=[i for i, _ in parents])._new_run((-1,), {})])
    child = app.get_run(child_id)
    assert child.waiting_on == 200 and child.queued
    for _ in range(2):
        procs.start(concurrency=8)
    wait_until(lambda: app.get_run(child.id).status == "succeeded", 120, "the dependent to succeed")
    for proc in procs.procs:
        procs.terminate(proc)

    runs = {r.id: r for r in app.list_runs(limit=500)}
    done = runs[child.id]
    ends = [runs[str(i)].finished_at for i, _ in parents]
    assert all(runs[str(i)].status == "succeeded" for i, _ in parents)
    assert all(end is not None and done.started_at is not None and done.started_at >= end for end in ends)
    assert done.attempt == 1 and done.waiting_on == 0
    log = (tmp_path / "executions.log").read_text().split("\n")
    starts = collections.Counter(line.split()[5] for line in log if line.startswith("start"))
    assert starts["-1"] == 1 and len(starts) == 201 and set(starts.values()) == {1}
    assert len({line.split()[4] for line in log if line.startswith("start")}) == 2  # both workers finished parents
    for output in procs.outputs():
        assert "Traceback" not in output
    app.close()


ENQUEUER = """
import os, sys, time
from pathlib import Path
from tests.apps.basic import app, noop
go = Path(sys.argv[1])
while not go.exists():
    time.sleep(0.005)
for _ in range(10):
    h = noop.options(key="sync:42", unique_for=600).enqueue(42)
    print(h.id, h.created, flush=True)
"""


def test_unique_enqueues_racing_from_several_processes_create_one_run(db_url: str, tmp_path: Path) -> None:
    app = make_app(db_url)
    app.migrate()
    go = tmp_path / "go"
    env = {**os.environ, "ROTA_DATABASE_URL": db_url}
    racers = [
        subprocess.Popen([sys.executable, "-c", ENQUEUER, str(go)], cwd=ROOT, env=env, stdout=subprocess.PIPE)
        for _ in range(5)
    ]
    time.sleep(1.0)  # let every process import rota and wait for the start
    go.touch()
    lines = []
    for racer in racers:
        out, _ = racer.communicate(timeout=60)
        assert racer.returncode == 0
        lines += out.decode().split()
    ids, created = lines[0::2], lines[1::2]
    assert len(ids) == 50 and len(set(ids)) == 1 and created.count("True") == 1
    assert [r.id for r in app.list_runs()] == [ids[0]]
    app.close()
