"""`def` handlers that block for about a millisecond: does every slot get a thread?

Enqueues N runs of `bench.hold` that each sleep `--ms` milliseconds (a small query or a local
HTTP call, without the server), starts one `bench.rota_worker` with `--concurrency` slots and
prints the rate from the first run seen started to the last one finished (polled every 10 ms;
the ideal is concurrency / ms runs per millisecond). Run it from each checkout to compare
versions (`-m` imports rota from the current directory):

    .venv-bench/bin/python -m bench.naps [--store sqlite|postgres] [--ms 1] [--concurrency 5] [--runs 10000]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from bench.dbs import DEFAULT_PG_URL, scratch_store


def _drain(app: object, runs: int) -> float:
    """Seconds from the first run seen started to every run final."""
    counts = app.store.count_by_status  # type: ignore[attr-defined]
    while counts().get("pending", 0) == runs:
        time.sleep(0.01)
    began = time.monotonic()
    while counts().get("succeeded", 0) < runs:
        time.sleep(0.01)
    return time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL, help="an admin URL (the database is created and dropped)")
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--ms", type=float, default=1.0, help="each handler sleeps this long")
    parser.add_argument("--concurrency", type=int, default=5)
    args = parser.parse_args()
    with scratch_store(args.store, args.pg_url, "bench_naps") as url:
        os.environ["ROTA_DATABASE_URL"] = url
        from bench import rota_app

        for offset in range(0, args.runs, 10_000):
            rota_app.hold.enqueue_many(
                [((i, args.ms / 1000), {}) for i in range(offset, min(offset + 10_000, args.runs))]
            )
        cmd = [sys.executable, "-m", "bench.rota_worker", "bench.rota_app", "--concurrency", str(args.concurrency)]
        worker = subprocess.Popen(cmd, env={**os.environ, "ROTA_DATABASE_URL": url})
        try:
            seconds = _drain(rota_app.app, args.runs)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
        ideal = args.concurrency / (args.ms / 1000)
        print(
            f"{args.runs:,} runs of a {args.ms:g} ms sleep, concurrency {args.concurrency}, {args.store}:"
            f" {args.runs / seconds:,.0f} runs/s (all slots asleep at once: {ideal:,.0f})"
        )
        rota_app.app.close()


if __name__ == "__main__":
    main()
