"""Several real worker processes against one database (no crashes here; see test_crashes)."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rota

from .conftest import WITH_MYSQL, make_app, store_url
from .procs import WorkerProcs, wait_until


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


pytestmark = pytest.mark.slow


def read_log(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "executions.log"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def test_several_worker_processes_drain_2000_tasks_exactly_once(
    db_url: str, procs: WorkerProcs, tmp_path: Path
) -> None:
    n_workers = 3 if db_url.startswith("sqlite") else 4
    app = make_app(db_url)
    from .apps.basic import record

    for _ in range(n_workers):
        procs.start(concurrency=8)
    # every process claims from the start (one that starts late under load could otherwise
    # find the runs drained by the others, and the share asserted below means nothing)
    wait_until(lambda: sum(w.alive for w in app.list_workers()) == n_workers, 60, "every worker to start")
    ids = app.store.insert_runs([record.options()._new_run((i,), {}) for i in range(2000)])
    assert len(ids) == 2000

    def finished() -> bool:
        counts = app.store.count_by_status()
        return counts.get("succeeded", 0) == 2000

    wait_until(finished, 120, "2,000 runs to succeed")
    for proc in procs.procs:
        procs.terminate(proc)
    counts = app.store.count_by_status()
    assert counts == {"succeeded": 2000}
    starts = collections.Counter(int(fields[5]) for fields in read_log(tmp_path) if fields[0] == "start")
    assert sorted(starts) == list(range(2000)) and set(starts.values()) == {1}
    workers_used = {fields[4] for fields in read_log(tmp_path)}
    assert len(workers_used) == n_workers  # every process took a share
    runs = app.list_runs(limit=2000)
    assert all(r.attempt == 1 and r.result == {"i": r.args[0], "token": r.token} for r in runs)
    for output in procs.outputs():
        assert "Traceback" not in output
    app.close()


def test_unreachable_database_at_start_is_one_clear_line_and_retries(tmp_path: Path) -> None:
    workers = WorkerProcs("postgresql://postgres@127.0.0.1:1/nowhere", tmp_path)
    proc = workers.start()
    try:
        wait_until(lambda: "database unavailable" in workers.output(0), 30, "the outage warning")
        import time

        time.sleep(2.5)  # several retries
        assert proc.poll() is None  # still alive, retrying
        took = workers.terminate(proc)
    finally:
        workers.stop_all()
    output = workers.output(0)
    assert proc.returncode == 0 and took < 10
    assert output.count("database unavailable") == 1
    assert "cannot connect to PostgreSQL at postgresql://postgres@127.0.0.1:1/nowhere" in output
    assert "Traceback" not in output


def test_bad_app_path_is_a_clear_cli_error(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from rota.cli import main

    result = CliRunner().invoke(main, ["--database-url", f"sqlite:///{tmp_path}/x.db", "worker", "tests.apps.nope:app"])
    assert result.exit_code == 2 and "cannot import module 'tests.apps.nope'" in result.output
    result = CliRunner().invoke(main, ["--database-url", f"sqlite:///{tmp_path}/x.db", "worker", "tests.apps.basic"])
    assert result.exit_code == 2 and "is not module:attribute" in result.output
    assert rota.__version__
