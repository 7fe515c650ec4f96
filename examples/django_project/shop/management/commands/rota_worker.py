"""`python manage.py rota_worker`: a rota worker with Django set up (models usable in tasks)."""

from __future__ import annotations

import asyncio
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from shop.tasks import app


class Command(BaseCommand):
    help = "Run a rota worker until SIGTERM/SIGINT (--until-idle: run what is due, then exit)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--concurrency", type=int, default=None)
        parser.add_argument("--until-idle", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["until_idle"]:
            worker = app.worker(concurrency=options["concurrency"], install_signal_handlers=False)
            ran = asyncio.run(worker.run_until_idle())
            self.stdout.write(f"ran {ran} run(s)")
        else:
            app.run_worker(concurrency=options["concurrency"])
        app.close()
