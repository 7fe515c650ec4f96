"""rota's workloads W1-W6 (issue 5), written against the public API in DESIGN.md.

Everything rota-specific in the benchmarks is here, in bench/rota_app.py (the tasks) and in
bench/rota_worker.py (the worker process). The measuring process imports bench.rota_app with
ROTA_DATABASE_URL pointing at a fresh database, enqueues through `task.enqueue` /
`task.enqueue_many`, starts workers as separate processes (`python -m bench.rota_worker`),
and reads results through the probe and `app.list_runs`. A system is skipped with one line
while `import rota` fails or rota.App lacks the API below (see `rota_unavailable`).

Assumptions to check once rota exists (marked ASSUMPTION below): a fresh database needs no
explicit migrate step (an `app.migrate()` is called when it exists); `.options(...)` returns
an object with `enqueue_many`; run statuses are the strings in DESIGN.md.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from bench import procs
from bench.core import Backend, Ctx, Metrics, System, Unsupported, latency_metrics
from bench.cpu import MySQLThreads, cpu_of, db_backends
from bench.dbs import fresh_mysql, fresh_pg, fresh_sqlite, pg_scalar
from bench.measure import StartWorkers, measure_drain, measure_pickup, new_probe
from bench.probe import ENV_PATH

APP_MODULE = "bench.rota_app"
REQUIRED_APP_API = ("task", "schedule", "run_worker", "get_run", "list_runs", "add_schedule")
DRAIN_CONCURRENCY = 100  # claims are bounded by free slots: same batch as the raw ceiling
ENQUEUE_CHUNK = 5_000
# workloads that take a minute or more per run get fewer runs (W5: ~1M rows per run)
LONG_RUNS = {"W3.lateness": 3, "W3.delayed": 3, "W4.idle": 3, "W5.backlog": 1, "W6.rescue": 3}


def rota_unavailable() -> str | None:
    """One line saying why rota's systems cannot run yet, or None when they can."""
    try:
        import rota
    except Exception as exc:
        return f"rota workloads: `import rota` failed ({type(exc).__name__}: {exc})"
    app_class = getattr(rota, "App", None)
    if app_class is None:
        return "rota workloads: rota.App does not exist yet"
    missing = [name for name in REQUIRED_APP_API if not hasattr(app_class, name)]
    if missing:
        return f"rota workloads: rota.App lacks {', '.join(missing)} (not written yet)"
    return None


# --- helpers ---------------------------------------------------------------------------


@contextmanager
def database(ctx: Ctx, backend: Backend, suffix: str = "") -> Iterator[str]:
    """A fresh database URL for rota: a bench_* PostgreSQL or MySQL/MariaDB database or a new
    SQLite file."""
    if backend == "postgres":
        with fresh_pg(ctx, suffix) as url:
            yield url
    elif backend == "mysql":
        with fresh_mysql(ctx, suffix) as url:
            yield url
    else:
        yield f"sqlite:///{fresh_sqlite(ctx, f'rota{suffix}.db')}"


def load_app_module(url: str) -> ModuleType:
    """Import bench.rota_app bound to `url` (once per measuring process)."""
    os.environ["ROTA_DATABASE_URL"] = url
    if APP_MODULE in sys.modules:
        raise RuntimeError("bench.rota_app is already bound to another database here")
    module = importlib.import_module(APP_MODULE)
    migrate = getattr(module.app, "migrate", None)  # ASSUMPTION: optional explicit step
    if callable(migrate):
        migrate()
    return module


def start_workers(
    ctx: Ctx,
    url: str,
    count: int = 1,
    concurrency: int = 5,
    use_async: bool = False,
    env: dict[str, str] | None = None,
    first_slot: int = 0,
) -> StartWorkers:
    """`count` worker processes, each `python -m bench.rota_worker bench.rota_app ...`."""
    args = [APP_MODULE, "--concurrency", str(concurrency)] + (["--async"] if use_async else [])

    def start(probe_path: Path) -> Sequence[procs.Worker]:
        worker_env = {"ROTA_DATABASE_URL": url, ENV_PATH: str(probe_path), **(env or {})}
        return [
            procs.spawn_module("bench.rota_worker", args, ctx.dir / f"rota-worker-{slot}.log", worker_env, slot)
            for slot in range(first_slot, first_slot + count)
        ]

    return start


