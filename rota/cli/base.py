"""The `rota` group, its global options, loading APP, and errors as one line.

Every error a person can cause (a bad flag, a bad ROTA_* variable, an unknown run) ends the
command with one line on stderr, `error: ...`, exit status 1 (2 for usage errors), no
traceback, and no password: messages go through rota.config.redact_text.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from .. import config, logs
from .._version import __version__
from ..app import App
from ..errors import ConfigurationError, RotaError, RunNotFound
from ..logs import log_event
from ..models import Run
from ..models import parse_run_id as check_run_id
from ..tasks import check_queue as check_queue_name
from .display import clean

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("rota.cli")


class Whole(click.IntRange):
    """A whole number in [low, high], refused in one line that says so: click's own reads
    "'x' is not a valid integer range." and "0 is not in the range 1<=x<=10000."."""

    def __init__(self, low: int, high: int) -> None:
        super().__init__(low, high)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            number = value if isinstance(value, int) else int(str(value).strip())
        except ValueError:
            number = None
        if number is None or not self.min <= number <= self.max:  # type: ignore[operator]
            self.fail(f"{value!r} is not a whole number from {self.min} to {self.max}", param, ctx)
        return number


class RotaGroup(click.Group):
    """A click group whose errors are one line (`error: ...`) with passwords redacted, and
    whose global options are accepted after the subcommand too (`rota worker APP
    --database-url ...`): add_command gives every command a copy (listed in its --help)."""

    def _where_it_goes(self, exc: click.NoSuchOption) -> str:
        """An option of some commands given where it does not apply: say where it goes."""
        name = exc.option_name
        takers = sorted(
            c for c, cmd in self.commands.items() if any(name in getattr(p, "opts", ()) for p in cmd.params)
        )
        if not takers:
            return exc.format_message()
        here = exc.ctx.command.name if exc.ctx is not None and exc.ctx.command is not self else None
        where = f"`rota {here}` does not take it" if here else "it goes after the command"
        example = "runs" if "runs" in takers else takers[0]
        return f"no such option {name} here: {where}; the commands that take it: {', '.join(takers)} (e.g. rota {example} {name})"

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        taken = {opt for p in cmd.params for opt in getattr(p, "opts", ())}
        for option in global_options(cmd.name or ""):
            if not taken.intersection(option.opts):
                cmd.params.append(option)
        super().add_command(cmd, name)

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, **extra: Any) -> Any:  # type: ignore[override]
        extra.pop("standalone_mode", None)
        try:
            result = super().main(args, prog_name, standalone_mode=False, **extra)
        except click.exceptions.Abort:
            _say("aborted")
            sys.exit(1)
        except click.NoSuchOption as exc:
            _say(self._where_it_goes(exc))
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            _say(exc.format_message())
            sys.exit(exc.exit_code)
        except RotaError as exc:
            _say(error_text(exc))
            sys.exit(1)
        if isinstance(result, int) and result:  # ctx.exit(code) under standalone_mode=False
            sys.exit(result)
        return result


def _say(message: str) -> None:
    secrets = [os.environ.get("ROTA_DATABASE_URL"), os.environ.get("ROTA_LOCKS_URL")]
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.find_root().obj:
        secrets.append(ctx.find_root().obj.get("database_url"))
    text = clean(config.redact_text(message, *secrets, *_argv_urls()), newlines=False)
    click.echo(f"error: {text}", err=True)


def _argv_urls() -> list[str]:
    return [a for a in sys.argv if "://" in a or "password" in a.lower()]


def error_text(exc: BaseException) -> str:
    """The message and the first line of each cause, as one line (drivers write several)."""
    message = " ".join(str(exc).split())
    cause = exc.__cause__
    while cause is not None:
        first = " ".join(" ".join(_cause_text(cause).strip().splitlines()[:1]).split())
        if first and first not in message:
            message += f" (caused by: {first})"
        cause = cause.__cause__
    return message


def _cause_text(cause: BaseException) -> str:
    """A cause's text: a MySQL driver's (code, message) error as its message (its str is the
    tuple, which repeated the message already said: `Access denied ... (caused by: (1045, ...))`).
    Only when its text is that tuple: an OSError's args are (errno, strerror) too, but its text
    names the file or address, which the message alone would hide."""
    args = cause.args
    if len(args) == 2 and isinstance(args[0], int) and isinstance(args[1], str) and str(cause) == str(args):
        return args[1]
    return str(cause)


def handle_errors(fn: F) -> F:
    """Turn a RotaError into one `error:` line and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except RotaError as exc:
            _say(error_text(exc))
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def load_app(target: str) -> App:
    """Import `module:attribute` (the current directory is on the path, as with uvicorn)."""
    if ":" not in target:
        raise click.BadParameter(f"{target!r} is not module:attribute, e.g. myproject.jobs:app", param_hint="APP")
    module_name, _, attr = target.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    setup_django()
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import module {module_name!r}: {exc}", param_hint="APP") from exc
    except Exception as exc:
        if not type(exc).__module__.startswith("django."):
            raise
        raise click.ClickException(django_error(module_name, exc)) from None
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise click.BadParameter(f"module {module_name!r} has no attribute {attr!r}", param_hint="APP")
    if not isinstance(obj, App):
        raise click.BadParameter(f"{target} is a {type(obj).__name__}, not a rota.App", param_hint="APP")
    return obj


