"""Commands that run code of an APP: worker, enqueue, dashboard, demo."""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
from typing import Any

import click

from .. import config, operate
from ..app import App
from ..errors import DatabaseError, DatabaseRefused
from ..logs import log_event
from ..serialization import MAX_DEPTH, too_long
from .base import (
    Whole,
    apply_database_flag,
    check_queue,
    database_app,
    handle_errors,
    json_option,
    load_app,
    log,
    log_options,
    main,
    print_json,
    setup_logging,
)
from .display import duration
from .flow import Duration, RunId

PORT = Whole(1, 65535)


class Seconds(click.ParamType):  # type: ignore[type-arg]
    """A number of seconds checked as the setting's ROTA_* variable is (its bounds, e.g. a lease
    of at least 0.5 s and at most a year), so a bad flag is refused before anything starts."""

    name = "seconds"

    def __init__(self, setting: str) -> None:
        self.setting = config.SETTINGS[setting]

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, float):
            return value
        try:
            return float(self.setting.parse(str(value)))
        except ValueError as exc:
            self.fail(f"{value!r} is not valid: expected {exc}", param, ctx)


def check_port(port: int, host: str, flag: str) -> None:
    """Fail before anything starts if `port` on `host` is taken (or not bindable)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc.strerror})"
            raise click.BadParameter(f"port {port} on {host} {why}: choose another", param_hint=flag) from None


def check_queues(queues: tuple[str, ...]) -> list[str] | None:
    if not queues:
        return None
    try:
        return config.SETTINGS["queues"].parse(",".join(queues))  # type: ignore[no-any-return]
    except ValueError as exc:
        bad = ", ".join(repr(q) for q in queues if not config._QUEUE.match(q))
        raise click.BadParameter(f"invalid queue name(s) {bad}: expected {exc}", param_hint="--queue") from None


def _flag_or_app(app: App, name: str, flag: Any) -> Any:
    """argument > flag > variable > default: a value the App got in code wins over the flag."""
    if flag is None:
        return None
    if app.setting_sources.get(name) == "argument" and getattr(app, name) != flag:
        flag_name, value = "--" + name.replace("_", "-"), getattr(app, name)
        message = f"{flag_name} {flag} ignored: the App sets {name}={value!r} in code"
        log_event(log, logging.WARNING, "flag_ignored", message, setting=name)
        return None
    return flag


@main.command(epilog=config.epilog())
@click.argument("app_path", metavar="APP")
@click.option("-c", "--concurrency", type=Whole(1, 10000), help=config.help_line("concurrency"))
@click.option(
    "-q", "--queue", "queues", multiple=True, help="Only this queue (repeatable). [env ROTA_QUEUES; default all]"
)
@click.option("--lease", type=Seconds("lease"), help=config.help_line("lease"))
@click.option("--poll-interval", type=Seconds("poll_interval"), help=config.help_line("poll_interval"))
@click.option("--shutdown-timeout", type=Seconds("shutdown_timeout"), help=config.help_line("shutdown_timeout"))
@click.option("--default-timeout", type=Seconds("default_timeout"), help=config.help_line("default_timeout"))
@click.option("--metrics-port", type=PORT, help=config.help_line("metrics_port"))
@click.option("--prefetch", type=Whole(0, 100000), help=config.help_line("prefetch"))
@log_options("worker")
@click.pass_context
@handle_errors
def worker(ctx: click.Context, /, app_path: str, **flags: Any) -> None:
    """Run a worker for APP until SIGTERM/SIGINT (then drain and hand back)."""
    config.check_environment()  # a bad ROTA_* variable stops the start, before APP is imported
    queues = check_queues(flags["queues"]) or config.value("queues")
    metrics_port = config.value("metrics_port", flags["metrics_port"])
    setup_logging(ctx, flags["log_level"], flags["log_format"])
    if metrics_port is not None:
        check_port(metrics_port, "0.0.0.0", "--metrics-port")
    app = load_app(app_path)
    apply_database_flag(ctx, app)
    app.run_worker(
        concurrency=_flag_or_app(app, "concurrency", flags["concurrency"]),
        queues=queues,
        shutdown_timeout=_flag_or_app(app, "shutdown_timeout", flags["shutdown_timeout"]),
        lease=_flag_or_app(app, "lease", flags["lease"]),
        poll_interval=_flag_or_app(app, "poll_interval", flags["poll_interval"]),
        default_timeout=_flag_or_app(app, "default_timeout", flags["default_timeout"]),
        metrics_port=metrics_port,
        prefetch=config.value("prefetch", flags["prefetch"]),
        exit_after_stop=True,  # a handler still running at the end: fenced, and the process ends
    )


class _LongInt(Exception):
    """An integer of --args/--kwargs longer than Python writes or reads in decimal."""


def _parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        shown = f"a number ({text[:12]}…)"
        raise _LongInt(too_long(shown, len(text.lstrip("-")))) from None


def parse_arguments(args_json: str, kwargs_json: str) -> tuple[list[Any], dict[str, Any]]:
    """--args/--kwargs as JSON, refusing what the database could not store."""
    values: list[Any] = []
    for flag, raw, kind in (("--args", args_json, list), ("--kwargs", kwargs_json, dict)):
        try:
            raw.encode("utf-8")
            value = json.loads(raw, parse_int=_parse_int)
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint=flag) from None
        except _LongInt as exc:
            raise click.BadParameter(str(exc), param_hint=flag) from None
        except RecursionError:
            raise click.BadParameter(
                f"is nested too deeply (JSON arguments may nest at most {MAX_DEPTH} levels)", param_hint=flag
            ) from None
        except UnicodeEncodeError:
            raise click.BadParameter("contains a lone surrogate (not valid UTF-8 text)", param_hint=flag) from None
        if not isinstance(value, kind):
            raise click.BadParameter(f"must be a JSON {'array' if kind is list else 'object'}", param_hint=flag)
        values.append(value)
    args: list[Any] = values[0]
    kwargs: dict[str, Any] = values[1]
    return args, kwargs


@main.command()
@click.argument("app_path", metavar="[APP]")
@click.argument("task", required=False)
@click.option("--args", "args_json", default="[]", help="Positional arguments as a JSON array.")
@click.option("--kwargs", "kwargs_json", default="{}", help="Keyword arguments as a JSON object.")
@click.option("--delay", type=Duration(zero=True), default=None,
              help="Run after this long: 90s, 15m, 6h, 2d (a plain number is seconds; 0 to 36500d).")  # fmt: skip
@click.option("--priority", type=int, default=None)
@click.option("--queue", default=None)
@click.option("--key", default=None, help="Deduplication key.")
@click.option("--unique-for", type=Duration(), default=None,
              help="With --key: return the run of this key created within this window (90s, 15m, 6h, 2d), "
                   "in any status but cancelled, instead of enqueuing again.")  # fmt: skip
@click.option(
    "--after",
    "after",
    multiple=True,
    type=RunId(),
    metavar="RUN_ID",
    help="Run once this run has succeeded (repeatable: once all of them have).",
)
@json_option
@click.pass_context
@handle_errors
def enqueue(
    ctx: click.Context, /, app_path: str, task: str | None, args_json: str, kwargs_json: str, **opts: Any
) -> None:
    """Enqueue one run of TASK (a registered task name of APP). Without APP: of a task some
    worker declares, with the default options unless given (its code's are not known here)."""
    args, kwargs = parse_arguments(args_json, kwargs_json)
    check_queue(opts["queue"])
    if task is None:
        return enqueue_declared(ctx, app_path, args, kwargs, opts)
    app = load_app(app_path)
    apply_database_flag(ctx, app)
    key, unique_for = opts["key"], opts["unique_for"]
    if unique_for is not None and key is None:
        raise click.UsageError("--unique-for needs --key (the key whose recent run to return)")
    extra = {"unique_for": unique_for} if unique_for is not None else {}
    extra |= {"after": list(opts["after"])} if opts["after"] else {}
    call = app.get_task(task).options(
        delay=opts["delay"], priority=opts["priority"], queue=opts["queue"], key=key, **extra
    )
    handle = call.enqueue(*args, **kwargs)
    return _enqueued(handle.id, handle.created, opts)


def _enqueued(run_id: str, created: bool, opts: dict[str, Any]) -> None:
    """What `rota enqueue` prints: the run's id, and why when it was not created."""
    key, unique_for = opts["key"], opts["unique_for"]
    if opts["as_json"]:
        print_json({"id": run_id, "created": created})
    elif created:
        click.echo(run_id)
    elif unique_for is not None:
        click.echo(f"{run_id} (created with key {key!r} within the last {duration(unique_for)}: not enqueued again)")
    else:
        click.echo(f"{run_id} (already pending with key {key!r})")


def enqueue_declared(
    ctx: click.Context, task: str, args: list[Any], kwargs: dict[str, Any], opts: dict[str, Any]
) -> None:
    """`rota enqueue TASK` without APP: by name, checked against the declared tasks."""
    if opts["unique_for"] is not None or opts["after"]:
        raise click.UsageError("--unique-for and --after need APP (rota enqueue APP TASK ...)")
    fields = {"args": args, "kwargs": kwargs, "queue": opts["queue"], "priority": opts["priority"], "key": opts["key"],
              "delay": opts["delay"].total_seconds() if opts["delay"] is not None else None}  # fmt: skip
    fields = {k: v for k, v in fields.items() if v is not None}
    run_id, created = operate.enqueue(database_app(ctx), task, fields, operate.cli_user())
    _enqueued(run_id, created, opts)


@main.command()
@click.argument("app_path", metavar="APP")
@click.option("--host", default=None, help=config.help_line("dashboard_host"))
@click.option("--port", type=PORT, default=None, help=config.help_line("dashboard_port"))
@click.option(
    "--token",
    default=None,
    help=config.help_line("dashboard_token") + " Needed beyond loopback; at least 16 characters.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    help=config.help_line("dashboard_allowed_hosts") + " Repeatable; the names replace the default.",
)
@click.option("--forwarded-allow-ips", "proxies", default=None, help=config.help_line("dashboard_forwarded_allow_ips"))
@click.pass_context
@handle_errors
def dashboard(
    ctx: click.Context,
    app_path: str,
    host: str | None,
    port: int | None,
    token: str | None,
    allowed_hosts: tuple[str, ...],
    proxies: str | None,
) -> None:
    """Serve the web dashboard, JSON API and /metrics for APP (needs rota[web])."""
    config.check_environment()  # a bad ROTA_* variable stops the start
    setup_logging(ctx)
    host = config.value("dashboard_host", host)
    port = config.value("dashboard_port", port)
    hosts = config.value("dashboard_allowed_hosts", _host_names(allowed_hosts))
    forwarded = config.value("dashboard_forwarded_allow_ips", _proxies(proxies))
    assert host is not None and port is not None
    try:
        from .. import web
    except ImportError as exc:
        raise click.ClickException(str(exc)) from exc
    token = _token(token)
    web.check_open(token, host, hosts)  # before the port check: name the missing token
    check_port(port, host, "--port")
    app = load_app(app_path)
    apply_database_flag(ctx, app)
    _probe_database(app)
    try:
        web.serve(app, host=host, port=port, token=token, allowed_hosts=hosts, forwarded_allow_ips=forwarded)
    finally:
        app.close()


def _token(flag: str | None) -> str | None:
    """--token, else ROTA_DASHBOARD_TOKEN (None: no token), and each token the dashboard would
    serve with (ROTA_DASHBOARD_READONLY_TOKEN too) at least rota.web.MIN_TOKEN characters."""
    from .. import web
    from ..web.auth import READONLY_ENV, TOKEN_ENV

    token = config.value("dashboard_token", flag) or None
    web.check_token_length(token, "--token" if flag is not None else TOKEN_ENV)
    web.check_token_length(os.environ.get(READONLY_ENV) or None, READONLY_ENV)
    return token


def _probe_database(app: App) -> None:
    """One read before serving: a database that refuses this URL for good (no such database
    or role, a wrong password) stops the start with the reason (DatabaseRefused); one that
    does not answer yet is said in one warning, and the pages show the error until it does."""
    try:
        app.store.now()
    except DatabaseRefused:
        app.close()
        raise
    except DatabaseError as exc:
        log.warning("database unavailable (%s): the dashboard starts; its pages show this until it answers", exc)


def _host_names(flags: tuple[str, ...]) -> list[str] | None:
    """--allowed-host values (None if not given), checked as ROTA_DASHBOARD_ALLOWED_HOSTS is."""
    if not flags:
        return None
    try:
        return config.SETTINGS["dashboard_allowed_hosts"].parse(",".join(flags))  # type: ignore[no-any-return]
    except ValueError as exc:
        bad = ", ".join(repr(h) for h in flags)
        raise click.BadParameter(f"{bad}: expected {exc}", param_hint="--allowed-host") from None


def _proxies(flag: str | None) -> list[str] | None:
    """--forwarded-allow-ips (None if not given), checked as ROTA_DASHBOARD_FORWARDED_ALLOW_IPS is."""
    if flag is None:
        return None
    try:
        return config.SETTINGS["dashboard_forwarded_allow_ips"].parse(flag)  # type: ignore[no-any-return]
    except ValueError as exc:
        raise click.BadParameter(f"{flag!r}: expected {exc}", param_hint="--forwarded-allow-ips") from None


@main.command()
@click.option("--database", default=None, help="Where the demo keeps its runs.", show_default="sqlite:///rota-demo.db")
@click.option("--seconds", type=click.FloatRange(0, min_open=True), default=None, help="Stop after this long.")
@click.option("--port", type=PORT, default=8000, show_default=True, help="Dashboard port on 127.0.0.1.")
@click.option("--no-dashboard", is_flag=True, help="Only the worker, no dashboard.")
@handle_errors
def demo(database: str | None, seconds: float | None, port: int, no_dashboard: bool) -> None:
    """Run the demo: a worker on a SQLite file with example tasks and schedules, and the
    dashboard on http://127.0.0.1:PORT/ (if rota[web] is installed)."""
    from ..demo import run_demo

    if not no_dashboard:
        check_port(port, "127.0.0.1", "--port")
    run_demo(database or "sqlite:///rota-demo.db", seconds, dashboard_port=None if no_dashboard else port)