def enqueue_bulk(task: Any, n: int, chunk: int = ENQUEUE_CHUNK) -> None:
    """`n` no-argument runs through `task.enqueue_many`, `chunk` at a time."""
    for offset in range(0, n, chunk):
        task.enqueue_many([((), {})] * min(chunk, n - offset))


def enqueue_future(task: Any, n: int, chunk: int = ENQUEUE_CHUNK) -> None:
    """`n` runs due in 30 days (W5's backlog)."""
    later = task.options(delay=timedelta(days=30))
    if not hasattr(later, "enqueue_many"):  # ASSUMPTION: options() supports enqueue_many
        raise Unsupported("W5 needs task.options(...).enqueue_many to build the backlog")
    enqueue_bulk(later, n, chunk)


def nothing_left(app: Any, include_pending: bool = True) -> Callable[[], bool]:
    """The drain's database check: no run running (nor pending, unless future ones exist)."""
    statuses = ("pending", "running") if include_pending else ("running",)
    return lambda: all(not app.list_runs(status=s, limit=1) for s in statuses)


def drain_with_workers(
    ctx: Ctx,
    url: str,
    app_module: ModuleType,
    jobs: int,
    workers: int = 1,
    concurrency: int = DRAIN_CONCURRENCY,
    use_async: bool = False,
    include_pending: bool = True,
    probe_name: str = "probe.bin",
) -> Metrics:
    start = start_workers(ctx, url, workers, concurrency, use_async)
    done = nothing_left(app_module.app, include_pending)
    return measure_drain(ctx, jobs, start, done, probe_name=probe_name, pg_url=url)


# --- W1 ----------------------------------------------------------------------------------


def drain(
    ctx: Ctx,
    backend: Backend,
    workers: int = 1,
    concurrency: int = DRAIN_CONCURRENCY,
    use_async: bool = False,
) -> Metrics:
    """W1 drain: ctx.jobs pre-enqueued no-op runs, `workers` worker processes."""
    with database(ctx, backend) as url:
        m = load_app_module(url)
        enqueue_bulk(m.noop_async if use_async else m.noop, ctx.jobs)
        return drain_with_workers(ctx, url, m, ctx.jobs, workers, concurrency, use_async)


def enqueue(ctx: Ctx, backend: Backend, bulk: bool, chunk: int = ENQUEUE_CHUNK) -> Metrics:
    """W1 enqueue rate: single `task.enqueue` calls, or `task.enqueue_many` in chunks."""
    with database(ctx, backend) as url:
        m = load_app_module(url)
        m.noop.enqueue()  # connection and schema set up outside the timing
        n = ctx.jobs if bulk else ctx.enqueue_single
        started = time.perf_counter()
        if bulk:
            enqueue_bulk(m.noop, n, chunk)
        else:
            for _ in range(n):
                m.noop.enqueue()
        seconds = time.perf_counter() - started
    return {"rate": n / seconds, "seconds": seconds}


# --- W2 ----------------------------------------------------------------------------------


def pickup(ctx: Ctx, backend: Backend, period: float = 0.05, workers: int = 1) -> Metrics:
    """W2: one `stamp` run at a time enqueued to idle workers (`workers` processes);
    enqueue -> handler start."""
    with database(ctx, backend) as url:
        m = load_app_module(url)
        start = start_workers(ctx, url, workers)
        metrics = measure_pickup(ctx, start, lambda i: m.stamp.enqueue(i), ctx.samples, period=period)
        last = m.app.list_runs(task="bench.stamp", limit=1)
        metrics["result_recorded"] = float(bool(last) and last[0].result is not None)
        return metrics


# --- W3 ----------------------------------------------------------------------------------


def _db_lateness(app: Any) -> list[float]:
    """started_at - scheduled_for of the recorded ticks (rota's own view of lateness)."""
    runs = app.list_runs(schedule="bench.tick", limit=1000)
    return [
        (r.started_at - r.scheduled_for).total_seconds()
        for r in runs
        if r.started_at is not None and r.scheduled_for is not None
    ]


