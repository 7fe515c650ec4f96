"""Run the selected systems, each run in a fresh child process, interleaved across runs.

Interleaving (run 1 of every system, then run 2 of every system, ...) spreads slow drifts of
the machine (page cache, autovacuum, thermal) over all systems instead of biasing one.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import dbs
from bench.child import RESULT_PREFIX
from bench.core import DEFAULT_MYSQL_URL, Ctx, System
from bench.procs import REPO, child_env


@dataclass(frozen=True)
class Sizes:
    jobs: int
    enqueue_single: int
    samples: int
    ticks: int
    idle_seconds: float
    idle_schedules: int
    backlog: int
    backlog_due: int
    real_jobs: int
    memory_backlog: int

    @classmethod
    def full(cls, jobs: int | None = None, real_jobs: int | None = None, memory_backlog: int | None = None) -> Sizes:
        return cls(
            jobs or 20_000,
            2_000,
            200,
            60,
            60.0,
            10_000,
            1_000_000,
            10_000,
            real_jobs or 10_000,
            memory_backlog or 1_000_000,
        )

    @classmethod
    def quick(cls, jobs: int | None = None, real_jobs: int | None = None, memory_backlog: int | None = None) -> Sizes:
        return cls(
            jobs or 2_000, 500, 30, 10, 10.0, 10_000, 50_000, 2_000, real_jobs or 2_000, memory_backlog or 20_000
        )


@dataclass
class Config:
    runs: int
    quick: bool
    pg_url: str
    workdir: Path
    sizes: Sizes
    quiet_wait: float = 60.0  # seconds to wait for the machine to calm down before a run
    quiet_threshold: float = 20.0  # % of all CPUs busy (others' work) that counts as calm
    mysql_url: str = DEFAULT_MYSQL_URL  # admin URL of the MySQL/MariaDB server


@dataclass
class Outcome:
    system: System
    runs: list[dict[str, Any]] = field(default_factory=list)
    skipped: str | None = None

    def metrics(self) -> list[dict[str, float]]:
        return [r["metrics"] for r in self.runs if "metrics" in r]

    def errors(self) -> list[str]:
        return [r["error"] for r in self.runs if "error" in r]


Progress = Callable[[str], None]

PEER_MODULES = {
    "bench.peer_pgqueuer": ("pgqueuer", "asyncpg", "uvloop"),
    "bench.peer_procrastinate": ("procrastinate",),
    "bench.peer_huey": ("huey",),
    "bench.ceilings": ("psycopg",),
}


def _missing_modules(system: System) -> list[str]:
    needed = PEER_MODULES.get(system.func.partition(":")[0], ())
    return [m for m in needed if importlib.util.find_spec(m) is None]


def _pg_unavailable(url: str) -> str | None:
    try:
        dbs.pg_scalar(url, "SELECT 1")
    except Exception as exc:
        return f"PostgreSQL at {url} does not answer ({type(exc).__name__})"
    return None


def _mysql_unavailable(url: str) -> str | None:
    try:
        dbs.mysql_scalar(url, "SELECT 1")
    except Exception as exc:
        return f"MySQL/MariaDB at {url} does not answer ({type(exc).__name__}: {exc})"
    return None


def unavailable(systems: Sequence[System], pg_url: str, mysql_url: str = DEFAULT_MYSQL_URL) -> dict[str, str]:
    """system key -> one-line reason, for systems that cannot run here."""
    from bench.rota_workloads import rota_unavailable

    reasons: dict[str, str] = {}
    pg_reason = _pg_unavailable(pg_url) if any(s.backend == "postgres" for s in systems) else None
    mysql_reason = _mysql_unavailable(mysql_url) if any(s.backend == "mysql" for s in systems) else None
    rota_reason = rota_unavailable() if any(s.kind == "rota" for s in systems) else None
    for s in systems:
        missing = _missing_modules(s)
        if s.kind == "rota" and rota_reason:
            reasons[s.key] = rota_reason
        elif missing:
            reasons[s.key] = f"not installed: {', '.join(missing)} (see bench/requirements.txt)"
        elif s.backend == "postgres" and pg_reason:
            reasons[s.key] = pg_reason
        elif s.backend == "mysql" and mysql_reason:
            reasons[s.key] = mysql_reason
    return reasons


def _ctx(system: System, config: Config, run: int) -> Ctx:
    sizes = config.sizes
    jobs = min(sizes.jobs, system.max_jobs) if system.max_jobs else sizes.jobs
    workdir = config.workdir / f"{system.key}-run{run}"
    workdir.mkdir(parents=True, exist_ok=True)
    return Ctx(
        key=system.key,
        run=run,
        workdir=str(workdir),
        pg_url=config.pg_url,
        quick=config.quick,
        jobs=jobs,
        enqueue_single=sizes.enqueue_single,
        samples=sizes.samples,
        ticks=sizes.ticks,
        idle_seconds=sizes.idle_seconds,
        idle_schedules=sizes.idle_schedules,
        backlog=sizes.backlog,
        backlog_due=sizes.backlog_due,
        real_jobs=min(sizes.real_jobs, system.max_jobs) if system.max_jobs else sizes.real_jobs,
        memory_backlog=sizes.memory_backlog,
        mysql_url=config.mysql_url,
    )


def _kill_group(pgid: int) -> None:
    """SIGKILL what is left of a child's process group (its workers, if it died early)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def run_child(system: System, ctx: Ctx, new_group: bool = True) -> dict[str, Any]:
    """One run of one system in a fresh interpreter; its output is kept in the run dir.

    The child leads its own process group (unless `new_group` is false: a child started by
    another child stays in its parent's group), so a timeout or an interrupt also ends the
    worker processes it started.
    """
    payload = json.dumps({"ctx": ctx.to_json(), "params": system.params})
    argv = [sys.executable, "-m", "bench.child", "measure", system.func, payload]
    log = ctx.dir / "child.log"
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_group,
    )
    kill = _kill_group if new_group else lambda _: proc.kill()
    try:
        stdout, stderr = proc.communicate(timeout=system.timeout)
    except subprocess.TimeoutExpired:
        kill(proc.pid)
        stdout, stderr = proc.communicate()
        log.write_text(f"{stdout}\n--- stderr\n{stderr}")
        return {"error": f"timed out after {system.timeout:.0f}s (log: {log})"}
    except BaseException:
        kill(proc.pid)
        raise
    finally:
        if new_group and proc.returncode is not None:
            _kill_group(proc.pid)
    log.write_text(stdout + "\n--- stderr\n" + stderr)
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            result: dict[str, Any] = json.loads(line[len(RESULT_PREFIX) :])
            if "error" in result:
                result["error"] += f" (log: {log})"
            return result
    tail = " | ".join(stderr.strip().splitlines()[-3:])
    return {"error": f"child exited {proc.returncode} without a result: {tail} (log: {log})"}


