"""Commands that change runs and schedules: trigger, pause, resume, cancel, retry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import click

from ..app import App
from ..errors import ScheduleNotFound, did_you_mean
from ..models import FINAL_STATUSES, ScheduleInfo
from .base import RunIdCommand, database_app, find_run, handle_errors, json_option, main, print_json
from .display import when
from .flow import Duration, retry_failed


@main.command()
@click.argument("name")
@json_option
@click.pass_context
@handle_errors
def trigger(ctx: click.Context, name: str, as_json: bool) -> None:
    """Run schedule NAME now (honouring its overlap policy)."""
    app = database_app(ctx)
    try:
        handle = app.trigger(name)
    except ScheduleNotFound as exc:
        raise with_hint(app, name, exc) from None
    run = handle.refresh()
    if as_json:
        print_json(run.to_json())
    else:
        note = " (waiting behind the active run)" if run.queued else ""
        click.echo(f"run {run.id} {run.status}{note}")


def with_hint(app: App, name: str, exc: ScheduleNotFound) -> ScheduleNotFound:
    """The error with a "did you mean" from the stored schedules' names (a short name given
    for a decorator's full one, 'nightly' for 'myapp.jobs.nightly', or a typo)."""
    if "(did you mean" in str(exc):  # the App's own error has one already
        return exc
    hint = did_you_mean(name, [s.name for s in app.list_schedules()])
    return ScheduleNotFound(f"{exc}{hint or '; `rota schedules` lists them by their full names'}")


def steer_schedule(app: App, action: str, name: str) -> ScheduleInfo:
    try:
        info: ScheduleInfo = app.pause(name) if action == "pause" else app.resume(name)
    except ScheduleNotFound as exc:
        raise with_hint(app, name, exc) from None
    return info


@main.command()
@click.argument("name")
@json_option
@click.pass_context
@handle_errors
def pause(ctx: click.Context, name: str, as_json: bool) -> None:
    """Pause schedule NAME (no new ticks until resumed)."""
    info = steer_schedule(database_app(ctx), "pause", name)
    if as_json:
        print_json(info.to_json())
    else:
        click.echo(f"paused {name}")


@main.command()
@click.argument("name")
@json_option
@click.pass_context
@handle_errors
def resume(ctx: click.Context, name: str, as_json: bool) -> None:
    """Resume schedule NAME from its next tick (missed ticks do not run)."""
    info = steer_schedule(database_app(ctx), "resume", name)
    if as_json:
        print_json(info.to_json())
    else:
        click.echo(f"resumed {name}; next run {when(info.next_run_at, datetime.now(UTC)) or '-'}")


@main.command(cls=RunIdCommand)
@click.argument("run_id")
@json_option
@click.pass_context
@handle_errors
def cancel(ctx: click.Context, run_id: str, as_json: bool) -> None:
    """Cancel a run (pending: at once; running: asked to stop)."""
    app = database_app(ctx)
    before = find_run(app, run_id)
    run = app.cancel(run_id)
    if as_json:
        print_json(run.to_json())
    elif before.is_final:
        click.echo(f"run {run.id} already {before.status}: nothing to cancel")
    elif run.status == "cancelled":
        click.echo(f"run {run.id} cancelled")
    elif run.status == "running":
        click.echo(f"run {run.id} is running: asked to stop (its worker cancels it; its timeout stops it otherwise)")
    else:
        click.echo(f"run {run.id} finished as {run.status} before it could be cancelled")


@main.command(cls=RunIdCommand)
@click.argument("run_id", required=False)
@click.option(
    "--failed", "bulk", flag_value="failed", default=None, help="Retry every failed run (see --task, --since)."
)
@click.option("--status", "bulk", type=click.Choice(sorted(FINAL_STATUSES)), help="Retry every run that ended so.")
@click.option("--task", default=None, help="With --failed: only runs of this task.")
@click.option("--since", type=Duration(), default=None, help="With --failed: only runs finished within, e.g. 6h.")
@json_option
@click.pass_context
@handle_errors
def retry(
    ctx: click.Context, run_id: str | None, bulk: str | None, task: str | None, since: timedelta | None, as_json: bool
) -> None:
    """Run a finished run again (a new run; history stays), or with --failed every failed run."""
    if (run_id is None) == (bulk is None) or (bulk is None and (task or since)):
        raise click.UsageError("give a RUN_ID, or --failed (or --status S) with optional --task and --since")
    if bulk is not None:
        retry_failed(ctx, bulk, task, since, as_json)
        return
    app = database_app(ctx)
    find_run(app, run_id or "")
    handle = app.retry(run_id or "")
    if as_json:
        print_json(handle.refresh().to_json())
        return
    click.echo(f"run {handle.id} enqueued (retry of {run_id})")
