"""tests.apps.basic with prefetch on whatever the handlers' durations on a loaded machine
(the kill -9 test of runs held ahead must not depend on the machine being quiet)."""

from __future__ import annotations

import rota.worker.prefetch

from .basic import app

rota.worker.prefetch.WINDOW = 100.0

__all__ = ["app"]
