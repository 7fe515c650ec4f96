"""The whole-system soak (tools/soak), short and with a fixed seed, on both stores: real
worker processes, every feature of the mixed workload at once and every fault (SIGTERM,
kill -9, proxy cuts of the database on PostgreSQL, damaged rows of every kind the soak
writes), ending with every invariant checked and none exempted (`python -m tools.soak`, as
anyone would run it). The checker itself is tested on made-up evidence: each invariant names
the runs that broke it, and what the soak once flagged wrongly is a test here."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

import rota
from tools.soak.checks import Facts, Violation
from tools.soak.checks_flow import check
from tools.soak.evidence import Evidence, Execution
from tools.soak.workload import Ledger

from .conftest import PG_URL, require

ROOT = Path(__file__).resolve().parent.parent
SEED = 41
# the same on both stores: everything ("proxy" applies where the store has a network: PostgreSQL)
EVERYTHING = ["--faults", "all", "--features", "all", "--damage", "all"]


@pytest.mark.soak
@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_short_soak_of_every_feature_under_faults_keeps_every_invariant(store: str) -> None:
    if store == "postgres":
        require("postgres")
    cmd = [sys.executable, "-m", "tools.soak", "--store", store, "--seed", str(SEED), "--duration", "20",
           "--workers", "3", "--postgres-url", PG_URL, *EVERYTHING]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=170, check=False)
    out = done.stdout + done.stderr
    assert out.startswith(f"soak seed {SEED}: python -m tools.soak --store {store} --seed {SEED}"), out
    assert done.returncode == 0 and f"PASS (seed {SEED})" in out, out
    assert "executions: 0" not in out  # it did work
    sent = {line.split()[1].rstrip(":") for line in out.splitlines() if line.startswith("    ") and "s " in line}
    assert sent >= {"term", "kill", "damage"} | ({"proxy"} if store == "postgres" else set()), out  # each fault


def _ex(run: str, token: int, start: float, end: float, **kw: object) -> Execution:
    return Execution(run=run, token=token, attempt=1, task=str(kw.pop("task", "soak.plain")), pid=1, start=start,
                     wall=start, end=end, ok=True, **kw)  # type: ignore[arg-type]  # fmt: skip


def _run(run_id: str, status: str = "succeeded") -> rota.Run:
    now = datetime.now(UTC)
    return rota.Run(id=run_id, task="soak.plain", status=status, queue="default", priority=0, args=[], kwargs={},
                    key=None, schedule=None, scheduled_for=now, due_at=now, attempt=1, max_attempts=3, timeout=None,
                    worker=None, token=int(run_id), lease_until=None, cancel_requested=False, created_at=now,
                    started_at=now, finished_at=now, result=None, error=None)  # fmt: skip


def _facts(executions: list[Execution], ledger: Ledger | None = None, runs: dict[str, rota.Run] | None = None) -> Facts:
    by_run: dict[str, list[Execution]] = {}
    for ex in sorted(executions, key=lambda x: x.start):
        by_run.setdefault(ex.run, []).append(ex)
    return Facts(runs=runs or {}, evidence=Evidence(executions, by_run), ledger=ledger or Ledger(), effects={}, unsettled={},
                 stop_at=datetime.now(UTC), faults=(), killed=set(), schedules=[])  # fmt: skip


def _named(found: list[Violation], invariant: str) -> list[list[str]]:
    return [v.runs for v in found if v.invariant == invariant]


def test_the_checker_names_a_run_executed_beside_itself_and_a_limit_passed() -> None:
    found = check(_facts([
        _ex("1", 10, 0.0, 2.0), _ex("1", 11, 1.0, 3.0),  # run 1 twice at once
        _ex("2", 12, 0.0, 1.0), _ex("2", 13, 1.0, 2.0),  # run 2 again once the first ended: fine
        *(_ex(str(i), 20 + i, 0.0, 1.0, task="soak.limited", key="a") for i in (3, 4, 5)),  # 3 of key a, Limit(2)
        *(_ex(str(i), 20 + i, 0.0, 1.0, task="soak.limited", key="b") for i in (6, 7)),
    ]))  # fmt: skip
    assert _named(found, "beside-itself") == [["1"]]
    assert _named(found, "limit") == [["3", "4", "5"]]


def test_the_checker_names_runs_of_an_exclusive_schedule_at_once_and_an_early_after_child() -> None:
    ledger = Ledger()
    ledger.schedules = {"s": (1.0, "skip", "coalesce", 0.5), "c": (1.0, "concurrent", "skip", 0.5)}
    ledger.parents = {"9": ["8"]}
    found = check(_facts([
        _ex("1", 1, 0.0, 2.0, schedule="s"), _ex("2", 2, 1.5, 3.0, schedule="s"),
        _ex("3", 3, 0.0, 2.0, schedule="c"), _ex("4", 4, 1.0, 3.0, schedule="c"),
        _ex("8", 8, 0.0, 2.0), _ex("9", 9, 1.0, 1.5),  # the child started before its parent ended
    ], ledger, {"8": _run("8"), "9": _run("9")}))  # fmt: skip
    assert _named(found, "overlap") == [["1", "2"]]
    assert _named(found, "after") == [["9"]]


def test_the_checker_takes_a_lost_attempt_only_from_a_killed_worker_or_a_terminated_one_that_says_so() -> None:
    """Found by the soak with SIGTERM on (seed 41, SQLite): a worker sent SIGTERM whose handler
    outlived shutdown_timeout leaves its attempt `lost` with WorkerStopped, as documented
    (docs/concepts/faults.md); the checker took it for a lease lost by a live worker."""

    def lost(run_id: str, pid: int, why: str, status: str = "succeeded") -> rota.Run:
        entry = {"attempt": 1, "worker": f"vm:{pid}", "status": "lost", "error": {"type": why, "message": "m"}}
        return dataclasses.replace(_run(run_id, status), history=[entry])

    runs = {"1": lost("1", 10, "WorkerStopped"), "2": lost("2", 11, "WorkerLost"), "3": lost("3", 12, "WorkerStopped"),
            "4": lost("4", 10, "WorkerLost")}  # fmt: skip
    facts = dataclasses.replace(_facts([], runs=runs), killed={11}, termed={10}, faults=("term", "kill"))
    assert _named(check(facts), "lease-lost") == [["4"], ["3"]]  # 10 terminated (not lost), 12 never signalled


def test_the_checker_names_an_outcome_logged_discarded_that_the_run_holds() -> None:
    """Found in the soak's PostgreSQL worker logs: a finish whose commit reply was lost was
    written again and logged as discarded, though the run held it (its event never emitted)."""
    runs = {"1": _run("1"), "2": _run("2"), "3": _run("3", status="pending")}
    facts = dataclasses.replace(_facts([], runs=runs), discarded=[
        ("1", "succeeded", 1),  # run 1 succeeded under token 1: that outcome was written
        ("2", "succeeded", 7),  # an older token's: stale indeed
        ("3", "succeeded", 3),  # rescued, pending again: stale indeed
    ])  # fmt: skip
    assert _named(check(facts), "discarded") == [["1"]]


def test_every_invariant_the_checker_names_is_one_known_takes() -> None:
    import re

    from tools.soak.config import INVARIANTS

    source = "".join(p.read_text() for p in (ROOT / "tools" / "soak").glob("checks*.py"))
    assert set(re.findall(r'Violation\(\s*"([a-z_-]+)"', source)) == set(INVARIANTS)
