"""Commands that read the database: migrate, schedules, runs, run, workers, locks, status,
and explain (which reads nothing)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import click
from rich.console import Console

from .. import config, timing, undeclared
from ..app import App
from ..models import STATUSES, Run, ScheduleInfo, WorkerInfo, iso
from .base import (
    RotaGroup,
    RunIdCommand,
    Whole,
    check_database,
    check_queue,
    database_app,
    database_line,
    database_source,
    find_run,
    handle_errors,
    json_option,
    main,
    print_json,
    utc_option,
)
from .display import Column, clean, duration, line, table, when
from .flow import jitter_heading, jitter_options, nothing_matched, offset_json, offset_text, unknown_names

MAX_EXPLAIN = 1000
MAX_LIMIT = 10000


@main.command()
@click.option("--dry-run", is_flag=True, help="Only list what would be applied.")
@json_option
@click.pass_context
@handle_errors
def migrate(ctx: click.Context, dry_run: bool, as_json: bool) -> None:
    """Apply pending schema migrations."""
    app = database_app(ctx, check=False)
    applied = app.migrate(dry_run=dry_run)
    current, latest = app._store.schema_version()
    if as_json:
        print_json({"applied": applied, "dry_run": dry_run, "version": current, "latest": latest})
        return
    verb = "would apply" if dry_run else "applied"
    click.echo(f"{verb}: {', '.join(applied)}" if applied else f"schema is up to date (version {current} of {latest})")


def _now() -> datetime:
    return datetime.now(UTC)


def _times(utc: bool, *headers: str) -> list[str]:
    return [f"{h} (UTC)" if utc else h for h in headers]


def _header(app: App, utc: bool, source: str | None = None) -> None:
    """The line above a table: the database (or `source`) it read and the zone of its
    absolute times."""
    here = datetime.now().astimezone()
    offset = here.strftime("%z")
    zone = "UTC" if utc else f"local, {here.tzname()} (UTC{offset[:3]}:{offset[3:]})"
    database, times = source or database_line(app), f"times: {zone}"
    if len(f"{database}; {times}") <= Console().width:
        line(f"{database}; {times}")
    else:  # too long for one line: the database whole on its own line (cut only if it alone is)
        line(database)
        line(times)


SCHEDULE_COLUMNS = (
    ("name", 100),
    ("task", 50),
    ("when", 85),
    ("tz", 30),
    ("overlap", 20),
    ("state", 80),
    ("next run", 90),
    ("last run", 60),
    ("last", 70),
    ("runs/ok/fail/skip", 40),
)


def _schedule_row(s: ScheduleInfo, now: datetime, utc: bool) -> tuple[Any, ...]:
    every = f"every {duration(s.every)}" if s.every is not None else None
    state = "paused" if s.paused else ("active" if s.active else "removed")
    if s.plan_error is not None:
        state = f"{state}, cannot plan!"
    if s.corrupt:
        state = f"{state}, corrupt: {', '.join(s.corrupt)}"
    if s.high_frequency:
        state = f"{state}, high frequency"
    counts = f"{s.run_count}/{s.success_count}/{s.failure_count}/{s.skip_count}"
    next_run = "paused" if s.paused else when(s.next_run_at, now, utc=utc)  # resume plans afresh
    last_run = when(s.last_run_at, now, utc=utc)
    row = (s.name, s.task, s.cron or every, s.tz, s.overlap, state, next_run, last_run, s.last_status, counts)
    return (*row, s.plan_error or (f"damaged: {s.damage}" if s.damage else None))


@main.group(cls=RotaGroup, invoke_without_command=True)
@json_option
@utc_option
@click.option("--all", "include_inactive", is_flag=True, help="Include removed (inactive) schedules.")
@click.pass_context
@handle_errors
def schedules(ctx: click.Context, as_json: bool, utc: bool, include_inactive: bool) -> None:
    """List schedules with next/last run and counters (add, update, remove: change them)."""
    if ctx.invoked_subcommand is not None:
        return
    app = database_app(ctx)
    items = app.list_schedules(include_inactive=include_inactive)
    if as_json:
        print_json([s.to_json() for s in items])
        return
    _header(app, utc)
    if not items:
        line("no schedules" if include_inactive else "no schedules (--all lists the removed ones too)")
        return
    now = _now()
    headers = [h for h, _ in SCHEDULE_COLUMNS[:6]] + _times(utc, "next run", "last run") + ["last", "runs/ok/fail/skip"]
    columns = [Column(h, keep) for h, (_, keep) in zip(headers, SCHEDULE_COLUMNS, strict=True)]
    rows = [_schedule_row(s, now, utc) for s in items]
    if any(s.plan_error is not None or s.damage for s in items):  # the error, cut to fit (never wrapped)
        columns.append(Column("plan error", 75, flexible=True))
    else:
        rows = [row[:-1] for row in rows]
    table(columns, rows)


RUN_COLUMNS = (
    ("id", 100, False),
    ("task", 95, False),
    ("schedule", 50, False),
    ("status", 90, False),
    ("try", 40, False),
    ("scheduled", 70, False),
    ("started", 30, False),
    ("took", 60, False),
    ("worker", 20, False),
    ("result / error", 80, True),
)


def _run_row(r: Run, now: datetime, utc: bool) -> tuple[Any, ...]:
    status = "corrupt" if r.corrupt else ("held" if r.held else r.status)  # held: claimed, not started
    if r.waiting is not None and not r.corrupt:  # parked (ctx.sleep / ctx.wait_for): what it waits for
        status = f"{status} ({_parked(r.waiting, now, utc)})"
    scheduled, started = when(r.scheduled_for, now, utc=utc), when(r.started_at, now, utc=utc)
    attempt = f"{r.attempt}/{r.max_attempts}"
    took, summary = duration(r.duration), _summary(r, now)
    return (r.id, r.task, r.schedule, status, attempt, scheduled, started, took, r.worker, summary)


def _parked(wait: dict[str, Any], now: datetime, utc: bool) -> str:
    """A parked run's wait in its status: 'parked: signal 'paid'', 'parked: sleep until T' or,
    within the hour, 'parked: sleep, ends in 12 s' (not 'until in 12 s')."""
    if wait["kind"] == "signal":
        return f"parked: signal {wait['signal']!r}"
    until = datetime.fromisoformat(wait["until"]) if wait.get("until") else None
    shown = when(until, now, utc=utc)
    if shown is not None and (shown.startswith("in ") or shown == "now" or shown.endswith(" ago")):
        return f"parked: sleep, ends {shown}"
    return f"parked: sleep until {shown}"


def _summary(run: Run, now: datetime) -> str | None:
    if run.corrupt:
        return run.corrupt_reason
    if run.error:
        return f"{run.error.get('type')}: {run.error.get('message')}"[:200]
    if run.result is not None:
        return json.dumps(run.result)[:200]
    if run.waiting_on:
        return f"waiting for {run.waiting_on} parent run(s) to succeed"
    if run.status == "pending" and run.due_at > run.scheduled_for and run.due_at > now:
        return f"due {when(run.due_at, now)}" + (" (tick + jitter)" if run.schedule and not run.attempt else "")
    return None


@main.command()
@click.option("--status", type=click.Choice(STATUSES), default=None)
@click.option("--task", default=None, help="Only runs of this task (its full name, e.g. myapp.jobs.send).")
@click.option("--schedule", default=None)
@click.option("--queue", default=None)
@click.option(
    "--damaged", is_flag=True, help="Only runs set aside as damaged (failed with DamagedRow: see 'Damaged rows')."
)
@click.option("--limit", type=Whole(1, MAX_LIMIT), default=50, show_default=True)
@json_option
@utc_option
@click.pass_context
@handle_errors
def runs(ctx: click.Context, /, limit: int, as_json: bool, utc: bool, **flt: Any) -> None:
    """List runs, newest first."""
    check_queue(flt["queue"])
    app = database_app(ctx)
    items = app.list_runs(limit=limit, **flt)
    for missing in unknown_names(app, flt) if not items else ():  # warnings: the listing stays as asked
        click.echo(f"warning: {missing}", err=True)
    if as_json:
        print_json([r.to_json() for r in items])
        return
    _header(app, utc)
    if not items:
        line(nothing_matched("runs", flt))
        return
    now = _now()
    headers = [h for h, _, _ in RUN_COLUMNS]
    headers[5:7] = _times(utc, "scheduled", "started")
    columns = [Column(h, keep, flex) for h, (_, keep, flex) in zip(headers, RUN_COLUMNS, strict=True)]
    table(columns, [_run_row(r, now, utc) for r in items])


RUN_FIELDS = (
    *("id", "task", "schedule", "status", "attempt", "max_attempts", "queue", "priority", "key", "args"),
    *("kwargs", "scheduled_for", "started_at", "finished_at", "worker", "token", "result", "corrupt"),
    *("parents", "dependents", "waiting_on"),
    "backfill",  # shown when true (a run App.backfill made for a past tick)
)


@main.command("run", cls=RunIdCommand)
@click.argument("run_id")
@json_option
@click.pass_context
@handle_errors
def run_detail(ctx: click.Context, run_id: str, as_json: bool) -> None:
    """Show one run, with every attempt and its error."""
    app = database_app(ctx)
    run = find_run(app, run_id)
    data = run.to_json() | app.run_links(run.id)
    if as_json:
        print_json(data)
        return
    if run.held:  # claimed by a worker, its handler not started (no attempt counted yet)
        data["status"] = f"{run.status} (held by {run.worker}: not started yet)"
    if run.due_at != run.scheduled_for and not run.is_final:  # a jittered tick: no worker claims it before
        data["scheduled_for"] = f"{data['scheduled_for']} (due {iso(run.due_at)})"
    for field in RUN_FIELDS:
        value = data.get(field)
        if value is not None and value is not False and value != [] and not (field == "waiting_on" and value == 0):
            shown = json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else value
            click.echo(f"{field:>14}: {clean(shown, newlines=False)}")
    if run.error and run.error not in [a.get("error") for a in run.attempts]:  # ended with no attempt saying why
        reason = f"{run.error.get('type')}: {run.error.get('message')}"
        click.echo(f"{'error':>14}: {clean(reason, newlines=False)}")
    for attempt in run.attempts:
        took = _took(attempt.get("started_at"), attempt.get("finished_at"))
        finished = attempt.get("finished_at") or "still running"
        click.echo(
            f"\nattempt {attempt.get('attempt')} on {clean(attempt.get('worker'))}: {attempt.get('status')} "
            f"({attempt.get('started_at') or ('held, no start recorded' if attempt.get('held') else 'not started')}"
            f" .. {finished}{took})"
        )
        error = attempt.get("error")
        if error:
            click.echo(clean(f"  {error.get('type')}: {error.get('message')}"))
            if error.get("traceback"):
                click.echo(clean("  " + str(error["traceback"]).rstrip().replace("\n", "\n  ")))
    _show_durable(run)


def _show_durable(run: Run) -> None:
    """A parked run's wait, the last progress and each saved step (rota.durable)."""
    wait = run.waiting
    if wait is not None and wait["kind"] == "rate":  # over its rate (a resumed parked run, or any)
        key = f" (key {wait['key']!r})" if wait.get("key") else ""
        click.echo(clean(f"\n{'waiting':>14}: rate {wait['rate']!r}{key} full until {wait['until']}"))
    elif wait is not None and wait["kind"] == "undeclared":  # no worker declared its limit or rate
        click.echo(clean(f"\n{'waiting':>14}: {_undeclared(wait)}"))
    elif wait is not None:
        what = f"signal {wait['signal']!r}" if wait["kind"] == "signal" else "sleep"
        click.echo(clean(f"\n{'parked':>14}: {what} until {wait['until']} (since {wait['since']})"))
    if run.progress is not None:
        message = f" {run.progress['message']}" if run.progress["message"] else ""
        fraction = run.progress["fraction"]  # None: its stored value is damaged (rota.quarantine)
        shown = "unreadable" if fraction is None else f"{fraction:.0%}"
        click.echo(clean(f"{'progress':>14}: {shown}{message} (at {run.progress['at']})"))
    if run.steps:
        click.echo("\nsteps:")
    for step in run.steps:
        outcome, took = step["outcome"], _took(step["started_at"], step["finished_at"])
        if outcome == "waiting":  # no end yet; a run that ended while parked never resumes it
            took = ""
            if run.status not in ("pending", "running"):
                outcome = f"not resumed, the run was {run.status}"
        line = f"  {step['seq'] + 1}. {step['name']}: {outcome} (attempt {step['attempt']}, {step['started_at']}{took})"
        if step["error"]:
            line += f": {step['error'].get('type')}: {step['error'].get('message')}"
        click.echo(clean(line, newlines=False))


