"""Flow-control commands (issue 20): `rota backfill`, `rota retry --failed`, and the jitter
options of `rota explain`."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import click

from .. import timing
from ..app import App
from ..config import parse_duration
from ..errors import did_you_mean
from ..models import iso
from ..timing.misfire import OVERLAP_POLICIES
from .base import database_app, handle_errors, json_option, main, print_json
from .display import duration

F = TypeVar("F", bound=Callable[..., Any])
SHOWN = 20  # runs listed by `rota backfill` (all with --json)


class Duration(click.ParamType):  # type: ignore[type-arg]
    """90s, 15m, 6h, 2d (a plain number is seconds), parsed by rota.config.parse_duration: more
    than 0 and at most 36500d, or from 0 with `zero` (--delay 0: now)."""

    name = "duration"
    ZERO = re.compile(r"\s*0+(?:\.0+)?\s*[smhd]?\s*")

    def __init__(self, *, zero: bool = False) -> None:
        self.zero = zero

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        if self.ZERO.fullmatch(str(value)):
            if self.zero:
                return timedelta(0)
            self.fail(f"{value!r} must be more than 0 (a duration such as 90s, 15m, 6h or 2d)", param, ctx)
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            if "at most" in str(exc):  # well formed, too long
                self.fail(f"{value!r} is too long: expected {exc}", param, ctx)
            plain = "a plain number is seconds" + (", 0 or more" if self.zero else "")
            self.fail(f"{value!r} is not a duration such as 90s, 15m, 6h or 2d ({plain})", param, ctx)


class RunId(click.ParamType):  # type: ignore[type-arg]
    """A run id as `rota runs` lists them: ASCII digits."""

    name = "run id"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value).strip()
        if not (text.isascii() and text.isdigit()):
            self.fail(f"{value!r} is not a run id (a number, as `rota runs` lists them)", param, ctx)
        return text


class IsoTime(click.ParamType):  # type: ignore[type-arg]
    """An ISO-8601 time; one without an offset is UTC."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            moment = datetime.fromisoformat(str(value))
        except ValueError:
            self.fail(
                f"{value!r} is not an ISO time such as 2026-03-29T00:00 (UTC) or 2026-03-29T00:00+01:00", param, ctx
            )
        return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@main.command()
@click.argument("name")
@click.option("--from", "start", type=IsoTime(), required=True, help="First tick time (ISO-8601; no offset means UTC).")
@click.option(
    "--to", "end", type=IsoTime(), required=True, help="End of the range, exclusive (ISO-8601; UTC if no offset)."
)
@click.option("--overlap", type=click.Choice(OVERLAP_POLICIES), default=None,
              help="concurrent: all at once; skip/queue/replace: one after another, oldest first "
                   "(default: the schedule's own policy).")  # fmt: skip
@json_option
@click.pass_context
@handle_errors
def backfill(ctx: click.Context, name: str, start: datetime, end: datetime, overlap: str | None, as_json: bool) -> None:
    """Make one run per tick of schedule NAME in [--from, --to) that has none yet."""
    app = database_app(ctx)
    handles = app.backfill(name, start=start, end=end, overlap=overlap)
    if as_json:
        print_json([h.refresh().to_json() for h in handles])
        return
    span = f"[{iso(start.astimezone(UTC))}, {iso(end.astimezone(UTC))})"
    if not handles:
        click.echo(f"schedule {name}: {_why_nothing(app, name, start, span)}; nothing to do")
        return
    click.echo(f"schedule {name}: {len(handles)} run(s) backfilled for {span}")
    for h in handles[:SHOWN]:
        r = h.refresh()
        note = " (queued behind the others)" if r.queued else ""
        click.echo(f"  run {r.id}  tick {iso(r.scheduled_for)}  {r.status}{note}")
    if len(handles) > SHOWN:
        click.echo(
            f"  ... and {len(handles) - SHOWN} more (runs {handles[SHOWN].id} to {handles[-1].id}; --json lists all)"
        )


