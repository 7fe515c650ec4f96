"""The soak's settings: which features the workload uses and which faults the injector sends,
each switchable, so that a part that does not hold yet can be left out until it is fixed."""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from .damage import DAMAGE  # the damaged rows the "damage" fault writes (every kind by default)

FEATURES = ("schedules", "limits", "rates", "after", "unique", "retries", "txn", "cancel", "retry_many",
            "backfill", "fork", "block")  # fmt: skip
FAULTS = ("term", "kill", "proxy", "damage")
# every invariant the report names (checks.py, checks_flow.py; --known takes these)
INVARIANTS = ("beside-itself", "limit", "rate", "ticks", "schedule-stopped", "policy", "overlap", "final", "attempts",
              "lease-lost", "cancel", "tokens", "discarded", "retried-twice", "after", "unique_for", "transactional",
              "damaged-retried", "unexpected-failure", "attempt-error", "quarantine", "worker-stopped", "client-call",
              "claims-stopped")  # fmt: skip
PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"


@dataclass(frozen=True)
class Config:
    store: str = "sqlite"
    seed: int = 1
    duration: float = 30.0
    workers: int = 3
    features: tuple[str, ...] = FEATURES
    faults: tuple[str, ...] = FAULTS
    damage: tuple[str, ...] = DAMAGE
    lease: float = 4.0
    concurrency: int = 4
    shutdown_timeout: float = 1.0
    fault_every: float = 4.0  # mean seconds between faults
    fork_seconds: float = 1.5  # the longest a forked child lives
    settle: float = 60.0  # at most this long for the runs to end once the faults stop
    postgres_url: str = field(default_factory=lambda: os.environ.get("ROTA_TEST_POSTGRES_URL", PG_DEFAULT))
    keep: str | None = None  # a folder for the database file, evidence and worker logs, kept
    known: tuple[str, ...] = ()  # invariants whose violations are listed as known and do not fail

    def command(self) -> str:
        """The command that replays this soak (same seed, features and faults)."""
        parts = ["python", "-m", "tools.soak", "--store", self.store, "--seed", str(self.seed),
                 "--duration", f"{self.duration:g}", "--workers", str(self.workers),
                 "--features", ",".join(self.features) or "none", "--faults", ",".join(self.faults) or "none"]  # fmt: skip
        if self.known:
            parts += ["--known", ",".join(self.known)]
        if "damage" in self.faults and self.damage != DAMAGE:
            parts += ["--damage", ",".join(self.damage) or "none"]
        defaults = Config()
        for name in ("lease", "concurrency", "shutdown_timeout", "fault_every", "fork_seconds", "settle"):
            if getattr(self, name) != getattr(defaults, name):
                parts += [f"--{name.replace('_', '-')}", f"{getattr(self, name):g}"]
        return shlex.join(parts)


def _names(kind: str, known: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    def parse(text: str) -> tuple[str, ...]:
        if text in ("all", ""):
            return known
        if text == "none":
            return ()
        names = tuple(n.strip() for n in text.split(",") if n.strip())
        unknown = [n for n in names if n not in known]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {kind} {', '.join(unknown)}: valid are {', '.join(known)}, all, none"
            )
        return names

    return parse


def _positive(kind: type[int] | type[float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0 or value == float("inf"):
            raise argparse.ArgumentTypeError(f"{text!r} must be a finite number above 0")
        return value

    return parse


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.soak", description=__doc__)
    p.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    p.add_argument("--seed", type=int, default=None, help="the workload's seed (default: a random one, printed)")
    p.add_argument(
        "--duration", type=_positive(float), default=30.0, help="seconds of workload and faults (then settle and check)"
    )
    p.add_argument("--workers", type=_positive(int), default=3, help="worker processes (rota worker)")
    p.add_argument(
        "--features",
        type=_names("feature", FEATURES),
        default=FEATURES,
        help=f"comma list of {', '.join(FEATURES)} (default all)",
    )
    p.add_argument(
        "--faults",
        type=_names("fault", FAULTS),
        default=FAULTS,
        help=f"comma list of {', '.join(FAULTS)} (default all; proxy on postgres only)",
    )
    p.add_argument(
        "--damage",
        type=_names("damage", DAMAGE),
        default=DAMAGE,
        help=f"the damaged rows of the damage fault: comma list of {', '.join(DAMAGE)} (default all)",
    )
    p.add_argument("--lease", type=_positive(float), default=4.0)
    p.add_argument("--concurrency", type=_positive(int), default=4)
    p.add_argument("--shutdown-timeout", type=_positive(float), default=1.0)
    p.add_argument("--fault-every", type=_positive(float), default=4.0, help="mean seconds between two faults")
    p.add_argument("--fork-seconds", type=_positive(float), default=1.5, help="the longest a forked child lives")
    p.add_argument(
        "--settle", type=_positive(float), default=60.0, help="at most this long for every run to end after the faults"
    )
    p.add_argument("--postgres-url", default=os.environ.get("ROTA_TEST_POSTGRES_URL", PG_DEFAULT),
                   help="a PostgreSQL database the soak may use (it makes and drops its own schema)")  # fmt: skip
    p.add_argument(
        "--known",
        type=_names("invariant", INVARIANTS),
        default=(),
        help="invariants (as the report names them) whose violations are known: listed, but they do not fail the soak",
    )
    p.add_argument("--keep", default=None, help="keep the database, evidence and worker logs in this folder")
    return p
