"""A process that used rota ends as soon as its code does, on every store, without
`app.close()`: on CPython 3.13 a psycopg pool still open at exit, reachable only through a
reference cycle, was closed by the interpreter's last garbage collection, after its threads
had stopped running, and waited 5 s for each of its 4 threads (rota/stores/postgres/at_exit.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import WITH_MYSQL, store_url, wait_for

ROOT = Path(__file__).resolve().parent.parent
PROMPT = 5.0  # seconds from the script's last line (or SIGTERM) to the process's end; 3.13 took 20

_SCRIPT = """
import sys
import rota

app = rota.App(database_url=sys.argv[1])


@app.task(name="noted")
def noted() -> None:
    pass


app.migrate()
run = noted.enqueue()
assert app.get_run(run.id).status == "pending"
print("done", flush=True)
"""


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    yield from store_url(request, tmp_path)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


def test_a_script_that_leaves_its_app_open_ends_at_once(db_url: str) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _SCRIPT, db_url], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.strip() == "done":
            break
    done = time.monotonic()
    out, _ = proc.communicate(timeout=60)
    took = time.monotonic() - done
    assert proc.returncode == 0, "".join(lines) + out
    assert took < PROMPT, f"the process ended {took:.1f} s after its last line: {out}"


def test_a_worker_ends_at_once_after_sigterm(db_url: str, procs: Any, tmp_path: Path) -> None:
    worker = procs.start()
    wait_for(lambda: "started" in procs.output(0), 30, "the worker to start")
    took = procs.terminate(worker, 60)
    assert worker.returncode == 0, procs.output(0)
    assert took < PROMPT, f"the worker ended {took:.1f} s after SIGTERM: {procs.output(0)[-1500:]}"
