"""`python -m tools.soak`: see tools/soak/__init__.py."""

from __future__ import annotations

import random
import sys

from .config import Config, parser
from .run import soak


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1, 2**31)
    faults = tuple(f for f in args.faults if f != "proxy" or args.store == "postgres")
    cfg = Config(store=args.store, seed=seed, duration=args.duration, workers=args.workers, features=args.features,
                 faults=faults, damage=args.damage, lease=args.lease, concurrency=args.concurrency,
                 shutdown_timeout=args.shutdown_timeout, fault_every=args.fault_every, fork_seconds=args.fork_seconds, settle=args.settle,
                 postgres_url=args.postgres_url, keep=args.keep, known=args.known)  # fmt: skip
    print(f"soak seed {seed}: {cfg.command()}", flush=True)
    violations, summary = soak(cfg)
    for name, value in summary.items():
        if name != "faults":
            print(f"  {name}: {value}")
    print(f"  faults: {len(summary['faults'])}")
    for line in summary["faults"]:
        print(f"    {line}")
    known = [v for v in violations if v.invariant in cfg.known]
    failing = [v for v in violations if v.invariant not in cfg.known]
    for v in known:
        print(f"  known - {v.show()}")
    if not failing:
        print(f"PASS (seed {seed})" + (f", {len(known)} known violation(s)" if known else ""))
        return 0
    print(f"FAIL (seed {seed}): {len(failing)} violation(s)")
    for v in failing:
        print(f"  - {v.show()}")
    print(f"replay: {cfg.command()}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
