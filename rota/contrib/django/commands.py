"""The management commands: each runs the `rota` command of the same name, in this process,
with Django set up, rota's logging on (the worker's lines at info) and the database of
settings.ROTA (else Django's default database) as ROTA_DATABASE_URL."""

from __future__ import annotations

import argparse
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...errors import ConfigurationError
from . import conf

DEFAULT_APP = "rota.contrib.django.conf:app"  # the App get_app() makes when ROTA["APP"] is unset


class RotaCommand(BaseCommand):
    """`manage.py rota_<command> [ARGS]`: `rota <command> [APP] [ARGS]`."""

    command: str = ""
    takes_app = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("rota_args", nargs=argparse.REMAINDER, help="arguments of the rota command")

    def run_from_argv(self, argv: list[str]) -> None:
        self.run_rota(argv[2:])  # every argument goes to rota (its --help included)

    def handle(self, *args: Any, **options: Any) -> None:
        self.run_rota([*args, *options.get("rota_args", [])])

    def run_rota(self, args: list[str]) -> None:
        from ... import cli

        try:
            os.environ.setdefault("ROTA_DATABASE_URL", conf.database_url())
            target = [conf.app_path() or DEFAULT_APP] if self.takes_app else []
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from None
        if self.takes_app and args and ":" in args[0] and not args[0].startswith("-"):
            target = [args.pop(0)]  # an APP named on the command line
        command = [self.command] if self.command else []
        try:
            cli.main.main([*command, *target, *args], prog_name="manage.py rota")
        except SystemExit as exc:
            if exc.code:
                raise
