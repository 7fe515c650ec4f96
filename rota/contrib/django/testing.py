"""pytest-django support (the fixture `rota_django_app` of rota.testing.plugin).

With pytest-django's `db` fixture a test runs inside a transaction that is rolled back at its
end: a run enqueued on Django's connection stays in it, unseen by rota's own connections
(`assert_enqueued` finds nothing, a worker claims nothing). `rota_django_app` asks for
`transactional_db` instead (rows are committed, Django flushes its tables after the test),
binds the project's App (settings.ROTA) to Django's test database, and empties rota's tables
after each test (Django's flush leaves tables it does not manage).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ...app import App
from ...clock import FakeClock
from ...testing import bind
from . import conf

_KEEP = {"rota_migrations", "rota_counters", "rota_run_counts"}  # seeded rows, kept by triggers


@contextlib.contextmanager
def bound_app(clock: FakeClock | None = None, alias: str = "default") -> Iterator[App]:
    """The project's App on Django's test database `alias` (already created by
    pytest-django), rota's tables emptied when the block ends."""
    from django.db import connections

    connection = connections[alias]
    url = conf.url_of(connection.settings_dict)
    app = conf.get_app()
    with bind(app, url, clock):
        try:
            yield app
        finally:
            app.close()
            empty_rota_tables(alias)


def empty_rota_tables(alias: str = "default") -> None:
    """Delete every row of rota's tables (not their schema) in Django's database `alias`."""
    from django.db import connections, transaction

    connection = connections[alias]
    tables = [t for t in connection.introspection.table_names() if t.startswith("rota_") and t not in _KEEP]
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"DELETE FROM {connection.ops.quote_name(table)}")  # MySQL: `name`
