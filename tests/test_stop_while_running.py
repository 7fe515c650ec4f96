"""Issue 41 item 1: a run is never free (pending again, its limit's slot or its schedule's
exclusivity released) while its handler can still execute. Real worker processes: A runs
handlers that outlive its shutdown timeout and has a `worker_stopped` hook that takes a
second; B is ready to claim. SIGTERM A. From the handlers' own evidence (tests/apps/stopping.py),
no two executions of one limit key or one skip-overlap schedule overlap in time, and each
run ends final with a history that says what happened."""

from __future__ import annotations

import itertools
import json
import time
from collections import defaultdict
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
APP = "tests.apps.stopping:app"


def evidence(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "executions.log"
    if not path.exists():
        return []
    # complete lines only: a handler's line being appended as we read has no newline yet
    complete = path.read_text().split("\n")[:-1]
    return [json.loads(line) for line in complete if line.strip()]


def executions(lines: list[dict[str, Any]]) -> dict[str, list[tuple[float, float, int, str]]]:
    """group -> (first sign of life, last sign of life, pid, run:token) of each execution."""
    spans: dict[tuple[str, str, int], list[float]] = {}
    for e in lines:
        key = (e["group"], f"{e['run']}:{e['token']}", e["pid"])
        spans.setdefault(key, []).append(e["t"])
    out: dict[str, list[tuple[float, float, int, str]]] = defaultdict(list)
    for (group, who, pid), times in spans.items():
        out[group].append((min(times), max(times), pid, who))
    return out


def overlaps(lines: list[dict[str, Any]]) -> list[tuple[str, Any, Any]]:
    found = []
    for group, spans in executions(lines).items():
        spans.sort()
        for earlier, later in itertools.pairwise(spans):
            if later[0] < earlier[1]:
                found.append((group, earlier, later))
    return found


@pytest.mark.parametrize("task", ["export", "export_async", "export_to_thread"])
def test_a_handler_still_running_at_shutdown_never_runs_beside_its_next_execution(
    db_url: str, procs: WorkerProcs, tmp_path: Path, task: str
) -> None:
    app = make_app(db_url)
    env = {"ROTA_TEST_HOOK_SLEEP": "1", "ROTA_TEST_SCHEDULE": "1", "ROTA_TEST_LONG": "8"}
    a = procs.start(APP, concurrency=4, lease=1.5, shutdown_timeout=0.3, env=env)
    handle = _declare(app, task).enqueue(customer="acme")
    wait_until(lambda: _started(tmp_path, "limit:acme") and _started(tmp_path, "schedule:nightly"), 30,
               "the export and a tick of the schedule to start on A")  # fmt: skip
    procs.start(APP, concurrency=4, lease=1.5, env={"ROTA_TEST_SCHEDULE": "1"})  # B
    wait_until(lambda: len([w for w in app.list_workers() if w.alive]) == 2, 30, "B to register")
    took = procs.terminate(a)
    assert took < 0.3 + 0.5 + 1 + 4, f"SIGTERM took {took:.1f} s"
    wait_until(lambda: handle.refresh().is_final, 30, "the export to end")
    wait_until(lambda: _ended_after_restart(tmp_path, "schedule:nightly"), 30, "the schedule to run again on B")
    lines = evidence(tmp_path)
    assert overlaps(lines) == [], overlaps(lines)
    run = handle.refresh()
    assert (run.status, run.attempt) == ("succeeded", 2), run
    first = run.history[0]
    assert first["status"] == "lost" and first["error"]["type"] == "WorkerStopped", run.history
    assert "still ran" in first["error"]["message"], first
    assert "still running at shutdown" in procs.output(0), procs.output(0)
    app.close()


def _declare(app: Any, task: str) -> Any:
    """The task as the enqueuing App knows it (its limit key is computed here)."""
    import rota

    @app.task(name=task, pass_context=True, limit=rota.Limit(1, by="customer"), retries=2, backoff=0)
    def stub(ctx: rota.RunContext, customer: str) -> None: ...

    return stub


def _started(tmp_path: Path, group: str) -> bool:
    return any(e["event"] == "start" and e["group"] == group for e in evidence(tmp_path))


def _ended_after_restart(tmp_path: Path, group: str) -> bool:
    """An execution of `group` ended in a process other than the first one's."""
    lines = [e for e in evidence(tmp_path) if e["group"] == group]
    return bool(lines) and any(e["event"] == "end" and e["pid"] != lines[0]["pid"] for e in lines)


def test_a_def_handler_that_stops_on_ctx_cancelled_within_a_second_is_handed_back(
    db_url: str, procs: WorkerProcs, tmp_path: Path
) -> None:
    """The deploy guide: a handler that may outlive the drain should stop on ctx.cancelled
    (true from the end of the drain); it is then handed back without using an attempt. Under
    `rota worker` a handler that looked every 0.5 s was fenced at once (no grace for a thread):
    its attempt counted and its history read WorkerStopped."""
    app = make_app(db_url)
    a = procs.start(APP, concurrency=2, lease=3.0, shutdown_timeout=0.3)

    @app.task(name="polite", pass_context=True, retries=2, backoff=0)
    def stub(ctx: rota.RunContext, seconds: float) -> None: ...

    handle = stub.enqueue(0.5)
    wait_until(lambda: _started(tmp_path, "polite"), 30, "the handler to start")
    procs.terminate(a)
    run = handle.refresh()
    assert (run.status, run.attempt) == ("pending", 0), run
    assert run.history[-1]["status"] == "handed back", run.history
    assert "still running at shutdown" not in procs.output(0), procs.output(0)
    app.close()


def test_an_isolated_run_is_handed_back_only_once_its_child_process_is_gone(
    db_url: str, procs: WorkerProcs, tmp_path: Path
) -> None:
    """isolation="process": the child is killed and reaped, then its run is handed back (the
    hand-back came first, the child ran on for up to a tenth of a second)."""
    import signal

    app = make_app(db_url)
    a = procs.start("tests.apps.isolated:app", concurrency=1, lease=3.0, shutdown_timeout=0.3)
    pid_file = tmp_path / "child.pid"

    @app.task(name="isolated_sleep")
    def stub(pid_file: str, seconds: float) -> None: ...

    handle = stub.enqueue(str(pid_file), 30.0)
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() != "", 30, "the child to start")
    child = int(pid_file.read_text())
    a.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 20
    while handle.refresh().status != "pending":
        assert time.monotonic() < deadline, "the run was not handed back"
        time.sleep(0.005)
    assert not _alive(child), "handed back while its child process still ran"
    a.wait(10)
    run = handle.refresh()
    assert (run.status, run.attempt, run.history[-1]["status"]) == ("pending", 0, "handed back"), run
    app.close()


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie, killed but not reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_the_watchdog_ends_the_process_whatever_its_threads_do() -> None:
    """What guarantees that a fenced worker's process is gone before its fence is."""
    import subprocess
    import sys

    code = "from rota.worker.stopping import arm_watchdog; import time; arm_watchdog(0.3); time.sleep(30)"
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=20, check=False)
    assert done.returncode != 0 and time.monotonic() - began < 10
    assert b"Timeout" in done.stderr  # faulthandler says why, with the threads' stacks
