"""An app with an isolated (isolation="process") task, for kill -9 tests of its worker."""

from __future__ import annotations

import os
import time

import rota

app = rota.App(lease=3.0, poll_interval=0.05, shutdown_timeout=1.0, retention=None)


@app.task(name="isolated_sleep", isolation="process")
def isolated_sleep(pid_file: str, seconds: float) -> str:
    """Write this child's pid, sleep, return: outliving a killed worker would show here."""
    with open(pid_file, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(seconds)
    return "done"