def wait_quiet(max_wait: float, threshold: float) -> float:
    """Wait up to `max_wait` s until the machine's CPU use (of all CPUs, sampled over 0.5 s,
    while no benchmark process runs) is at most `threshold` %; returns the last sample."""
    try:
        import psutil
    except ImportError:
        return float("nan")
    deadline = time.monotonic() + max_wait
    busy = float(psutil.cpu_percent(interval=0.5))
    while busy > threshold and time.monotonic() < deadline:
        busy = float(psutil.cpu_percent(interval=0.5))
    return busy


def _describe(result: dict[str, Any], primary: str) -> str:
    if "metrics" in result:
        value = result["metrics"].get(primary)
        return f"{primary}={value:,.1f}" if isinstance(value, float) else "ok"
    return str(result.get("unsupported") or result.get("error", "?"))


def run_all(
    systems: Sequence[System], config: Config, primary: Callable[[System], str], say: Progress
) -> list[Outcome]:
    outcomes = [Outcome(s) for s in systems]
    for run in range(1, config.runs + 1):
        for outcome in outcomes:
            system = outcome.system
            if outcome.skipped or run > (system.max_runs or config.runs):
                continue
            busy = wait_quiet(config.quiet_wait, config.quiet_threshold)
            started = time.monotonic()
            result = run_child(system, _ctx(system, config, run))
            result["background_cpu_pct"] = busy
            if "unsupported" in result:
                outcome.skipped = result["unsupported"]
            else:
                outcome.runs.append(result)
            elapsed = time.monotonic() - started
            total = min(config.runs, system.max_runs or config.runs)
            say(
                f"[{system.table}] {system.key} run {run}/{total}: "
                f"{_describe(result, primary(system))} ({elapsed:.1f}s, "
                f"CPU busy before: {busy:.0f} %)"
            )
    return outcomes