def setup_django() -> None:
    """With DJANGO_SETTINGS_MODULE set, set Django up before APP is imported (so its tasks
    can use the ORM, as under `manage.py`); without it, nothing."""
    if not os.environ.get("DJANGO_SETTINGS_MODULE") or importlib.util.find_spec("django") is None:
        return
    import django

    try:
        django.setup()
    except Exception as exc:
        where = os.environ["DJANGO_SETTINGS_MODULE"]
        raise click.ClickException(f"DJANGO_SETTINGS_MODULE={where}: cannot set Django up: {error_text(exc)}") from None


def django_error(module_name: str, exc: Exception) -> str:
    """One line for a Django error met importing APP (settings missing or not ready)."""
    text = " ".join(str(exc).split())
    if os.environ.get("DJANGO_SETTINGS_MODULE"):
        return f"cannot import module {module_name!r}: {type(exc).__name__}: {text}"
    return (
        f"cannot import module {module_name!r}: it uses Django, and DJANGO_SETTINGS_MODULE is not set: "
        f"set it (DJANGO_SETTINGS_MODULE=mysite.settings rota ...) or run `python manage.py rota_worker` "
        f"with rota.contrib.django in INSTALLED_APPS ({type(exc).__name__}: {text})"
    )


def database_app(ctx: click.Context, *, check: bool = True, **options: Any) -> App:
    """An App for commands that only touch the database (no tasks). If `check` (all but rota
    migrate), the database must exist and hold rota's tables: a read or a change never creates
    one (a mistyped path would read as an empty database)."""
    app = App(ctx.find_root().obj["database_url"], **options)
    if check:
        check_database(app, database_source(ctx))
    return app


def database_source(ctx: click.Context) -> str:
    """Where the database URL came from, for messages."""
    if ctx.find_root().obj["database_url"] is not None:
        return "from --database-url"
    if os.environ.get("ROTA_DATABASE_URL"):
        return "from ROTA_DATABASE_URL"
    return "the default: neither --database-url nor ROTA_DATABASE_URL is set"


def check_database(app: App, source: str) -> None:
    """ConfigurationError, one line, if the App's database does not exist or has no rota
    tables; nothing is created (the SQLite file is not opened unless it exists)."""
    point = "point at yours with --database-url URL (or ROTA_DATABASE_URL)"
    path = getattr(app._store, "path", None)
    if path is not None and not os.path.exists(path):
        where = f"{os.path.abspath(path)} ({app.database_label}, {source})"
        raise ConfigurationError(f"no database at {where}: {point}, or create it with `rota migrate`")
    if app._store.schema_version()[0] == 0:
        where = f"{app.database_label} ({source})"
        raise ConfigurationError(f"no rota tables in {where}: {point}, or create them with `rota migrate`")


def check_queue(name: str | None, flag: str = "--queue") -> str | None:
    """One queue name, checked by the rule a run's queue meets at enqueue (rota.tasks)."""
    if name is not None:
        try:
            check_queue_name(name)
        except ConfigurationError as exc:
            raise click.BadParameter(str(exc), param_hint=flag) from None
    return name


