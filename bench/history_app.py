"""The app `bench.history` runs its prune probe worker on (`rota worker bench.history_app:app`).

`probe` appends how late it started (handler start - the run's due time, in ms) to the file
named by ROTA_BENCH_LATE, one line per run, so the bench can compare claims before and during a
prune from the worker's own view.
"""

from __future__ import annotations

import os
import time

import rota

app = rota.App(retention=None)


@app.task(name="noop")
def noop() -> None:
    return None


@app.task(name="probe", pass_context=True)
def probe(ctx: rota.RunContext, enqueued: float) -> None:
    late_ms = (time.time() - enqueued) * 1000
    with open(os.environ["ROTA_BENCH_LATE"], "a") as f:
        f.write(f"{time.time():.6f} {late_ms:.3f}\n")
