"""The worker app of bench/flow_idle.py (W12): one task rated one start a minute. The
database comes from ROTA_DATABASE_URL."""

from __future__ import annotations

import os

import rota

app = rota.App(os.environ["ROTA_DATABASE_URL"], retention=None)


def declare(on: rota.App) -> rota.Task[[int], None]:
    """The rated task, declared on `on` (the worker's app, and the bench's client)."""

    @on.task(name="bench.rated_slow", rate=rota.Rate(1, per=60, name="bench.slow"))
    def rated_slow(n: int) -> None:
        """All but one of its runs wait for the window."""

    return rated_slow


declare(app)