class RunIdCommand(click.Command):
    """A command taking RUN_ID: a negative number there (`rota run -5`) is a run id that cannot
    exist, and says so as `rota run 0` does; click would call it an unknown option '-5' (or
    '-1' for -12). A value of an option (`--task -5`) and anything after `--` are left alone."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        valued = {o for p in self.params if isinstance(p, click.Option) and not (p.is_flag or p.count) for o in p.opts}
        for before, arg in zip(["", *args], args, strict=False):
            if arg == "--":
                break
            if re.fullmatch(r"-[0-9]+", arg) and before not in valued:
                check_run_id(arg)  # RunNotFound: run ids are integers from 1 to ...
        return super().parse_args(ctx, args)


GAPS = (
    "run ids are not contiguous: retention prunes old runs, and on PostgreSQL an insert that "
    "rolled back (a transactional enqueue) or met a conflict (a key already taken, a schedule "
    "tick another worker wrote first) uses up an id, as does the write check of `rota migrate` "
    "and of every worker's start (so the first run there is not 1)"
)


def find_run(app: App, run_id: str) -> Run:
    """app.get_run, and when an id below the newest is missing, why ids have gaps."""
    try:
        return app.get_run(run_id)
    except RunNotFound as exc:
        if not (run_id.isascii() and run_id.isdigit()) or int(run_id) < 1:
            raise  # not an id at all (its message says what ids are): no word on gaps
        newest = app.list_runs(limit=1)
        top = int(newest[0].id) if newest else 0
        hint = GAPS if int(run_id) < top else (f"the newest run is {top}" if top else "there are no runs yet")
        raise RunNotFound(f"{exc}; {hint}") from None


def database_line(app: App) -> str:
    """The header line of a listing: which database it read (SQLite: the absolute path too)."""
    path = getattr(app._store, "path", None)
    where = f" ({os.path.abspath(path)})" if path is not None and not os.path.isabs(path) else ""
    return f"database: {app.database_label}{where}"


def apply_database_flag(ctx: click.Context, app: App) -> None:
    """--database-url applies to an APP unless its code passed a URL (argument > flag)."""
    flag = ctx.find_root().obj["database_url"]
    if flag is None or flag == app.database_url:
        return
    if app.setting_sources.get("database_url") == "argument":
        log_event(log, logging.WARNING, "flag_ignored", f"--database-url ignored: {app} passes its URL in code")
        return
    from ..stores import open_store

    app.database_url = flag
    app._store = open_store(app.database_url, app.clock, **app._store_options)
    app._ready = False


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


GLOBAL_NOTE = "Global: also accepted before the command."
NO_DATABASE = ("explain", "demo")  # read no database (demo has its own --database)


def global_options(command: str) -> list[click.Option]:
    """Fresh copies of the group's options for a subcommand; a value given there overrides
    the one given before the command. --log-level/--log-format re-apply the logging setup."""
    options = [
        click.Option(["-v", "--verbose"], count=True, expose_value=False, callback=_set_global, help="More logging (-vv for debug). " + GLOBAL_NOTE),
        click.Option(["--log-level"], type=click.Choice(config.LOG_LEVELS), expose_value=False, callback=_set_global, help=log_level_help(command) + " " + GLOBAL_NOTE),
        click.Option(["--log-format"], type=click.Choice(config.LOG_FORMATS), expose_value=False, callback=_set_global, help=config.help_line("log_format") + " " + GLOBAL_NOTE),
    ]  # fmt: skip
    if command not in NO_DATABASE:
        database = click.Option(
            ["--database-url"],
            expose_value=False,
            callback=_set_global,
            help=config.help_line("database_url") + " " + GLOBAL_NOTE,
        )
        options.insert(0, database)
    return options


def _set_global(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value is None or value == 0 or param.name is None:
        return
    root = ctx.find_root()
    root.ensure_object(dict)
    root.obj[param.name] = value
    if param.name != "database_url":
        setup_logging(ctx)


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON (field names as in the docs).")
utc_option = click.option("--utc", is_flag=True, help="Show absolute times in UTC (default: local time).")


LOUD_COMMANDS = ("worker", "dashboard")  # log at info by default; every other command at warning


def default_log_level(command: str | None) -> str:
    """The log level of `command` when no flag, variable or -v sets one."""
    return "info" if command in LOUD_COMMANDS else "warning"


def log_level_help(command: str | None) -> str:
    """--log-level's help with the real default of `command` (None: the group's, for all)."""
    setting = config.SETTINGS["log_level"]
    shown = default_log_level(command) if command is not None else "warning; info for worker and dashboard"
    return f"{setting.help} [env {setting.env}; default {shown}]"


def log_options(command: str | None = None) -> Callable[[F], F]:
    """--log-level and --log-format (ROTA_LOG_LEVEL, ROTA_LOG_FORMAT) of `command`."""

    def decorate(fn: F) -> F:
        formats = click.Choice(config.LOG_FORMATS)
        fn = click.option("--log-format", type=formats, help=config.help_line("log_format"))(fn)
        return click.option("--log-level", type=click.Choice(config.LOG_LEVELS), help=log_level_help(command))(fn)

    return decorate


def setup_logging(ctx: click.Context, level: str | None = None, fmt: str | None = None) -> None:
    """Flag (here, else before the command) > ROTA_LOG_* variable > -v/-vv > the command's
    default (default_log_level: info for worker and dashboard, else warning)."""
    root = ctx.find_root().obj
    level, fmt = level or root.get("log_level"), fmt or root.get("log_format")
    default = default_log_level(ctx.command.name if ctx.parent is not None else None)
    verbose = root.get("verbose", 0)
    if verbose:
        default = "info" if verbose == 1 else "debug"
    env_level = config.from_env("log_level") if os.environ.get("ROTA_LOG_LEVEL") else None
    logs.configure(level or env_level or default, fmt or config.from_env("log_format"))


@click.group(cls=RotaGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--database-url", default=None, help=config.help_line("database_url"))
@click.option("-v", "--verbose", count=True, help="More logging (-vv for debug).")
@log_options()
@click.version_option(version=__version__, prog_name="rota", message="%(prog)s %(version)s")
@click.pass_context
def main(
    ctx: click.Context, database_url: str | None, verbose: int, log_level: str | None, log_format: str | None
) -> None:
    """rota: a job scheduler and task queue backed by your database.

    Commands that run code take APP as `module:attribute` (like uvicorn); commands that only
    read or change the database need no APP (and never create one: `rota migrate` does).
    Tables for people, --json for scripts. --database-url, -v, --log-level and --log-format
    also go after the command.
    """
    ctx.ensure_object(dict)
    ctx.obj["database_url"] = database_url
    ctx.obj.update(verbose=verbose, log_level=log_level, log_format=log_format)
    try:
        setup_logging(ctx)
    except RotaError as exc:
        _say(error_text(exc))
        sys.exit(1)
