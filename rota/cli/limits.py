"""`rota limits`: each concurrency limit and rate limit the workers stored, with its running
and waiting runs (rota.Limit, rota.Rate; see docs/concepts/flow-control.md)."""

from __future__ import annotations

from typing import Any

import click

from .. import undeclared
from ..errors import ConfigurationError, DatabaseError
from ..stores.flow_damage import damaged_specs
from .base import database_app, database_line, handle_errors, json_option, main, print_json
from .display import Column, line, table


@main.command()
@json_option
@click.pass_context
@handle_errors
def limits(ctx: click.Context, as_json: bool) -> None:
    """List concurrency limits and rate limits: size, running, starts in the window, waiting."""
    app = database_app(ctx)
    store: Any = app.store
    try:
        limit_rows, rate_rows, unresolved = store.list_limits(), store.list_rates(), store.count_unresolved()
        unknown = store.undeclared_flow()
        damaged = damaged_specs(store)
    except (AttributeError, DatabaseError) as exc:
        raise ConfigurationError(
            f"this database has no flow-control tables yet ({exc}); run `rota migrate` (a worker does at start)"
        ) from None
    if as_json:
        print_json({"limits": [i.to_json() for i in limit_rows], "rates": [r.to_json() for r in rate_rows],
                    "unresolved": unresolved, "damaged_specs": damaged,
                    **undeclared.to_json(unknown)})  # fmt: skip
        return
    line(database_line(app))
    for spec in damaged:
        click.echo(f"task {spec['task']!r}: {spec['reason']} (a worker that declares it stores it again)")
    if unresolved:
        click.echo(
            f"{unresolved} run(s) wait for a worker that declares their task to compute their limit key "
            "(a callable by=, made where the task is not declared): start one"
        )
    declared = {"limit": [i.name for i in limit_rows], "rate": [r.name for r in rate_rows]}
    for kind, name, waiting in unknown:  # a typo in a client's name=, or no worker declared it yet
        click.echo(undeclared.describe(kind, name, waiting, declared[kind]))
    if not limit_rows and not rate_rows:
        click.echo("no limits or rates stored (a worker stores its tasks' limit= and rate= when it starts)")
        return
    if limit_rows:
        # max is per key (a `by=` limit: each key has its own slots); running and waiting count every key
        columns = [Column("limit", 100, True), Column("max per key", 90), Column("running (all keys)", 90)]
        columns += [Column("waiting", 90), Column("keys", 50)]
        table(columns, [(_named(i), i.max, i.running, i.waiting, i.keys) for i in limit_rows])
    if rate_rows:
        columns = [Column("rate", 100, True), Column("max per key", 90), Column("per", 90)]
        columns.append(Column("in window (all keys)", 90))
        columns += [Column("waiting", 90), Column("keys", 50)]
        table(columns, [(_named(r), r.max, f"{r.per:g}s", r.started, r.waiting, r.keys) for r in rate_rows])


def _named(row: Any) -> str:
    """A limit's or rate's name, and what is damaged in its stored row (its runs wait)."""
    corrupt = getattr(row, "corrupt", ())
    return f"{row.name} (corrupt: {', '.join(corrupt)}; its runs wait)" if corrupt else str(row.name)