def _undeclared(wait: dict[str, Any]) -> str:
    """A run's wait for a limit or rate (or both) no worker declared, and how to declare it."""
    pools = [(kind, str(wait[kind])) for kind in ("limit", "rate") if wait.get(kind) is not None]
    named = " and ".join(f"{kind} {name!r}" for kind, name in pools)
    how = "; ".join(undeclared.example(kind, name) for kind, name in pools)
    verb, it = ("is", "it") if len(pools) == 1 else ("are", "them")
    return f"waits for {named}, which {verb} not declared: it starts once a worker that declares {it} runs ({how})"


def _took(started: str | None, finished: str | None) -> str:
    try:
        if started and finished:
            spent = datetime.fromisoformat(finished) - datetime.fromisoformat(started)
            return f", took {duration(spent)}"
    except ValueError:
        pass
    return ""


@main.command()
@json_option
@utc_option
@click.option("--locks-url", default=None, help="Redis URL when locks live in Redis. [env ROTA_LOCKS_URL]")
@click.pass_context
@handle_errors
def locks(ctx: click.Context, as_json: bool, utc: bool, locks_url: str | None) -> None:
    """List named locks: holder, token, expiry."""
    app = database_app(ctx, check=False, locks_url=locks_url)
    if app.locks_url is None:  # locks in the run store: it must exist (Redis is only read)
        check_database(app, database_source(ctx))
    items = app.list_locks()
    if as_json:
        print_json([i.to_json() for i in items])
        return
    _header(app, utc, f"locks: {config.redact_url(app.locks_url)}" if app.locks_url else None)
    now = _now()
    columns = [Column("name", 100), Column("held", 90), Column("owner", 50), Column("token", 40)]
    columns.append(Column(_times(utc, "expires")[0], 80))
    rows = [(i.name, _marked(i.held, i.corrupt), i.owner, i.token, when(i.expires_at, now, utc=utc)) for i in items]
    table(columns, rows)


