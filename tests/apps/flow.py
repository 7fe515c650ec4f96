"""A flow-control app for process-level tests: the database URL comes from ROTA_DATABASE_URL."""

from __future__ import annotations

import os

import rota

app = rota.App(poll_interval=float(os.environ.get("ROTA_TEST_POLL", "0.5")), retention=None)


@app.task(rate=rota.Rate(1, per=60, name="slow"), name="tests.apps.flow.slow")
def slow(n: int) -> None:
    """At most one start a minute, across every worker."""
