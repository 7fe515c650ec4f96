"""The chaos matrix (issue 45): each scenario against a steady workload of fixed-rate
producers, on a PostgreSQL cluster of the cell's own (never the shared server).

    python -m bench.chaos                          # every scenario (about 10 minutes)
    python -m bench.chaos --only kill9,terminate   # some of them
    python -m bench.chaos --list

Per scenario: recovered or not, recovery time to the baseline rate, runs lost, runs executed
twice, p95 pickup before and after; a markdown table goes to bench/results/chaos-<date>.md
(the columns are explained under it). Needs root for the partition (network namespaces) and
the `postgres` user with the machine's PostgreSQL binaries; PgBouncer for its cell.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
import tempfile
import time
import traceback
from pathlib import Path

from .cell import run_cell
from .measure import Cell
from .report import markdown, meets
from .rig import Settings
from .scenarios import BY_KEY, SCENARIOS

RESULTS = Path(__file__).resolve().parent.parent / "results"


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n\n")[0])
    d = Settings()
    p.add_argument("--only", help="comma-separated scenario keys (see --list)")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--rate", type=float, default=d.rate, help=f"runs enqueued a second (default {d.rate:g})")
    p.add_argument("--lease", type=float, default=d.lease, help=f"the workers' lease, s (default {d.lease:g})")
    p.add_argument("--baseline", type=float, default=d.baseline, help=f"baseline phase, s (default {d.baseline:g})")
    p.add_argument("--fault", type=float, default=d.fault, help=f"sustained faults' length, s (default {d.fault:g})")
    p.add_argument("--recovery", type=float, default=d.recovery, help=f"recovery phase, s (default {d.recovery:g})")
    p.add_argument("--out", type=Path, help="markdown file (default bench/results/chaos-<date>.md)")
    p.add_argument("--keep", type=Path, help="keep each cell's worker logs, execution log and late runs here")
    return p.parse_args(argv)


def settings_of(args: argparse.Namespace) -> Settings:
    return Settings(rate=args.rate, lease=args.lease, baseline=args.baseline, fault=args.fault,
                    recovery=args.recovery)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.list:
        for s in SCENARIOS:
            print(f"{s.key:<10} {s.title}")
        return 0
    keys = args.only.split(",") if args.only else [s.key for s in SCENARIOS]
    unknown = [k for k in keys if k not in BY_KEY]
    if unknown:
        print(f"unknown scenario {', '.join(unknown)}; valid: {', '.join(BY_KEY)}", file=sys.stderr)
        return 2
    settings = settings_of(args)
    cells: list[Cell] = []
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="rota-chaos-") as tmp:
        for key in keys:
            loads.append(os.getloadavg()[0])
            cell = safe_cell(key, settings, (args.keep or Path(tmp)) / key)
            cells.append(cell)
            print(f"{key:<10} recovered={cell.recovered} recovery={cell.recovery} lost={cell.lost} "
                  f"twice={cell.twice} beyond={cell.beyond} {cell.note}", flush=True)  # fmt: skip
    load = f"2-core machine shared with other work: 1-min load {min(loads):.1f}-{max(loads):.1f} at the cells' starts"
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m bench.chaos", shlex.join(given)]).strip()
    out = args.out or RESULTS / f"chaos-{time.strftime('%Y-%m-%d', time.gmtime())}.md"
    out.write_text(markdown(cells, settings, command, load))
    print(f"wrote {out}")
    return 0 if all(meets(c, settings.lease) for c in cells) else 1


def safe_cell(key: str, settings: Settings, folder: Path) -> Cell:
    """The cell's figures; a cell that could not run is a row saying why."""
    try:
        return run_cell(BY_KEY[key], settings, folder)
    except Exception as exc:  # one broken cell must not hide the others
        traceback.print_exc()
        nan = math.nan
        return Cell(BY_KEY[key].title, False, None, 0, 0, 0, nan, nan, nan, 0, 0,
                    note=f"did not run: {type(exc).__name__}: {str(exc).splitlines()[0][:150]}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
