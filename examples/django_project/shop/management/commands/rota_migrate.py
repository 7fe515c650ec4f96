"""`python manage.py rota_migrate`: create or upgrade rota's tables (run it with `migrate`)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from shop.tasks import app


class Command(BaseCommand):
    help = "Apply rota's pending migrations to the project's database."

    def handle(self, *args: Any, **options: Any) -> None:
        applied = app.migrate()
        self.stdout.write(f"rota: applied {', '.join(applied) if applied else 'nothing (up to date)'}")
        app.close()
