"""Summaries, the Markdown tables, the target checks and the JSON document."""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.core import Summary, System, Table, summarise
from bench.runner import Outcome

BACKENDS = {"postgres": "PostgreSQL", "sqlite": "SQLite", "mysql": "MySQL/MariaDB"}
Medians = dict[str, dict[str, float]]  # system key -> metric -> median


def summaries(outcome: Outcome) -> dict[str, Summary]:
    runs = outcome.metrics()
    names = sorted({k for m in runs for k, v in m.items() if isinstance(v, int | float)})
    out = {}
    for name in names:
        values = [float(m[name]) for m in runs if name in m and not math.isnan(float(m[name]))]
        if values:
            out[name] = summarise(values)
    return out


def medians(outcomes: Sequence[Outcome]) -> Medians:
    return {o.system.key: {k: s.median for k, s in summaries(o).items()} for o in outcomes}


def fmt(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _ratio(value: float | None, ref: float | None) -> str:
    if value is None or not ref:
        return "-"
    return f"{value / ref:.2f}x"


def _ref(table: Table, refs: dict[str, str], system: System, meds: Medians) -> float | None:
    key = refs.get(system.backend)
    return meds.get(key, {}).get(table.primary) if key else None


def _row(table: Table, outcome: Outcome, meds: Medians) -> list[str]:
    system, stats = outcome.system, summaries(outcome)
    main = stats.get(table.primary)
    value = main.median if main else None
    if main:
        figure, spread = fmt(main.median), f"{fmt(main.low)}-{fmt(main.high)} (n={main.n})"
    else:
        figure, spread = "failed" if outcome.errors() else "-", "-"
    extras = [fmt(stats[m].median) if m in stats else "-" for m, _ in table.extras]
    row = [system.label, BACKENDS[system.backend], figure, spread, *extras]
    if table.peer:
        row.append(_ratio(value, _ref(table, table.peer, system, meds)))
    if table.ceiling:
        row.append(_ratio(value, _ref(table, table.ceiling, system, meds)))
    return row


def _header(table: Table) -> list[str]:
    cols = ["System", "Backend", table.unit, "spread (min-max)", *(h for _, h in table.extras)]
    if table.peer:
        cols.append(table.peer_label)
    if table.ceiling:
        cols.append("vs ceiling")
    return cols


def _markdown_rows(rows: list[list[str]], text_columns: int = 1) -> list[str]:
    """A Markdown table; columns after the first `text_columns` are right-aligned."""
    align = ["---"] * text_columns + ["--:"] * (len(rows[0]) - text_columns)
    out = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return out


def _notes(table: Table, outcomes: Sequence[Outcome], jobs: int) -> list[str]:
    notes = []
    refs = [f"{BACKENDS[b]} peer = {k}" for b, k in table.peer.items()]
    refs += [f"{BACKENDS[b]} ceiling = {k}" for b, k in table.ceiling.items()]
    if refs:
        notes.append("Ratios: median / median of the reference (" + "; ".join(refs) + ").")
    for o in outcomes:
        s = o.system
        n = f" (N={min(jobs, s.max_jobs):,})" if s.max_jobs and table.key == "W1.drain" else ""
        if s.max_runs:
            n += f" (at most {s.max_runs} run{'s' if s.max_runs > 1 else ''})"
        if s.settings or n:
            notes.append(f"`{s.key}`: {s.settings}{n}".strip())
        for err in o.errors()[:1]:
            notes.append(f"`{s.key}` failed: {err.splitlines()[0]}")
    return [f"- {n}" for n in notes]


def table_markdown(table: Table, outcomes: Sequence[Outcome], meds: Medians, jobs: int) -> str:
    size = f", N={jobs:,}" if table.key == "W1.drain" else ""
    lines = [f"### {table.title} ({table.unit}{size})", ""]
    if table.definition:
        lines += [f"Measured: {table.definition}.", ""]
    rows = [_header(table)] + [_row(table, o, meds) for o in outcomes]
    lines += _markdown_rows(rows, text_columns=2)
    notes = _notes(table, outcomes, jobs)
    return "\n".join(lines + (["", *notes] if notes else []))


def background_line(outcomes: Sequence[Outcome], threshold: float) -> str:
    """How busy the machine was (with other work) just before the runs started."""
    busy = [r["background_cpu_pct"] for o in outcomes for r in o.runs if "background_cpu_pct" in r]
    busy = [b for b in busy if not math.isnan(b)]
    if not busy:
        return ""
    above = sum(1 for b in busy if b > threshold)
    return (
        f"CPU busy with other work just before each run: median {statistics.median(busy):.0f} %, "
        f"max {max(busy):.0f} % of all CPUs; {above} of {len(busy)} runs started above "
        f"{threshold:.0f} % (after waiting for calm)."
    )


# --- targets (issues 5, 12 and 42) -----------------------------------------------------------


@dataclass(frozen=True)
class Target:
    text: str
    measure: Callable[[Medians], float | None]
    goal: Callable[[float], bool]
    unit: str = ""
    issue: str = "5"


def _get(meds: Medians, key: str, metric: str) -> float | None:
    return meds.get(key, {}).get(metric)


def _ratio_of(a: str, b: str, metric: str = "rate") -> Callable[[Medians], float | None]:
    def measure(meds: Medians) -> float | None:
        x, y = _get(meds, a, metric), _get(meds, b, metric)
        return x / y if x is not None and y else None

    return measure


def _value(key: str, metric: str) -> Callable[[Medians], float | None]:
    return lambda meds: _get(meds, key, metric)


TARGETS: tuple[Target, ...] = (
    Target(
        "PG drain, 1 worker ≥ 2x PgQueuer (batch_size=10, its default)",
        _ratio_of("rota-pg-drain-1w", "pgqueuer-b10"),
        lambda r: r >= 2.0,
        "x",
    ),
    Target(
        "PG drain, 1 worker ≥ 2x PgQueuer (batch_size=100)",
        _ratio_of("rota-pg-drain-1w", "pgqueuer-b100"),
        lambda r: r >= 2.0,
        "x",
    ),
    Target(
        "PG drain, 1 worker ≥ 40 % of the raw batch loop",
        _ratio_of("rota-pg-drain-1w", "raw-psycopg-100"),
        lambda r: r >= 0.4,
        "x",
    ),
    Target(
        "SQLite drain, 1 worker ≥ 3x huey on SQLite",
        _ratio_of("rota-sqlite-drain-1w", "huey-sqlite"),
        lambda r: r >= 3.0,
        "x",
    ),
    Target(
        "PG bulk enqueue ≥ 50,000 runs/s",
        _value("rota-pg-enqueue-bulk", "rate"),
        lambda v: v >= 50_000,
        " runs/s",
    ),
    Target("PG pickup p50 ≤ 5 ms", _value("rota-pg-pickup", "p50_ms"), lambda v: v <= 5, " ms"),
    Target("PG pickup p99 ≤ 25 ms", _value("rota-pg-pickup", "p99_ms"), lambda v: v <= 25, " ms"),
    Target(
        "PG tick lateness p99 ≤ 20 ms",
        _value("rota-pg-lateness", "p99_ms"),
        lambda v: v <= 20,
        " ms",
    ),
    Target(
        "SQLite tick lateness p99 ≤ 20 ms",
        _value("rota-sqlite-lateness", "p99_ms"),
        lambda v: v <= 20,
        " ms",
    ),
    Target("PG idle worker ≤ 1 % of a core", _value("rota-pg-idle", "cpu_pct"), lambda v: v <= 1),
    Target(
        "SQLite idle worker ≤ 1 % of a core",
        _value("rota-sqlite-idle", "cpu_pct"),
        lambda v: v <= 1,
    ),
    Target(
        "PG backlog drain ≥ 80 % of small-table rate",
        _value("rota-pg-backlog", "ratio_pct"),
        lambda v: v >= 80,
        " %",
    ),
    Target(
        "PG backlog drain ≥ 80 % of small-table rate, table vacuumed first",
        _value("rota-pg-backlog-vacuumed", "ratio_pct"),
        lambda v: v >= 80,
        " %",
    ),
    Target(
        "SQLite backlog drain ≥ 80 % of small-table rate",
        _value("rota-sqlite-backlog", "ratio_pct"),
        lambda v: v >= 80,
        " %",
    ),
    Target(
        "PG rescue after kill -9 ≤ lease + poll (31 s)",
        _value("rota-pg-rescue", "rescue_s"),
        lambda v: v <= 31,
        " s",
    ),
    Target(
        "SQLite rescue after kill -9 ≤ lease + poll (31 s)",
        _value("rota-sqlite-rescue", "rescue_s"),
        lambda v: v <= 31,
        " s",
    ),
)


def _at_least(goal: float) -> Callable[[float], bool]:
    return lambda value: value >= goal


def _issue12() -> tuple[Target, ...]:
    """Issue 12's targets that the bench measures (delayed-run lateness is not measured)."""
    out = [
        Target(t, _ratio_of(a, b), _at_least(goal), "x", "12")
        for t, a, b, goal in (
            ("W7 PG: rota worker defaults ≥ 2x PgQueuer defaults", "rota-pg-w7-default", "pgqueuer-w7-default", 2.0),
            ("W7 SQLite: rota worker defaults ≥ 2x huey defaults", "rota-sqlite-w7-default", "huey-w7-default", 2.0),
            ("W7 PG: rota -c 100 (def) ≥ 0.7x the inline loop", "rota-pg-w7-c100", "raw-psycopg-w7", 0.7),
            ("W7 SQLite: rota -c 100 (def) ≥ 0.7x the inline loop", "rota-sqlite-w7-c100", "raw-sqlite-w7", 0.7),
            ("W1 PG: rota no-op drain ≥ 0.9x the raw batch loop", "rota-pg-drain-1w", "raw-psycopg-100", 0.9),
            ("W1 SQLite: rota no-op drain ≥ 0.9x the raw batch loop", "rota-sqlite-drain-1w", "raw-sqlite-full", 0.9),
        )
    ]
    out += [
        Target(t, _value(key, "db_us_per_run"), lambda v: v <= 20, " µs", "12")
        for t, key in (
            ("W1 PG: PostgreSQL CPU per run ≤ 20 µs", "rota-pg-drain-1w"),
            ("W7 PG: PostgreSQL CPU per run ≤ 20 µs (defaults)", "rota-pg-w7-default"),
        )
    ]
    out += [
        Target(
            f"W5 {b}: backlog drain ≥ 90 % of small-table rate", _value(k, "ratio_pct"), lambda v: v >= 90, " %", "12"
        )
        for b, k in (("PG", "rota-pg-backlog"), ("SQLite", "rota-sqlite-backlog"))
    ]
    for b, short in (("PG", "pg"), ("SQLite", "sqlite")):
        key = f"rota-{short}-lateness"
        out.append(Target(f"W3 {b}: tick lateness p50 ≤ 2 ms", _value(key, "p50_ms"), lambda v: v <= 2, " ms", "12"))
        out.append(Target(f"W3 {b}: tick lateness p99 ≤ 5 ms", _value(key, "p99_ms"), lambda v: v <= 5, " ms", "12"))
        key = f"rota-{short}-delayed"
        out.append(Target(f"W3 {b}: delayed lateness p50 ≤ 3 ms", _value(key, "p50_ms"), lambda v: v <= 3, " ms", "12"))
        out.append(
            Target(f"W3 {b}: delayed lateness p99 ≤ 10 ms", _value(key, "p99_ms"), lambda v: v <= 10, " ms", "12")
        )
        for state in ("idle", "schedules", "backlog"):
            key = f"rota-{short}-memory-{state}"
            text = f"W9 {b}: worker peak RSS ({state}) ≤ 80 MiB"
            out.append(Target(text, _value(key, "peak_rss_mb"), lambda v: v <= 80, " MiB", "12"))
    return tuple(out)


def _issue42() -> tuple[Target, ...]:
    """Issue 42's targets: the MariaDB store beside PostgreSQL's on the same machine."""
    out = []
    for what, suffix in (("W1 drain, 1 worker", "drain-1w"), ("W1 drain, 2 workers", "drain-2w"),
                         ("W7 defaults, 1 worker", "w7-default"), ("W7 defaults, 2 workers", "w7-default-2w")):  # fmt: skip
        measure = _ratio_of(f"rota-mysql-{suffix}", f"rota-pg-{suffix}")
        out.append(Target(f"MariaDB {what} ≥ 0.7x PostgreSQL's", measure, _at_least(0.7), "x", "42"))
    for n, suffix in ((1, ""), (2, "-2w")):
        pickup, ticks = _value(f"rota-mysql-pickup{suffix}", "p95_ms"), _value(f"rota-mysql-lateness{suffix}", "p99_ms")
        out.append(
            Target(f"MariaDB pickup p95 ≤ 50 ms ({n} worker(s), no NOTIFY)", pickup, lambda v: v <= 50, " ms", "42")
        )
        out.append(Target(f"MariaDB tick lateness p99 ≤ 10 ms ({n} worker(s))", ticks, lambda v: v <= 10, " ms", "42"))
    return tuple(out)


TARGETS = TARGETS + _issue12() + _issue42()


def target_rows(meds: Medians) -> list[dict[str, Any]]:
    rows = []
    for t in TARGETS:
        value = t.measure(meds)
        if value is not None:
            rows.append({"issue": t.issue, "target": t.text, "measured": value, "unit": t.unit, "met": t.goal(value)})
    return rows


def targets_markdown(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    lines = ["### Targets (issues 5, 12 and 42, medians of this run)", ""]
    table = [["Issue", "Target", "Measured", "Met"]]
    table += [
        [r["issue"], r["target"], f"{fmt(r['measured'])}{r['unit']}", "yes" if r["met"] else "**no**"] for r in rows
    ]
    return "\n".join(lines + _markdown_rows(table, text_columns=2))


# --- documents -------------------------------------------------------------------------


def markdown(tables: Sequence[Table], outcomes: Sequence[Outcome], header: list[str], jobs: int) -> str:
    meds = medians(outcomes)
    parts = ["\n".join(header)]
    for table in tables:
        group = [o for o in outcomes if o.system.table == table.key and not o.skipped]
        if group:
            parts.append(table_markdown(table, group, meds, jobs))
    skipped: dict[str, list[str]] = {}
    for o in outcomes:
        if o.skipped:
            skipped.setdefault(o.skipped, []).append(o.system.key)
    if skipped:
        lines = ["Not run:"] + [f"- {len(k)} system(s) ({', '.join(k)}): {r}" for r, k in skipped.items()]
        parts.append("\n".join(lines))
    targets = targets_markdown(target_rows(meds))
    if targets:
        parts.append(targets)
    return "\n\n".join(parts) + "\n"


def document(meta: dict[str, Any], tables: Sequence[Table], outcomes: Sequence[Outcome]) -> dict[str, Any]:
    systems = []
    for o in outcomes:
        s = o.system
        systems.append(
            {
                "key": s.key,
                "table": s.table,
                "label": s.label,
                "backend": s.backend,
                "kind": s.kind,
                "func": s.func,
                "params": s.params,
                "settings": s.settings,
                "max_jobs": s.max_jobs,
                "max_runs": s.max_runs,
                "skipped": o.skipped,
                "runs": o.runs,
                "summary": {k: asdict(v) for k, v in summaries(o).items()},
            }
        )
    return {
        "meta": meta,
        "tables": [asdict(t) for t in tables],
        "systems": systems,
        "targets": target_rows(medians(outcomes)),
    }


def write_json(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    os.replace(tmp, path)
