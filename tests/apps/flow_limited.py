"""A limited task for process-level tests (the database URL comes from ROTA_DATABASE_URL)."""

from __future__ import annotations

import time

import rota

app = rota.App(retention=None)


@app.task(limit=1, name="tests.apps.flow_limited.one")
def one(seconds: float) -> None:
    """At most one running at once, across every worker."""
    time.sleep(seconds)