def _marked(value: Any, corrupt: tuple[str, ...]) -> Any:
    """A cell with the damaged fields of its row (a registry row that does not decode)."""
    return f"{value}, corrupt: {', '.join(corrupt)}" if corrupt else value


@main.command()
@json_option
@utc_option
@click.pass_context
@handle_errors
def workers(ctx: click.Context, as_json: bool, utc: bool) -> None:
    """List workers seen recently."""
    app = database_app(ctx)
    items = app.list_workers()
    if as_json:
        print_json([w.to_json() for w in items])
        return
    _header(app, utc)
    now = _now()
    headers = ["worker", "state", "alive", "concurrency", "stuck", "queues", *_times(utc, "started", "last seen")]
    columns = [Column(h, keep) for h, keep in zip(headers, (100, 90, 80, 50, 60, 40, 30, 70), strict=True)]
    rows = [
        (
            w.id,
            _marked(w.state, w.corrupt),
            "yes" if w.alive else "no",
            w.concurrency,
            w.stuck,
            ",".join(w.queues or ["all"]) if "queues" not in w.corrupt else "?",
            *_two(w, now, utc),
        )
        for w in items
    ]
    table(columns, rows)


def _two(w: WorkerInfo, now: datetime, utc: bool) -> tuple[str | None, str | None]:
    return when(w.started_at, now, utc=utc), when(w.last_seen, now, utc=utc)


