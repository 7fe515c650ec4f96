"""The `rota` command: run workers, inspect and steer runs and schedules.

Commands that run code take APP as `module:attribute` (like uvicorn); commands that only
read or change the database need no APP: the URL comes from --database-url or
ROTA_DATABASE_URL (else sqlite:///rota.db). Tables for people, --json for scripts.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table

from . import timing
from .app import App
from .errors import RotaError
from .models import STATUSES, Run, iso

F = TypeVar("F", bound=Callable[..., Any])


def load_app(target: str) -> App:
    """Import `module:attribute` (the current directory is on the path, as with uvicorn)."""
    if ":" not in target:
        raise click.BadParameter(f"{target!r} is not module:attribute, e.g. myproject.jobs:app", param_hint="APP")
    module_name, _, attr = target.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import module {module_name!r}: {exc}", param_hint="APP") from exc
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise click.BadParameter(f"module {module_name!r} has no attribute {attr!r}", param_hint="APP")
    if not isinstance(obj, App):
        raise click.BadParameter(f"{target} is a {type(obj).__name__}, not a rota.App", param_hint="APP")
    return obj


def _database_app(ctx: click.Context) -> App:
    return App(ctx.obj["database_url"])


def _fail(exc: BaseException) -> None:
    message = str(exc)
    cause = exc.__cause__
    while cause is not None:
        text = str(cause).strip().splitlines()
        if text and text[0] not in message:
            message += f"\n  caused by: {text[0]}"
        cause = cause.__cause__
    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False)
    raise SystemExit(1)


def handle_errors(fn: F) -> F:
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except RotaError as exc:
            _fail(exc)

    return wrapper  # type: ignore[return-value]


def _print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def _when(value: datetime | None) -> str:
    return iso(value) or "-"


def _table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=title, header_style="bold", show_lines=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*("-" if v is None else str(v) for v in row))
    Console().print(table)  # made per call: COLUMNS and the terminal are read now


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON (field names as in the docs).")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--database-url",
    envvar="ROTA_DATABASE_URL",
    default="sqlite:///rota.db",
    show_default=True,
    help="Database (also ROTA_DATABASE_URL).",
)
@click.option("-v", "--verbose", count=True, help="More logging (-vv for debug).")
@click.version_option(package_name="rota")
@click.pass_context
def main(ctx: click.Context, database_url: str, verbose: int) -> None:
    """rota: a job scheduler and task queue backed by your database."""
    ctx.ensure_object(dict)
    ctx.obj["database_url"] = database_url
    ctx.obj["database_url_given"] = ctx.get_parameter_source("database_url") != click.core.ParameterSource.DEFAULT
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


# -- running code ---------------------------------------------------------------------------
@main.command()
@click.argument("app_path", metavar="APP")
@click.option("-c", "--concurrency", type=int, default=None, help="Runs at a time (default: the App's, 5).")
@click.option("-q", "--queue", "queues", multiple=True, help="Only these queues (repeatable; default all).")
@click.option("--lease", type=float, default=None, help="Lease seconds (default 30).")
@click.option("--poll-interval", type=float, default=None, help="Seconds between polls (default 1).")
@click.option("--shutdown-timeout", type=float, default=None, help="Seconds to drain on SIGTERM (default 30).")
@click.option("--metrics-port", type=int, default=None, help="Serve Prometheus /metrics on this port.")
@click.pass_context
@handle_errors
def worker(
    ctx: click.Context,
    app_path: str,
    concurrency: int | None,
    queues: tuple[str, ...],
    lease: float | None,
    poll_interval: float | None,
    shutdown_timeout: float | None,
    metrics_port: int | None,
) -> None:
    """Run a worker for APP until SIGTERM/SIGINT (then drain and hand back)."""
    app = load_app(app_path)
    _apply_database_override(ctx, app)
    if not logging.getLogger().isEnabledFor(logging.INFO):
        logging.getLogger("rota").setLevel(logging.INFO)
    app.run_worker(
        concurrency=concurrency,
        queues=list(queues) or None,
        shutdown_timeout=shutdown_timeout,
        lease=lease,
        poll_interval=poll_interval,
        metrics_port=metrics_port,
    )


def _apply_database_override(ctx: click.Context, app: App) -> None:
    """--database-url given explicitly wins over the App's own URL."""
    if ctx.obj.get("database_url_given") and ctx.obj["database_url"] != app.database_url:
        from .stores import open_store

        app.database_url = ctx.obj["database_url"]
        app._store = open_store(app.database_url, app.clock, **app._store_options)
        app._ready = False


