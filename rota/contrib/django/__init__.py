"""rota in a Django project: add "rota.contrib.django" to INSTALLED_APPS.

- settings.ROTA = {"APP": "shop.tasks:app", "DATABASE_URL": ...} (both optional; the database
  defaults to Django's own "default" database when it is PostgreSQL, MySQL or SQLite);
- `python manage.py rota_worker`, `rota_dashboard`, `rota_migrate`, and `rota <command>` for
  the read-only commands (`rota status`, `rota runs`, ...), with Django set up and logging on;
- `database_url()` for the App: `app = rota.App(rota.contrib.django.database_url())`;
- `RotaBackend`, a Django Tasks backend (rota.contrib.django.backend);
- the pytest fixture `rota_django_app` (rota.testing.plugin) for pytest-django tests.
"""

from __future__ import annotations

from typing import Any

from .conf import database_url, get_app, url_of

__all__ = ["RotaBackend", "database_url", "get_app", "url_of"]


def __getattr__(name: str) -> Any:
    if name == "RotaBackend":  # imported on use: django.tasks (or django-tasks) only then
        from .backend import RotaBackend

        return RotaBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
