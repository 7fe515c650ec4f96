"""Issue 19, target 2 on SQLite: prune statements aimed at different time targets, side by side.

Fills a SQLite history of SIZE final runs (bench.history's fill), starts bench.history's probe
worker (a task enqueued 50 times a second; its start lateness is start - enqueue), then prunes
SEGMENT old succeeded runs per target in turn, ROUNDS times (alternated, so the table shrinks
evenly under each), with the maintenance task's batches and pauses (PruneBatch). Per target:
the prune statements' p50 / p99 / max, the prune's rate (pauses included) and the probe's
lateness during each segment.

    .venv/bin/python -m bench.prune_targets [--size 10000000] [--targets 0.005,0.003,0.002]
        [--segment 100000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import rota
from bench import history
from rota.worker.maintenance import PruneBatch


def segment(app: rota.App, target: float, runs: int, after: float) -> tuple[list[float], int, float]:
    """Prune `runs` old succeeded runs aiming at `target`; (statement ms, pruned, cursor)."""
    batch, total, statements = PruneBatch(target=target), 0, []
    while total < runs:
        size, t0 = batch.size, time.perf_counter()
        n, after = app.store.prune_from("succeeded", history.DAY, size, after)
        took = time.perf_counter() - t0
        statements.append(took * 1000)
        total += n
        if n < size:
            break
        batch.took(n, took)
        time.sleep(batch.pause(took))
    return statements, total, after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=10_000_000)
    parser.add_argument("--targets", default="0.005,0.003,0.002", help="seconds, comma-separated")
    parser.add_argument("--segment", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    targets = [float(t) for t in args.targets.split(",")]
    res: dict[float, dict[str, Any]] = {t: {"st": [], "probe": [], "runs": 0, "secs": 0.0} for t in targets}
    with history.database("sqlite", args.size, "") as url:
        app = rota.App(url, retention=None)
        app.prepare()
        history.fill(app, url, args.size)
        with tempfile.TemporaryDirectory() as tmp:
            probe = history.ProbeWorker(url, Path(tmp))
            probe.start()
            time.sleep(12.0)
            after = 0.0
            for _ in range(args.rounds):
                for target in targets:
                    lo = time.time()
                    statements, pruned, after = segment(app, target, args.segment, after)
                    hi = time.time()
                    time.sleep(0.5)  # the probe's last runs
                    r = res[target]
                    r["st"] += statements
                    r["probe"].append(probe.lateness(lo, hi))
                    r["runs"], r["secs"] = r["runs"] + pruned, r["secs"] + hi - lo
            probe.close()
        app.close()
    for target, r in res.items():
        st = sorted(r["st"])
        print(
            f"target {target * 1000:.1f} ms: statements n={len(st)} p50 {statistics.median(st):.2f} "
            f"p99 {st[int(0.99 * (len(st) - 1))]:.2f} max {st[-1]:.2f} ms; {r['runs'] / r['secs']:,.0f} runs/s; "
            f"probe lateness per segment {json.dumps(r['probe'])}"
        )


if __name__ == "__main__":
    main()
