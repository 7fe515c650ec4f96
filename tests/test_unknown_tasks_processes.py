"""A rolling deploy that adds a task, with real worker processes on both stores: workers of the
old release claim the new task's runs and give them back (no attempt, no failure); a worker of
the new release runs each exactly once. Checked from the database and the handlers' own log
(see tests/test_unknown_tasks.py for the contract tests)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import WITH_MYSQL, make_app, store_url
from .procs import WorkerProcs, wait_until


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


pytestmark = pytest.mark.slow
APP = "tests.apps.basic:app"
RUNS = 20


def test_old_workers_give_a_new_tasks_runs_back_and_a_new_worker_runs_each_once(
    db_url: str, procs: WorkerProcs, tmp_path: Path
) -> None:
    client = make_app(db_url)
    task = client.task(name="added")(lambda i: i)
    old = [procs.start(APP, concurrency=4, poll=0.1) for _ in range(2)]  # the previous release
    handles = [str(i) for i in task.enqueue_many([((i,), {}) for i in range(RUNS)])]

    def refused() -> int:
        return sum((client.get_run(h).error or {}).get("type") == "TaskNotFound" for h in handles)

    wait_until(lambda: refused() >= 4, 30, "the old workers to give runs back")
    new = procs.start(APP, concurrency=4, poll=0.1, env={"ROTA_TEST_RELEASE": "2"})
    wait_until(lambda: any(client.get_run(h).is_final for h in handles), 30, "the new worker's first run")
    assert all(p.poll() is None for p in old)  # the old release kept working beside the new one
    # The rolling deploy ends: the old workers stop. (Left running, they keep taking the runs
    # back, each refusal pushing a run's due time by half the time since its first one: the
    # end of the test then drifted by refusal rounds, 5 to 60+ s on a loaded machine.)
    for p in old:
        procs.terminate(p)
    wait_until(lambda: all(client.get_run(h).is_final for h in handles), 60, "every run to end")
    runs = [client.get_run(h) for h in handles]
    assert {(r.status, r.attempt) for r in runs} == {("succeeded", 1)}, runs  # the refusals cost nothing
    assert all(r.history == [] or [a["status"] for a in r.history] == ["succeeded"] for r in runs)
    log = (tmp_path / "executions.log").read_text().splitlines()
    starts = Counter(line.split()[1] for line in log if line.startswith("start "))
    assert starts == Counter(handles), starts  # each exactly once
    assert {line.split()[4] for line in log if line.startswith("start ")} == {str(new.pid)}
    for output in procs.outputs():
        assert "Traceback" not in output, output[-3000:]
    assert "given back" in "".join(procs.outputs())
    client.close()