@main.command()
@click.argument("app_path", metavar="APP")
@click.argument("task")
@click.option("--args", "args_json", default="[]", help="Positional arguments as a JSON array.")
@click.option("--kwargs", "kwargs_json", default="{}", help="Keyword arguments as a JSON object.")
@click.option("--delay", type=float, default=None, help="Run after this many seconds.")
@click.option("--priority", type=int, default=None)
@click.option("--queue", default=None)
@click.option("--key", default=None, help="Deduplication key.")
@json_option
@click.pass_context
@handle_errors
def enqueue(
    ctx: click.Context,
    app_path: str,
    task: str,
    args_json: str,
    kwargs_json: str,
    delay: float | None,
    priority: int | None,
    queue: str | None,
    key: str | None,
    as_json: bool,
) -> None:
    """Enqueue one run of TASK (a registered task name of APP)."""
    app = load_app(app_path)
    _apply_database_override(ctx, app)
    try:
        args = json.loads(args_json)
        kwargs = json.loads(kwargs_json)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}") from exc
    if not isinstance(args, list):
        raise click.BadParameter(f"--args must be a JSON array, got {args_json}")
    if not isinstance(kwargs, dict):
        raise click.BadParameter(f"--kwargs must be a JSON object, got {kwargs_json}")
    handle = app.get_task(task).options(delay=delay, priority=priority, queue=queue, key=key).enqueue(*args, **kwargs)
    if as_json:
        _print_json({"id": handle.id, "created": handle.created})
    else:
        click.echo(handle.id if handle.created else f"{handle.id} (already pending with key {key!r})")


@main.command()
@click.argument("app_path", metavar="APP")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=int, default=8000, show_default=True)
@click.option(
    "--token",
    envvar="ROTA_DASHBOARD_TOKEN",
    default=None,
    help="Require this bearer token (better: ROTA_DASHBOARD_TOKEN); needed beyond loopback.",
)
@click.pass_context
@handle_errors
def dashboard(ctx: click.Context, app_path: str, host: str, port: int, token: str | None) -> None:
    """Serve the web dashboard, JSON API and /metrics for APP (needs rota[web])."""
    try:
        from . import web
    except ImportError as exc:
        raise click.ClickException(str(exc)) from exc
    app = load_app(app_path)
    _apply_database_override(ctx, app)
    try:
        web.serve(app, host=host, port=port, token=token or None)
    finally:
        app.close()


@main.command()
@click.option(
    "--database",
    default=None,
    help="Where the demo keeps its runs.",
    show_default="sqlite:///rota-demo.db",
)
@click.option("--seconds", type=float, default=None, help="Stop after this long (default: until Ctrl-C).")
def demo(database: str | None, seconds: float | None) -> None:
    """Run the demo: a worker on a SQLite file with example tasks and schedules."""
    from .demo import run_demo

    try:
        run_demo(database or "sqlite:///rota-demo.db", seconds)
    except RotaError as exc:
        _fail(exc)


# -- database only --------------------------------------------------------------------------
@main.command()
@click.option("--dry-run", is_flag=True, help="Only list what would be applied.")
@click.pass_context
@handle_errors
def migrate(ctx: click.Context, dry_run: bool) -> None:
    """Apply pending schema migrations."""
    app = _database_app(ctx)
    applied = app.migrate(dry_run=dry_run)
    current, latest = app._store.schema_version()
    verb = "would apply" if dry_run else "applied"
    click.echo(f"{verb}: {', '.join(applied)}" if applied else f"schema is up to date (version {current} of {latest})")


