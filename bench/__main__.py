"""rota's benchmarks, side by side with Python peers: `python -m bench --help`.

Examples:
    python -m bench                              every workload, 5 runs each
    python -m bench --only peers --runs 3        the peers and ceilings only
    python -m bench --only W1,W2 --quick         a fast smoke run of two workloads
    python -m bench --list                       what can be selected
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench import machine, registry, report, runner
from bench.core import DEFAULT_MYSQL_URL
from bench.dbs import DEFAULT_PG_URL

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "latest.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    p.add_argument(
        "--only",
        help="comma-separated: workloads (W1..W9), tables (W1.drain), 'peers', 'rota', "
        "'postgres', 'sqlite', 'mysql' or system keys (see --list); default: everything",
    )
    p.add_argument("--runs", type=int, help="runs per system (median and spread); default 5")
    p.add_argument("--quick", action="store_true", help="small sizes, 1 run: a smoke test")
    p.add_argument("--jobs", type=int, help="W1 drain size (default 20,000; quick 2,000)")
    p.add_argument("--real-jobs", type=int, help="W7 drain size (default 10,000; quick 2,000)")
    p.add_argument(
        "--memory-backlog",
        type=int,
        help="W9 runs drained while the worker's memory is watched (default 1,000,000; quick 20,000)",
    )
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"default {DEFAULT_JSON}")
    p.add_argument("--markdown", type=Path, help="also write the Markdown report here")
    p.add_argument(
        "--pg-url",
        default=os.environ.get("BENCH_PG_URL", DEFAULT_PG_URL),
        help="admin URL of the PostgreSQL server; databases bench_* are created and dropped (env BENCH_PG_URL)",
    )
    p.add_argument(
        "--mysql-url",
        default=os.environ.get("BENCH_MYSQL_URL", os.environ.get("ROTA_BENCH_MYSQL_URL", DEFAULT_MYSQL_URL)),
        help="admin URL of the MySQL/MariaDB server for the rota-mysql-* systems; databases bench_* are "
        "created and dropped (env BENCH_MYSQL_URL or ROTA_BENCH_MYSQL_URL)",
    )
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=60.0,
        help="before each run, wait up to this many seconds for the machine to be calm (default 60)",
    )
    p.add_argument(
        "--quiet-threshold",
        type=float,
        default=20.0,
        help="calm = at most this %% of all CPUs busy with other work (default 20)",
    )
    p.add_argument("--keep", action="store_true", help="keep the work dir (logs, SQLite files)")
    p.add_argument("--list", action="store_true", help="list the systems and exit")
    return p.parse_args(argv)


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def list_systems() -> None:
    for table in registry.TABLES:
        print(f"{table.key}: {table.title}")
        for s in registry.all_systems():
            if s.table == table.key:
                print(f"    {s.key:<28} {s.kind:<8} {s.label}")


def header(meta: dict[str, object], config: runner.Config, elapsed: float) -> list[str]:
    sizes = config.sizes
    return [
        "## Benchmark results",
        "",
        f"Machine: {machine.one_line(meta['machine'])}  ",  # type: ignore[arg-type]
        f"Command: `{meta['command']}`  ",
        f"Each figure is the median of {config.runs} run(s) (fewer where noted), each in fresh processes and a "
        f"fresh database; spread = min-max over the runs. Sizes: drain N={sizes.jobs:,}, "
        f"pickup samples={sizes.samples}, ticks={sizes.ticks}, idle window="
        f"{sizes.idle_seconds:.0f}s, backlog={sizes.backlog:,}, W7 N={sizes.real_jobs:,}, "
        f"W9 backlog={sizes.memory_backlog:,}. Wall time {elapsed:.0f}s. "
        f"Load average (1 min) before/after: {meta['load_average_before'][0]} / "  # type: ignore[index]
        f"{meta['machine']['load_average'][0]}.",  # type: ignore[index]
    ]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        list_systems()
        return 0
    systems = registry.select(registry.all_systems(), args.only)
    if not systems:
        say(f"nothing matches --only {args.only!r}; see --list")
        return 2
    skipped = runner.unavailable(systems, args.pg_url, args.mysql_url)
    for reason in sorted(set(skipped.values())):
        n = sum(1 for r in skipped.values() if r == reason)
        say(f"skipping {n} system(s): {reason}")

    load_before = machine.load_average()
    if load_before[0] > 0.5:
        say(f"note: load average {load_before[0]} before starting: other work may skew the figures")
    sizes = (runner.Sizes.quick if args.quick else runner.Sizes.full)(args.jobs, args.real_jobs, args.memory_backlog)
    runs = args.runs or (1 if args.quick else 5)
    workdir = Path(tempfile.mkdtemp(prefix="rota-bench-"))
    config = runner.Config(
        runs, args.quick, args.pg_url, workdir, sizes, args.quiet_wait, args.quiet_threshold, args.mysql_url
    )
    tables = {t.key: t for t in registry.TABLES}
    started = time.monotonic()
    try:
        outcomes = runner.run_all(
            [s for s in systems if s.key not in skipped],
            config,
            lambda s: tables[s.table].primary,
            say,
        )
    finally:
        if args.keep:
            say(f"work dir kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    outcomes += [runner.Outcome(s, skipped=skipped[s.key]) for s in systems if s.key in skipped]
    outcomes.sort(key=lambda o: systems.index(o.system))

    meta = {
        "machine": machine.describe(args.pg_url, args.mysql_url),
        "load_average_before": load_before,
        "command": "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "runs": runs,
        "quick": args.quick,
        "sizes": vars(sizes),
    }
    lines = header(meta, config, time.monotonic() - started)
    background = report.background_line(outcomes, config.quiet_threshold)
    if background:
        lines[-1] += "  "
        lines.append(background)
    text = report.markdown(registry.TABLES, outcomes, lines, sizes.jobs)
    print(text)
    report.write_json(args.json, {**report.document(meta, registry.TABLES, outcomes), "markdown": text})
    say(f"JSON written to {args.json}")
    if args.markdown:
        args.markdown.write_text(text)
    failed = any(o.errors() for o in outcomes)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
