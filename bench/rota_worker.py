"""Run a rota worker for the benchmarks.

    python -m bench.rota_worker bench.rota_app [--concurrency N] [--async]
    python bench/rota_worker.py bench.rota_app:app

APP is `module[:attribute]` (attribute defaults to `app`). The worker blocks in
`app.run_worker(...)` (or `app.run_worker_async(...)` with --async) until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def load_app(spec: str) -> Any:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr or "app")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="rota_worker", description=__doc__.split("\n")[0])
    p.add_argument("app", help="module[:attribute] of the rota.App")
    p.add_argument("--concurrency", type=int, default=5)
    p.add_argument("--queues", help="comma-separated queue names (default: all)")
    p.add_argument("--shutdown-timeout", type=float, default=30.0)
    p.add_argument("--async", dest="use_async", action="store_true", help="run_worker_async")
    args = p.parse_args(argv)

    app = load_app(args.app)
    kwargs: dict[str, Any] = {
        "concurrency": args.concurrency,
        "queues": args.queues.split(",") if args.queues else None,
        "shutdown_timeout": args.shutdown_timeout,
    }
    if args.use_async:
        asyncio.run(app.run_worker_async(**kwargs))
    else:
        app.run_worker(**kwargs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
