"""The pytest plugin of rota (entry point `pytest11: rota`): fixtures for testing apps.

- `rota_clock`: a FakeClock starting at 2030-01-01 00:00 UTC (a Tuesday); move it with
  `rota_clock.advance(minutes=5)`.
- `rota_database_url`: the test's database, a temporary SQLite file by default. Override it
  in your conftest.py to test on PostgreSQL (a fresh schema per test):

      @pytest.fixture
      def rota_database_url():
          with rota.testing.postgres_schema("postgresql://app@127.0.0.1:5432/myapp_test") as url:
              yield url

  (on MySQL/MariaDB, a fresh database per test: `rota.testing.mysql_database(url)`).
- `rota_bind`: binds an existing App to `rota_database_url` and `rota_clock` (restored after
  the test); `rota_bind(app, "postgresql://...")` names another database for that App.
- `rota_app`: an App on `rota_database_url` using `rota_clock`, closed afterwards.
  Override it in your conftest.py to test your own App:

      @pytest.fixture
      def rota_app(rota_bind):
          return rota_bind(myproject.tasks.app)

Then `rota.testing.run_pending(rota_app)` runs what is due (schedule ticks included).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import pytest

from ..app import App
from ..clock import FakeClock
from . import bind

START = datetime(2030, 1, 1, tzinfo=UTC)


class Binder(Protocol):
    def __call__(self, app: App, database_url: str | None = None) -> App: ...


@pytest.fixture
def rota_clock() -> FakeClock:
    """A rota.FakeClock at 2030-01-01 00:00 UTC (a Tuesday); `rota_clock.advance(minutes=5)`
    moves it. rota_app and rota_bind use it, so delays, retries and schedules follow it."""
    return FakeClock(START)


@pytest.fixture
def rota_database_url(tmp_path: Path) -> str:
    """The URL of this test's empty database: a temporary SQLite file. Override it in your
    conftest.py to test on PostgreSQL, a fresh schema per test:
    `with rota.testing.postgres_schema("postgresql://app@127.0.0.1:5432/myapp_test") as url:
    yield url`, or on MySQL/MariaDB a fresh database per test, `rota.testing.mysql_database(url)`;
    rota_bind and rota_app then use it."""
    return f"sqlite:///{tmp_path}/rota-0.db"


@pytest.fixture
def rota_bind(tmp_path: Path, rota_clock: FakeClock, rota_database_url: str) -> Iterator[Binder]:
    """A function `rota_bind(app, database_url=None) -> app` that points your App (its tasks,
    schedules and hooks) at the test's database and rota_clock until the test ends.

    Without `database_url` the App gets `rota_database_url` (override that fixture to test on
    PostgreSQL); a second App in the same test gets its own SQLite file by default, or shares
    the database you named. Usual use, in conftest.py:
    `def rota_app(rota_bind): return rota_bind(myproject.tasks.app)`."""
    default = rota_database_url == f"sqlite:///{tmp_path}/rota-0.db"
    with contextlib.ExitStack() as stack:
        bound: list[App] = []

        def use(app: App, database_url: str | None = None) -> App:
            if database_url is None:
                fresh = default and bound
                database_url = f"sqlite:///{tmp_path}/rota-{len(bound)}.db" if fresh else rota_database_url
            bound.append(stack.enter_context(bind(app, database_url, rota_clock)))
            return app

        yield use


@pytest.fixture
def rota_app(rota_database_url: str, rota_clock: FakeClock) -> Iterator[App]:
    """A fresh App on `rota_database_url` using rota_clock (short poll interval and lease, no
    retention), closed afterwards. Declare tasks on it in the test, or override this fixture
    in conftest.py to bind your own App: `def rota_app(rota_bind): return rota_bind(my_app)`."""
    app = App(rota_database_url, clock=rota_clock, poll_interval=0.05, lease=5.0, retention=None)
    yield app
    app.close()


@pytest.fixture
def rota_django_app(transactional_db: None, rota_clock: FakeClock) -> Iterator[App]:
    """For pytest-django: the project's App (settings.ROTA["APP"]) on Django's test database,
    rota_clock its clock, rota's tables emptied after the test. It asks for pytest-django's
    `transactional_db` (committed rows: rota's connections see what the code under test
    enqueued on Django's connection; with `db` they would not). SQLite: the test database
    must be a file: set the database's TEST NAME to a path."""
    from ..contrib.django.testing import bound_app

    with bound_app(rota_clock) as app:
        yield app
