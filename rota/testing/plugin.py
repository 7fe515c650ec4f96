"""The pytest plugin of rota (entry point `pytest11: rota`): fixtures for testing apps.

- `rota_clock`: a FakeClock starting at 2030-01-01 00:00 UTC (a Tuesday); move it with
  `rota_clock.advance(minutes=5)`.
- `rota_app`: an App on a temporary SQLite file using `rota_clock`, closed afterwards.
  Override it in your conftest.py to test your own App:

      @pytest.fixture
      def rota_app(rota_bind):
          return rota_bind(myproject.tasks.app)

- `rota_bind`: binds an existing App to the test's temporary database and `rota_clock`
  (restored after the test).

Then `rota.testing.run_pending(rota_app)` runs what is due (schedule ticks included).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ..app import App
from ..clock import FakeClock
from . import bind

START = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture
def rota_clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def rota_bind(tmp_path: Path, rota_clock: FakeClock) -> Iterator[Callable[[App], App]]:
    with contextlib.ExitStack() as stack:
        bound: list[App] = []

        def use(app: App) -> App:
            bound.append(stack.enter_context(bind(app, f"sqlite:///{tmp_path}/rota-{len(bound)}.db", rota_clock)))
            return app

        yield use


@pytest.fixture
def rota_app(tmp_path: Path, rota_clock: FakeClock) -> Iterator[App]:
    app = App(f"sqlite:///{tmp_path}/rota.db", clock=rota_clock, poll_interval=0.05, lease=5.0, retention=None)
    yield app
    app.close()