def lateness(ctx: Ctx, backend: Backend, warmup_ticks: int = 2, processes: int = 1) -> Metrics:
    """W3: an every-second schedule, `processes` workers; handler start - scheduled_for over
    ctx.ticks ticks."""
    with database(ctx, backend) as url:
        m = load_app_module(url)
        probe_path, reader = new_probe(ctx)
        workers = start_workers(ctx, url, processes, env={"BENCH_ROTA_TICK": "1"})(probe_path)
        wanted = warmup_ticks + ctx.ticks
        try:
            procs.wait_for(lambda: reader.total() >= wanted, wanted + 120.0, f"{wanted} ticks", workers, 0.05)
        finally:
            procs.stop_all(workers)
        metrics = latency_metrics(reader.samples(warmup_ticks, wanted))
        recorded = _db_lateness(m.app)
        if recorded:
            metrics["db_p50_ms"] = latency_metrics(recorded)["p50_ms"]
        return metrics


DELAYED_POLL_INTERVAL = 10.0  # a long poll: each run must shorten the worker's sleep itself
DELAYED_SPACING = 0.25  # seconds between enqueues: several delayed runs are pending at once


def delayed(ctx: Ctx, backend: Backend, warmup: int = 2, low: float = 0.5, high: float = 8.0) -> Metrics:
    """W3 delayed: after `warmup` runs due at once (dropped), ctx.ticks runs enqueued one
    every DELAYED_SPACING s with a random delay in [low, high] s to an idle worker polling
    every DELAYED_POLL_INTERVAL s; handler start - the run's due time (scheduled_for)."""
    rng = random.Random(12)
    with database(ctx, backend) as url:
        m = load_app_module(url)
        probe_path, reader = new_probe(ctx)
        env = {"ROTA_POLL_INTERVAL": str(DELAYED_POLL_INTERVAL)}
        workers = start_workers(ctx, url, env=env)(probe_path)
        wanted = warmup + ctx.ticks
        try:
            for _ in range(warmup):  # due at once: the worker is up and warm after these
                m.due.enqueue()
            procs.wait_for(lambda: reader.total() >= warmup, 60.0, "worker start", workers, 0.05)
            for _ in range(ctx.ticks):
                m.due.options(delay=timedelta(seconds=rng.uniform(low, high))).enqueue()
                time.sleep(DELAYED_SPACING)
            procs.wait_for(lambda: reader.total() >= wanted, high + 60.0, f"{wanted} delayed runs", workers, 0.05)
        finally:
            procs.stop_all(workers)
        return latency_metrics(reader.samples(warmup, wanted))


# --- W4 ----------------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    import psutil

    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system + t.children_user + t.children_system)


def _pg_transactions(url: str) -> int:
    query = "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
    return int(pg_scalar(url, query))


def idle(ctx: Ctx, backend: Backend, settle_s: float = 12.0) -> Metrics:
    """W4: a worker with ctx.idle_schedules schedules (none due for a year) sitting idle.

    `settle_s` (> PostgreSQL's 10 s idle-stats flush interval) keeps the set-up's
    transactions out of the window. The CPU of the PostgreSQL backends serving the bench
    database (alive through the window; on MariaDB the server threads of the connections to
    it) is reported too, as db_cpu_pct.
    """
    with database(ctx, backend) as url:
        m = load_app_module(url)
        started = time.perf_counter()
        for i in range(ctx.idle_schedules):
            m.app.add_schedule(f"bench.idle.{i}", m.noop, cron="0 0 1 1 *", tz="UTC")
        setup_s = time.perf_counter() - started
        probe_path, reader = new_probe(ctx)
        workers = start_workers(ctx, url)(probe_path)
        try:
            m.stamp.enqueue(0)  # one run through the worker: it is up and polling
            procs.wait_for(lambda: reader.sample(0) > 0, 300.0, "the worker to start", workers)
            time.sleep(settle_s)
            pg = backend == "postgres"
            threads = MySQLThreads(url) if backend == "mysql" else None  # MariaDB: its connections' threads
            backends = db_backends(url.rpartition("/")[2]) if pg else threads() if threads else []
            db0 = {**(threads.baseline() if threads else {}), **cpu_of(backends)}
            cpu0, t0 = _cpu_seconds(workers[0].pid), time.monotonic()
            x0 = _pg_transactions(url) if pg else 0
            time.sleep(ctx.idle_seconds)
            cpu1, elapsed = _cpu_seconds(workers[0].pid), time.monotonic() - t0
            x1 = _pg_transactions(url) if pg else 0
            db1 = cpu_of(backends)
            workers[0].check()
        finally:
            procs.stop_all(workers)
    metrics = {"cpu_pct": 100.0 * (cpu1 - cpu0) / elapsed, "setup_s": setup_s}
    if backend == "postgres":  # minus our own first snapshot's transaction
        metrics["statements_per_min"] = max(0, x1 - x0 - 1) * 60.0 / elapsed
    if backends:
        db_cpu = sum(db1[pid] - db0[pid] for pid in db1 if pid in db0)
        metrics["db_cpu_pct"] = 100.0 * db_cpu / elapsed
    return metrics