@main.command()
@json_option
@click.pass_context
@handle_errors
def status(ctx: click.Context, as_json: bool) -> None:
    """Counts by status, live workers and capacity, schema version."""
    app = database_app(ctx)
    stats = app.stats()
    current, latest = app.store.schema_version()
    stats["schema_version"] = current
    vacuum = getattr(app.store, "vacuum_health", None)  # PostgreSQL only
    health = vacuum() if vacuum is not None else None
    if health is not None:
        stats["vacuum"] = health.as_dict()
    # (paused queues came with schema 21: an older database, not yet migrated, has none)
    stats["paused_queues"] = [q.name for q in app.list_queues() if q.paused] if current >= 21 else []
    if as_json:
        print_json(stats)
        return
    click.echo(f"database: {stats['database']} (schema {current}/{latest})")
    click.echo(f"workers:  {stats['workers']} alive, capacity {stats['capacity']}")
    click.echo("runs:     " + runs_line(stats))
    if health is not None:
        click.echo("vacuum:   " + health.line())
    if stats["paused_queues"]:
        click.echo("paused:   queues " + ", ".join(stats["paused_queues"]) + " (rota queues resume NAME)")


def runs_line(stats: dict[str, Any]) -> str:
    """Counts by status; an estimated figure has a `~` and the line says how it was counted."""
    estimated = set(stats.get("runs_estimated") or ())
    counts = ", ".join(f"{k} {'~' if k in estimated else ''}{v}" for k, v in stats["runs"].items())
    if not estimated:
        return f"{counts} (exact)"
    return f"{counts} (~ estimated from the database's statistics: {', '.join(sorted(estimated))})"


