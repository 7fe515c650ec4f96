"""Two versions of rota side by side: the same bench systems, runs alternated between them.

    python -m bench.ab OLD_REF NEW_REF --only rota-pg-drain-1w,rota-pg-w7-default --rounds 3

Each ref (a commit, a branch, or a directory holding a checkout) gets its own checkout under
`--work` (default: a temporary directory; `git clone` of this repository at that ref) with
its own bench venv (`make .venv-bench/.installed`). Round i runs `python -m bench --only
SYSTEMS --runs 1` in the old checkout, then in the new one, so both meet the same drift of
a shared machine; after `--rounds` rounds it prints, per system, each side's median rate
(with the min-max spread, worker and database CPU per run, and how busy the machine was)
and new / old. The raw JSON of every run stays in `--work`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
METRICS = ("rate", "worker_us_per_run", "db_us_per_run")


def checkout(ref: str, work: Path, side: str) -> Path:
    """A checkout of `ref` with its bench venv installed (an existing directory is used as is)."""
    given = Path(ref)
    if given.is_dir():
        target = given
    else:
        target = work / side
        if not target.exists():
            subprocess.run(["git", "clone", "--quiet", str(ROOT), str(target)], check=True)
            subprocess.run(["git", "-C", str(target), "checkout", "--quiet", ref], check=True)
    subprocess.run(["make", "--quiet", ".venv-bench/.installed"], cwd=target, check=True)
    return target


def run_once(target: Path, only: str, out: Path, quiet_wait: float) -> None:
    cmd = [str(target / ".venv-bench" / "bin" / "python"), "-m", "bench", "--only", only, "--runs", "1"]
    cmd += ["--quiet-wait", str(quiet_wait), "--json", str(out)]
    with open(out.with_suffix(".log"), "w") as log:
        subprocess.run(cmd, cwd=target, stdout=log, stderr=subprocess.STDOUT, check=True)


def collect(paths: list[Path]) -> dict[str, list[dict[str, Any]]]:
    """system key -> the metrics of each of its runs (plus the machine's background load)."""
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in paths:
        for system in json.loads(path.read_text())["systems"]:
            for run in system.get("runs", []):
                runs[system["key"]].append({**run["metrics"], "background": run.get("background_cpu_pct")})
    return runs


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def describe(runs: list[dict[str, Any]]) -> str:
    rates = [r["rate"] for r in runs if r.get("rate")]
    if not rates:
        return "no rate"
    parts = [f"{statistics.median(rates):,.0f}/s [{min(rates):,.0f}-{max(rates):,.0f}]"]
    for key, label in (("worker_us_per_run", "worker"), ("db_us_per_run", "db")):
        value = _median(runs, key)
        if value:
            parts.append(f"{label} {value:.0f} µs/run")
    background = _median(runs, "background")
    if background is not None:
        parts.append(f"busy {background:.0f} %")
    return ", ".join(parts)


def report(old: dict[str, list[dict[str, Any]]], new: dict[str, list[dict[str, Any]]]) -> str:
    lines = ["| system | old | new | new / old |", "|---|---|---|--:|"]
    for key in sorted(set(old) | set(new)):
        a, b = _median(old.get(key, []), "rate"), _median(new.get(key, []), "rate")
        ratio = f"{b / a:.2f}x" if a and b else "-"
        lines.append(f"| {key} | {describe(old.get(key, []))} | {describe(new.get(key, []))} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n")[0])
    p.add_argument("old", help="a git ref or a checkout directory")
    p.add_argument("new", help="a git ref or a checkout directory")
    p.add_argument("--only", required=True, help="bench systems or workloads (as python -m bench --only)")
    p.add_argument("--rounds", type=int, default=3, help="alternated rounds (default 3: medians of 3)")
    p.add_argument("--quiet-wait", type=float, default=20.0, help="passed to python -m bench (default 20 s)")
    p.add_argument("--work", type=Path, help="where the checkouts and results go (default: a temp dir)")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds {args.rounds}: must be at least 1")
    work = args.work or Path(tempfile.mkdtemp(prefix="rota-ab-"))
    work.mkdir(parents=True, exist_ok=True)
    sides = {"old": checkout(args.old, work, "old"), "new": checkout(args.new, work, "new")}
    results: dict[str, list[Path]] = {"old": [], "new": []}
    for i in range(1, args.rounds + 1):
        for side, target in sides.items():
            out = work / f"{side}-{i}.json"
            run_once(target, args.only, out, args.quiet_wait)
            results[side].append(out)
            print(f"round {i}/{args.rounds}: {side} done ({out})", file=sys.stderr)
    print(f"old = {args.old}, new = {args.new}; {args.rounds} alternated rounds; raw runs in {work}\n")
    print(report(collect(results["old"]), collect(results["new"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