# --- W5 ----------------------------------------------------------------------------------


def backlog_drain(
    ctx: Ctx, backend: Backend, extra: int, suffix: str, finished_fraction: float = 0.5, vacuum: bool = False
) -> Metrics:
    """One half of W5: drain ctx.backlog_due due runs with `extra` other rows in the table
    (`finished_fraction` of them succeeded through a worker first, the rest due in 30 days).
    With `vacuum` (PostgreSQL), VACUUM ANALYZE the table before the measured drain: the
    state autovacuum leaves it in, instead of right after a burst of 500,000 completions."""
    with database(ctx, backend, suffix) as url:
        m = load_app_module(url)
        started = time.perf_counter()
        finished = int(extra * finished_fraction)
        if finished:
            enqueue_bulk(m.noop, finished)
            drain_with_workers(ctx, url, m, finished, probe_name="probe-setup.bin")
        enqueue_future(m.noop, extra - finished)
        if vacuum and backend == "postgres":
            import psycopg

            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE rota_runs")
        setup_s = time.perf_counter() - started
        enqueue_bulk(m.noop, ctx.backlog_due)
        metrics = drain_with_workers(ctx, url, m, ctx.backlog_due, include_pending=False)
        return {**metrics, "setup_s": setup_s}


def _in_child(ctx: Ctx, func: str, **params: Any) -> Metrics:
    """Run `func` in a fresh measuring process (own app instance and database)."""
    from bench.runner import run_child

    sub = dataclasses.replace(ctx, workdir=str(ctx.dir / func.rpartition(":")[2]))
    sub.dir.mkdir(parents=True, exist_ok=True)
    system = System(ctx.key, "W5.backlog", func, params["backend"], "rota", func, params, timeout=3000.0)
    result = run_child(system, sub, new_group=False)
    if "unsupported" in result:
        raise Unsupported(result["unsupported"])
    if "error" in result:
        raise RuntimeError(result["error"])
    metrics: Metrics = result["metrics"]
    return metrics


def backlog(ctx: Ctx, backend: Backend, vacuum: bool = False) -> Metrics:
    """W5: drain rate with ctx.backlog other rows in the table, against an empty table."""
    func = f"{__name__}:backlog_drain"
    small = _in_child(ctx, func, backend=backend, extra=0, suffix="_small")
    big = _in_child(ctx, func, backend=backend, extra=ctx.backlog, suffix="_big", vacuum=vacuum)
    return {
        "ratio_pct": 100.0 * big["rate"] / small["rate"],
        "rate_small": small["rate"],
        "rate_backlog": big["rate"],
        "setup_s": big["setup_s"],
    }


# --- W6 ----------------------------------------------------------------------------------


def rescue(ctx: Ctx, backend: Backend, held: int = 4, hold_s: float = 3600.0) -> Metrics:
    """W6: worker A holds `held` runs and is killed with SIGKILL; worker B (already running)
    must restart them. Measured from the kill to each retry's handler start."""
    with database(ctx, backend) as url:
        m = load_app_module(url)
        probe_path, reader = new_probe(ctx)
        workers = list(start_workers(ctx, url, concurrency=held)(probe_path))
        try:
            for i in range(held):
                m.hold.enqueue(i, hold_s)
            procs.wait_for(
                lambda: all(reader.sample(i) > 0 for i in range(held)),
                120.0,
                "worker A to start the held runs",
                workers,
            )
            workers += start_workers(ctx, url, concurrency=held, first_slot=1)(probe_path)
            time.sleep(3.0)  # B imported, connected and polling
            killed_at = time.time()
            workers[0].kill()
            retries = [m.HOLD_RETRY_OFFSET + i for i in range(held)]
            procs.wait_for(
                lambda: all(reader.sample(j) > 0 for j in retries),
                600.0,
                "worker B to restart the runs",
                workers[1:],
                interval=0.01,
            )
        finally:
            procs.stop_all(workers)
        delays = [reader.sample(j) - killed_at for j in retries]
        return {"rescue_s": max(delays), "first_s": min(delays)}