@main.command()
@json_option
@click.option("--all", "include_inactive", is_flag=True, help="Include removed (inactive) schedules.")
@click.pass_context
@handle_errors
def schedules(ctx: click.Context, as_json: bool, include_inactive: bool) -> None:
    """List schedules with next/last run and counters."""
    items = _database_app(ctx).list_schedules(include_inactive=include_inactive)
    if as_json:
        _print_json([s.to_json() for s in items])
        return
    rows = []
    for s in items:
        when = s.cron or f"every {s.every.total_seconds():g}s" if s.every else s.cron
        state = "paused" if s.paused else ("active" if s.active else "removed")
        rows.append(
            (
                s.name,
                s.task,
                when,
                s.tz,
                s.overlap,
                state,
                _when(s.next_run_at),
                _when(s.last_run_at),
                s.last_status,
                f"{s.run_count}/{s.success_count}/{s.failure_count}/{s.skip_count}",
            )
        )
    cols = (
        "name",
        "task",
        "when",
        "tz",
        "overlap",
        "state",
        "next run",
        "last run",
        "last",
        "runs/ok/fail/skip",
    )
    _table(None, cols, rows)


@main.command()
@click.option("--status", type=click.Choice(STATUSES), default=None)
@click.option("--task", default=None)
@click.option("--schedule", default=None)
@click.option("--queue", default=None)
@click.option("--limit", type=int, default=50, show_default=True)
@json_option
@click.pass_context
@handle_errors
def runs(
    ctx: click.Context,
    status: str | None,
    task: str | None,
    schedule: str | None,
    queue: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """List runs, newest first."""
    items = _database_app(ctx).list_runs(status=status, task=task, schedule=schedule, limit=limit, queue=queue)
    if as_json:
        _print_json([r.to_json() for r in items])
        return
    rows = [
        (
            r.id,
            r.task,
            r.schedule,
            r.status,
            f"{r.attempt}/{r.max_attempts}",
            _when(r.scheduled_for),
            _when(r.started_at),
            _duration(r),
            r.worker,
            _summary(r),
        )
        for r in items
    ]
    _table(
        None,
        (
            "id",
            "task",
            "schedule",
            "status",
            "try",
            "scheduled for",
            "started",
            "took",
            "worker",
            "result / error",
        ),
        rows,
    )


def _duration(run: Run) -> str | None:
    d = run.duration
    return f"{d.total_seconds():.3f}s" if d is not None else None


def _summary(run: Run) -> str | None:
    if run.error:
        return f"{run.error.get('type')}: {run.error.get('message')}"[:80]
    if run.result is not None:
        return json.dumps(run.result)[:80]
    return None


@main.command("run")
@click.argument("run_id")
@json_option
@click.pass_context
@handle_errors
def run_detail(ctx: click.Context, run_id: str, as_json: bool) -> None:
    """Show one run, with every attempt and its error."""
    run = _database_app(ctx).get_run(run_id)
    data = run.to_json()
    if as_json:
        _print_json(data)
        return
    for field in (
        "id",
        "task",
        "schedule",
        "status",
        "attempt",
        "max_attempts",
        "queue",
        "priority",
        "key",
        "args",
        "kwargs",
        "scheduled_for",
        "started_at",
        "finished_at",
        "worker",
        "token",
        "result",
    ):
        value = data[field]
        if value is not None:
            click.echo(f"{field:>14}: {json.dumps(value) if isinstance(value, (dict, list)) else value}")
    for attempt in run.attempts:
        click.echo(
            f"\nattempt {attempt['attempt']} on {attempt['worker']}: {attempt['status']} "
            f"({attempt['started_at']} .. {attempt['finished_at']})"
        )
        error = attempt.get("error")
        if error:
            click.echo(f"  {error.get('type')}: {error.get('message')}")
            if error.get("traceback"):
                click.echo("  " + error["traceback"].rstrip().replace("\n", "\n  "))


@main.command()
@click.argument("name")
@json_option
@click.pass_context
@handle_errors
def trigger(ctx: click.Context, name: str, as_json: bool) -> None:
    """Run schedule NAME now (honouring its overlap policy)."""
    handle = _database_app(ctx).trigger(name)
    run = handle.refresh()
    if as_json:
        _print_json(run.to_json())
    else:
        note = " (waiting behind the active run)" if run.held else ""
        click.echo(f"run {run.id} {run.status}{note}")


@main.command()
@click.argument("name")
@click.pass_context
@handle_errors
def pause(ctx: click.Context, name: str) -> None:
    """Pause schedule NAME (no new ticks until resumed)."""
    _database_app(ctx).pause(name)
    click.echo(f"paused {name}")


@main.command()
@click.argument("name")
@click.pass_context
@handle_errors
def resume(ctx: click.Context, name: str) -> None:
    """Resume schedule NAME from its next tick (missed ticks do not run)."""
    info = _database_app(ctx).resume(name)
    click.echo(f"resumed {name}; next run {_when(info.next_run_at)}")


@main.command()
@click.argument("run_id")
@json_option
@click.pass_context
@handle_errors
def cancel(ctx: click.Context, run_id: str, as_json: bool) -> None:
    """Cancel a run (pending: at once; running: asked to stop)."""
    app = _database_app(ctx)
    before = app.get_run(run_id)
    run = app.cancel(run_id)
    if as_json:
        _print_json(run.to_json())
    elif before.is_final:
        click.echo(f"run {run.id} already {before.status}: nothing to cancel")
    elif run.status == "cancelled":
        click.echo(f"run {run.id} cancelled")
    elif run.status == "running":
        click.echo(f"run {run.id} is running: asked to stop (its worker cancels it; its timeout stops it otherwise)")
    else:
        click.echo(f"run {run.id} finished as {run.status} before it could be cancelled")


@main.command()
@click.argument("run_id")
@click.pass_context
@handle_errors
def retry(ctx: click.Context, run_id: str) -> None:
    """Run a finished run again (a new run; history stays)."""
    handle = _database_app(ctx).retry(run_id)
    click.echo(f"run {handle.id} enqueued (retry of {run_id})")


@main.command()
@json_option
@click.option("--locks-url", envvar="ROTA_LOCKS_URL", default=None, help="Redis URL when locks live in Redis.")
@click.pass_context
@handle_errors
def locks(ctx: click.Context, as_json: bool, locks_url: str | None) -> None:
    """List named locks: holder, token, expiry."""
    app = App(ctx.obj["database_url"], locks_url=locks_url)
    items = app.list_locks()
    if as_json:
        _print_json([i.to_json() for i in items])
        return
    _table(
        None,
        ("name", "held", "owner", "token", "expires"),
        [(i.name, i.held, i.owner, i.token, _when(i.expires_at)) for i in items],
    )


@main.command()
@json_option
@click.pass_context
@handle_errors
def workers(ctx: click.Context, as_json: bool) -> None:
    """List workers seen recently."""
    items = _database_app(ctx).list_workers()
    if as_json:
        _print_json([w.to_json() for w in items])
        return
    rows = [
        (
            w.id,
            w.state,
            "yes" if w.alive else "no",
            w.concurrency,
            ",".join(w.queues or ["all"]),
            _when(w.started_at),
            _when(w.last_seen),
            w.stuck,
        )
        for w in items
    ]
    _table(None, ("worker", "state", "alive", "concurrency", "queues", "started", "last seen", "stuck"), rows)


@main.command()
@json_option
@click.pass_context
@handle_errors
def status(ctx: click.Context, as_json: bool) -> None:
    """Counts by status, live workers and capacity, schema version."""
    app = _database_app(ctx)
    stats = app.stats()
    current, latest = app.store.schema_version()
    stats["schema_version"] = current
    if as_json:
        _print_json(stats)
        return
    click.echo(f"database: {stats['database']} (schema {current}/{latest})")
    click.echo(f"workers:  {stats['workers']} alive, capacity {stats['capacity']}")
    click.echo("runs:     " + ", ".join(f"{k} {v}" for k, v in stats["runs"].items()))


@main.command()
@click.argument("cron")
@click.option("--tz", default="UTC", show_default=True, help="IANA time zone.")
@click.option("--count", type=int, default=5, show_default=True)
@click.option("--after", default=None, help="Start after this ISO time (default now).")
@json_option
@handle_errors
def explain(cron: str, tz: str, count: int, after: str | None, as_json: bool) -> None:
    """Print the next fire times of CRON, in local time and UTC, with DST notes."""
    start = datetime.fromisoformat(after) if after else None
    times = timing.explain(cron, tz, after=start, count=count)
    if as_json:
        _print_json([{"local": t.local.isoformat(), "utc": iso(t.utc.astimezone(UTC)), "note": t.note} for t in times])
        return
    trigger = timing.make_trigger(cron=cron, tz=tz)
    click.echo(f"{trigger.description}:")
    for t in times:
        click.echo(
            f"  {t.local.strftime('%a %Y-%m-%d %H:%M %Z'):<26} {iso(t.utc)}" + (f"   # {t.note}" if t.note else "")
        )


if __name__ == "__main__":  # pragma: no cover
    main()
