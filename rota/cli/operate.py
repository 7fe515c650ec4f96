"""Commands that change schedules and queues as data, without the App's code (issue 44):
`rota schedules add|update|remove`, `rota queues [pause|resume]`. Each change is checked as
the Python API checks it (a task must be declared by some worker) and logged (who, what)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import click

from .. import operate
from .base import RotaGroup, Whole, database_app, handle_errors, json_option, main, print_json
from .display import Column, table
from .flow import Duration
from .inspect import schedules
from .running import parse_arguments

F = TypeVar("F", bound=Callable[..., Any])


def schedule_options(required: bool) -> Callable[[F], F]:
    """The options of `schedules add` and `schedules update` (update: all optional)."""

    def wrap(fn: F) -> F:
        opts = [
            click.option("--cron", default=None, help="Cron expression (or --every)."),
            click.option("--every", type=Duration(), default=None, help="Interval: 90s, 15m, 6h, 2d (or --cron)."),
            click.option("--tz", default=None, help="IANA time zone of --cron (default UTC)."),
            click.option("--args", "args_json", default=None, help="Positional arguments as a JSON array."),
            click.option("--kwargs", "kwargs_json", default=None, help="Keyword arguments as a JSON object."),
            click.option("--overlap", default=None, help="While a run is active: skip (default), queue, concurrent, replace."),
            click.option("--misfire", default=None, help="Missed ticks: coalesce (default), all, skip."),
            click.option("--misfire-grace", type=Duration(zero=True), default=None, help="How late a tick may still run (default 60s)."),
            click.option("--jitter", type=Duration(zero=True), default=None, help="Spread each tick by up to this."),
            click.option("--queue", default=None),
            click.option("--priority", type=int, default=None),
            click.option("--retries", type=Whole(0, 1000), default=None),
            click.option("--timeout", type=Duration(), default=None),
        ]  # fmt: skip
        if required:
            opts.append(click.option("--run-immediately", is_flag=True, default=None, help="Also run once now."))
            opts.append(
                click.option(
                    "--notify-on",
                    multiple=True,
                    help="Events a notifier sends for its runs: success, failure, retry, cancel, skip (repeatable).",
                )
            )
        for opt in reversed(opts):
            fn = opt(fn)
        return fn

    return wrap


def _fields(opts: dict[str, Any]) -> dict[str, Any]:
    """The options given, as App.add_schedule's arguments."""
    fields = {k: v for k, v in opts.items() if v is not None and k not in ("args_json", "kwargs_json", "as_json")}
    if opts.get("args_json") is not None or opts.get("kwargs_json") is not None:
        args, kwargs = parse_arguments(opts.get("args_json") or "[]", opts.get("kwargs_json") or "{}")
        fields |= {"args": args} if opts.get("args_json") is not None else {}
        fields |= {"kwargs": kwargs} if opts.get("kwargs_json") is not None else {}
    if fields.get("notify_on") == ():
        del fields["notify_on"]
    elif "notify_on" in fields:
        fields["notify_on"] = tuple(fields["notify_on"])
    if fields.get("run_immediately") is False:
        del fields["run_immediately"]
    return {k: v.total_seconds() if isinstance(v, timedelta) else v for k, v in fields.items()}


@schedules.command("add")
@click.argument("name")
@click.argument("task")
@schedule_options(required=True)
@json_option
@click.pass_context
@handle_errors
def schedules_add(ctx: click.Context, /, name: str, task: str, **opts: Any) -> None:
    """Add schedule NAME of TASK (a task some worker declares), stored in the database."""
    info = operate.add_schedule(database_app(ctx), {"name": name, "task": task, **_fields(opts)}, operate.cli_user())
    if opts["as_json"]:
        print_json(info.to_json())
    else:
        click.echo(f"added {name}")


@schedules.command("update")
@click.argument("name")
@click.option("--task", default=None, help="Another declared task.")
@schedule_options(required=False)
@json_option
@click.pass_context
@handle_errors
def schedules_update(ctx: click.Context, /, name: str, **opts: Any) -> None:
    """Change stored schedule NAME (a new --cron/--every/--tz plans its next tick afresh)."""
    info = operate.update_schedule(database_app(ctx), name, _fields(opts), operate.cli_user())
    if opts["as_json"]:
        print_json(info.to_json())
    else:
        click.echo(f"updated {name}")


@schedules.command("remove")
@click.argument("name")
@json_option
@click.pass_context
@handle_errors
def schedules_remove(ctx: click.Context, name: str, as_json: bool) -> None:
    """Remove schedule NAME: it stops firing, its pending runs are cancelled, history stays."""
    operate.remove_schedule(database_app(ctx), name, operate.cli_user())
    if as_json:
        print_json({"name": name, "removed": True})
    else:
        click.echo(f"removed {name}")


@main.group(cls=RotaGroup, invoke_without_command=True)
@json_option
@click.pass_context
@handle_errors
def queues(ctx: click.Context, as_json: bool) -> None:
    """List queues (active runs, paused or not); pause, resume: for every worker."""
    if ctx.invoked_subcommand is not None:
        return
    items = database_app(ctx).list_queues()
    if as_json:
        print_json([q.to_json() for q in items])
        return
    columns = [
        Column("queue", 100),
        Column("state", 90),
        Column("pending", 80),
        Column("running", 80),
        Column("paused by", 20, flexible=True),
    ]
    table(
        columns,
        [(q.name, "paused" if q.paused else "active", str(q.pending), str(q.running), q.paused_by) for q in items],
    )


def _steer_queue(ctx: click.Context, action: str, name: str, as_json: bool) -> None:
    app, by = database_app(ctx), operate.cli_user()
    info = app.pause_queue(name, by=by) if action == "pause" else app.resume_queue(name, by=by)
    operate.audit(by, f"queue_{action}", name)
    if as_json:
        print_json(info.to_json())
    else:
        click.echo(
            f"{action}d queue {name}"
            + (f" ({info.running} running finish)" if action == "pause" and info.running else "")
        )


@queues.command("pause")
@click.argument("name")
@json_option
@click.pass_context
@handle_errors
def queues_pause(ctx: click.Context, name: str, as_json: bool) -> None:
    """Pause queue NAME: every worker's next claim skips its runs (running runs finish)."""
    _steer_queue(ctx, "pause", name, as_json)


@queues.command("resume")
@click.argument("name")
@json_option
@click.pass_context
@handle_errors
def queues_resume(ctx: click.Context, name: str, as_json: bool) -> None:
    """Resume queue NAME: its due runs are claimed at the workers' next poll."""
    _steer_queue(ctx, "resume", name, as_json)
