"""isolation="process" children die with their worker (issue 22, item 7): a real worker
process killed with -9 takes its child along, and nothing writes into its log afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import WITH_MYSQL, make_app, store_url
from .procs import ROOT, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request, tmp_path)


def running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie waiting to be reaped is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


@pytest.mark.skipif(sys.platform == "win32", reason="kill -9 is POSIX")
def test_a_child_dies_with_its_worker_killed_by_sigkill(db_url: str, tmp_path: Path) -> None:
    url = db_url
    app = make_app(url)
    app.task(name="isolated_sleep")(lambda pid_file, seconds: "done")  # a client: the worker runs APP's
    pid_file = tmp_path / "child.pid"
    handle = app.get_task("isolated_sleep").enqueue(str(pid_file), 4.0)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROTA_")} | {"PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "rota", "worker", "tests.apps.isolated:app", "--database-url", url]
    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log:
        worker = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: pid_file.exists() and pid_file.read_text().strip() != "", 60, "the child to start")
        began = time.monotonic()
        child = int(pid_file.read_text())
        assert running(child)
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        wait_until(lambda: not running(child), 5, "the child to die with its worker")
        assert time.monotonic() - began < 4.0, "the child ran to its end instead of dying"
        time.sleep(max(0.0, 4.5 - (time.monotonic() - began)))  # past the handler's own end
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    text = log_path.read_text(errors="replace")
    assert "Traceback" not in text and "BrokenPipe" not in text, text
    assert app.get_run(handle.id).status == "running"  # rescued once the lease expires, as usual
    app.close()
