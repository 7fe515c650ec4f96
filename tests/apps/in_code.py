"""An app that sets its worker settings in code (a ROTA_* variable must still be valid)."""

from __future__ import annotations

import rota

app = rota.App(concurrency=3, lease=3.0, poll_interval=0.05, shutdown_timeout=1.0, retention=None)


@app.task(name="noop")
def noop() -> None:
    return None