def _after(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        start = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not an ISO time such as 2026-03-29T00:00 or 2026-03-29T00:00:00+01:00", param_hint="--after"
        ) from None
    return start


@main.command()
@click.argument("cron")
@click.option("--tz", default="UTC", show_default=True, help="IANA time zone.")
@click.option("--count", type=Whole(1, MAX_EXPLAIN), default=5, show_default=True)
@click.option(
    "--after", default=None, help="Start after this ISO time (default now; without an offset it is read in --tz)."
)
@jitter_options
@json_option
@handle_errors
def explain(
    cron: str, tz: str, count: int, after: str | None, as_json: bool, jitter: timedelta | None, name: str | None
) -> None:
    """Print the next fire times of CRON, in local time and UTC, with DST notes (and with
    --jitter, each tick's offset: see `rota explain --help`)."""
    times = timing.explain(cron, tz, after=_after(after), count=count, jitter=jitter, name=name)
    if as_json:
        print_json([{"local": t.local.isoformat(), "utc": iso(t.utc.astimezone(UTC)), "note": t.note} | offset_json(t)
                    for t in times])  # fmt: skip
        return
    trigger = timing.make_trigger(cron=cron, tz=tz)
    click.echo(f"{trigger.description}:" + jitter_heading(cron, tz, jitter, name))
    for t in times:
        click.echo(
            f"  {t.local.strftime('%a %Y-%m-%d %H:%M %Z'):<26} {iso(t.utc)}{offset_text(t)}"
            + (f"   # {t.note}" if t.note else "")
        )