def _why_nothing(app: App, name: str, start: datetime, span: str) -> str:
    """Every past tick has its run, or the range lies at or after the schedule's next run (its
    own, not backfill's), or the schedule is paused at an earlier tick."""
    info = app.get_schedule(name)
    if info.paused:
        return f"no tick in {span} before the pause lacks a run (backfill stops where it was paused: resume it first)"
    if info.next_run_at is not None and start >= info.next_run_at:
        nxt = iso(info.next_run_at)
        return f"{span} starts at or after its next run ({nxt}): backfill makes only past ticks, those are its own"
    return f"no tick in {span} lacks a run"


def retry_failed(ctx: click.Context, status: str, task: str | None, since: timedelta | None, as_json: bool) -> None:
    """`rota retry --failed`: retry every matching final run (App.retry_many)."""
    app = database_app(ctx)
    count = app.retry_many(status=status, task=task, since=since)
    if as_json:
        print_json(
            {"retried": count, "status": status, "task": task, "since": since.total_seconds() if since else None}
        )
        return
    scope = (f" of task {task}" if task else "") + (f" finished in the last {duration(since)}" if since else "")
    damaged = (
        " (runs set aside as damaged are passed over: repair each, then `rota retry ID`)" if status == "failed" else ""
    )
    click.echo(f"{count} {status} run(s){scope} enqueued again{damaged}")


def unknown_task(app: App, task: str | None) -> str | None:
    """ "no run of task 'x' exists (did you mean 'app.x'?)" when no run of `task` exists at all
    (a short name or a typo, not "nothing matched"), else None. The CLI reads no APP here, so
    the names offered are those of the recent runs' tasks (a removed task's runs still list)."""
    if task is None or app.list_runs(task=task, limit=1):
        return None
    close = did_you_mean(task, {r.task for r in app.list_runs(limit=500)})
    return f"no run of task {task!r} exists{close}"


def unknown_names(app: App, flt: dict[str, Any]) -> list[str]:
    """The warnings for `rota runs` that listed nothing: each --task or --schedule naming
    nothing that exists (a typo), with the names close to it and how to list them."""
    found = []
    task = unknown_task(app, flt.get("task"))
    if task:
        found.append(f"{task}: --task takes the full task name, as the task column shows it")
    name = flt.get("schedule")
    if name is not None and not app.list_runs(schedule=name, limit=1):
        names = {s.name for s in app.list_schedules(include_inactive=True)}
        if name not in names:
            close = did_you_mean(name, names)
            found.append(f"unknown schedule {name!r}{close}: rota schedules --all lists the schedule names")
    return found


def nothing_matched(what: str, flt: dict[str, Any]) -> str:
    """The line an empty listing prints instead of a bare header: `no runs match --task x`."""
    given = [
        f"--{k} {shlex.quote(str(v))}" if v is not True else f"--{k}" for k, v in flt.items() if v not in (None, False)
    ]
    return f"no {what} match {' '.join(given)}" if given else f"no {what} yet"


# -- rota explain --jitter ------------------------------------------------------------------


def jitter_options(fn: F) -> F:
    fn = click.option(
        "--name",
        default=None,
        help="With --jitter: the schedule's name, to show the very offsets that schedule gets.",
    )(fn)
    return click.option(
        "--jitter",
        type=Duration(),
        default=None,
        help="Show each tick's stable jitter offset in [0, JITTER) (hashed from --name and the tick; "
        "without --name, from the expression and zone).",
    )(fn)


def jitter_heading(cron: str, tz: str, jitter: timedelta | None, name: str | None) -> str:
    if jitter is None:
        return ""
    seed = f"schedule name {name!r}" if name is not None else f"{f'{cron} {tz}'!r} (pass --name for a schedule's own)"
    return f" (jitter {duration(jitter)}: offsets hashed from {seed} and each tick)"


def offset_text(fire: timing.FireTime) -> str:
    if fire.offset is None:
        return ""
    return f"  +{fire.offset.total_seconds():.3f}s -> due {iso(fire.due)}"


def offset_json(fire: timing.FireTime) -> dict[str, Any]:
    if fire.offset is None:
        return {}
    return {"offset_seconds": fire.offset.total_seconds(), "due": iso(fire.due)}
