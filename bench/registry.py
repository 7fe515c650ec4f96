"""What is measured: the tables (one per workload figure) and the systems in each.

A system is a function `module:function(ctx, **params) -> metrics`, run in a fresh child
process per run. To add one, append a `System` to SYSTEMS with the key of its table; rota's
systems live in bench/rota_workloads.py and are registered here like the peers.
"""

from __future__ import annotations

from bench.core import System, Table

PG_PEER, PG_CEILING = "pgqueuer-b100", "raw-psycopg-100"
SQLITE_PEER, SQLITE_CEILING = "huey-sqlite", "raw-sqlite-full"
W7_PG_PEER, W7_PG_CEILING = "pgqueuer-w7-default", "raw-psycopg-w7"
W7_SQLITE_PEER, W7_SQLITE_CEILING = "huey-w7-default", "raw-sqlite-w7"

TABLES: tuple[Table, ...] = (
    Table(
        key="W1.drain",
        title="W1 drain: pre-enqueued no-op jobs, one worker process",
        unit="jobs/s",
        primary="rate",
        extras=(
            ("steady_rate", "steady 10-90 %"),
            ("cold_rate", "from spawn"),
            ("worker_us_per_run", "worker CPU µs/run"),
            ("db_us_per_run", "DB CPU µs/run"),
        ),
        peer={"postgres": PG_PEER, "sqlite": SQLITE_PEER, "mysql": "rota-pg-drain-1w"},
        ceiling={"postgres": PG_CEILING, "sqlite": SQLITE_CEILING},
        definition="first handler start -> database shows every job done; MariaDB's peer is rota "
        "on PostgreSQL; its CPU column counts the MariaDB threads of the run's connections",
    ),
    Table(
        key="W10.limits",
        title="W10 limits: W1 drain under a concurrency limit (issue 20): one worker process, concurrency 100",
        unit="jobs/s",
        primary="rate",
        extras=(("worker_us_per_run", "worker CPU µs/run"), ("db_us_per_run", "PG CPU µs/run")),
        definition="as W1.drain; the task has no limit, limit=100, or Limit(1, by=key) over 1,000 keys",
    ),
    Table(
        key="W1.enqueue",
        title="W1 enqueue rate (client process, no worker running)",
        unit="runs/s",
        primary="rate",
        peer={"postgres": "pgqueuer-enqueue-bulk", "sqlite": "huey-enqueue"},
        definition="wall time of the enqueue calls (single calls or bulk chunks)",
    ),
    Table(
        key="W2.pickup",
        title="W2 pickup latency: one job enqueued to an idle worker",
        unit="ms p50",
        primary="p50_ms",
        extras=(("p95_ms", "p95 ms"), ("p99_ms", "p99 ms")),
        lower_is_better=True,
        peer={"postgres": "pgqueuer-pickup", "sqlite": "huey-pickup", "mysql": "rota-pg-pickup"},
        definition="handler start - time before the enqueue call",
    ),
    Table(
        key="W3.lateness",
        title="W3 tick lateness: every-second schedule",
        unit="ms p50",
        primary="p50_ms",
        extras=(("p99_ms", "p99 ms"), ("max_ms", "max ms")),
        lower_is_better=True,
        definition="handler start - the tick's scheduled_for",
    ),
    Table(
        key="W3.delayed",
        title="W3 delayed-run lateness: runs enqueued with a delay, long poll interval",
        unit="ms p50",
        primary="p50_ms",
        extras=(("p95_ms", "p95 ms"), ("p99_ms", "p99 ms"), ("max_ms", "max ms")),
        lower_is_better=True,
        definition="handler start - the run's due time (scheduled_for)",
    ),
    Table(
        key="W4.idle",
        title="W4 idle cost: worker with many schedules, none due",
        unit="% of a core",
        primary="cpu_pct",
        extras=(("statements_per_min", "PG xacts/min"), ("db_cpu_pct", "DB server % of a core")),
        lower_is_better=True,
        definition="worker process CPU time / wall time over the window",
    ),
    Table(
        key="W5.backlog",
        title="W5 backlog: drain rate with a large table vs a small one",
        unit="% of small-table rate",
        primary="ratio_pct",
        extras=(("rate_small", "small jobs/s"), ("rate_backlog", "backlog jobs/s")),
        definition="drain rate of the due runs, big table / small table",
    ),
    Table(
        key="W6.rescue",
        title="W6 rescue: kill -9 a worker holding runs",
        unit="s (last run restarted)",
        primary="rescue_s",
        extras=(("first_s", "first restarted s"),),
        lower_is_better=True,
        definition="kill -9 -> handler start of the retry on the surviving worker",
    ),
    Table(
        key="W7.small",
        title="W7 small real job: one Redis INCR per job, one worker process",
        unit="jobs/s",
        primary="rate",
        extras=(
            ("steady_rate", "steady 10-90 %"),
            ("worker_us_per_run", "worker CPU µs/run"),
            ("db_us_per_run", "DB CPU µs/run"),
        ),
        peer={"postgres": W7_PG_PEER, "sqlite": W7_SQLITE_PEER, "mysql": "rota-pg-w7-default"},
        ceiling={"postgres": W7_PG_CEILING, "sqlite": W7_SQLITE_CEILING},
        definition="first handler start -> database shows every job done (as W1); CPU per run "
        "from the first handler start on: worker process, PostgreSQL backends of the database",
    ),
    Table(
        key="W8.scale",
        title="W8 scale-out: W1 drain with 1, 2 and 4 worker processes on one database",
        unit="jobs/s",
        primary="rate",
        extras=(
            ("worker_us_per_run", "workers CPU µs/run"),
            ("db_us_per_run", "PG CPU µs/run"),
            ("db_cpu_pct", "PG % of a core"),
        ),
        peer={"postgres": "rota-pg-scale-1w", "sqlite": "rota-sqlite-scale-1w"},
        peer_label="vs 1 worker",
        definition="as W1 (no-op jobs, concurrency 100 per process); CPU summed over the worker "
        "processes (on SQLite the database's work is in there too)",
    ),
    Table(
        key="W9.memory",
        title="W9 worker memory: peak resident set (VmHWM) of a `rota worker` with defaults",
        unit="MiB peak RSS",
        primary="peak_rss_mb",
        extras=(("rss_mb", "RSS at the end MiB"), ("rate", "drain jobs/s")),
        lower_is_better=True,
        definition="/proc/PID/status VmHWM of the worker process when the state is reached "
        "(peak over its whole life, start-up included)",
    ),
)


PEERS: tuple[System, ...] = (
    System(
        key="pgqueuer-b10",
        table="W1.drain",
        label="PgQueuer 1.6 (asyncpg), batch_size=10",
        backend="postgres",
        kind="peer",
        func="bench.peer_pgqueuer:drain",
        params={"batch_size": 10},
        settings="PgQueuer.run(batch_size=10 (default), mode=drain), uvloop, durable tables",
    ),
    System(
        key=PG_PEER,
        table="W1.drain",
        label="PgQueuer 1.6 (asyncpg), batch_size=100",
        backend="postgres",
        kind="peer",
        func="bench.peer_pgqueuer:drain",
        params={"batch_size": 100},
        settings="PgQueuer.run(batch_size=100, mode=drain), uvloop, durable tables",
    ),
    System(
        key="procrastinate-c1",
        table="W1.drain",
        label="Procrastinate 3.10, concurrency=1",
        backend="postgres",
        kind="peer",
        func="bench.peer_procrastinate:drain",
        params={"concurrency": 1},
        max_jobs=5000,
        settings="run_worker_async(concurrency=1, wait=False)",
    ),
    System(
        key="procrastinate-c10",
        table="W1.drain",
        label="Procrastinate 3.10, concurrency=10",
        backend="postgres",
        kind="peer",
        func="bench.peer_procrastinate:drain",
        params={"concurrency": 10},
        max_jobs=5000,
        settings="run_worker_async(concurrency=10, wait=False)",
    ),
    System(
        key=SQLITE_PEER,
        table="W1.drain",
        label="huey 3.5 SqliteHuey, fsync on",
        backend="sqlite",
        kind="peer",
        func="bench.peer_huey:drain",
        settings="SqliteHuey(fsync=True), WAL; consumer workers=1 thread, periodic off",
    ),
    System(
        key=PG_CEILING,
        table="W1.drain",
        label="raw psycopg loop, claim 100 SKIP LOCKED + complete 100",
        backend="postgres",
        kind="ceiling",
        func="bench.ceilings:psycopg_drain",
        params={"batch": 100},
        settings="autocommit; CTE + FOR UPDATE SKIP LOCKED claim; one UPDATE ... unnest",
    ),
    System(
        key="raw-psycopg-1",
        table="W1.drain",
        label="raw psycopg loop, claim 1 + complete 1",
        backend="postgres",
        kind="ceiling",
        func="bench.ceilings:psycopg_drain",
        params={"batch": 1},
        max_jobs=5000,
        settings="as above with LIMIT 1",
    ),
    System(
        key=SQLITE_CEILING,
        table="W1.drain",
        label="raw sqlite3 loop, WAL, batches of 100, synchronous=FULL",
        backend="sqlite",
        kind="ceiling",
        func="bench.ceilings:sqlite_drain",
        params={"batch": 100, "synchronous": "FULL"},
        settings="BEGIN IMMEDIATE; UPDATE ... RETURNING claim; executemany complete",
    ),
    System(
        key="raw-sqlite-normal",
        table="W1.drain",
        label="raw sqlite3 loop, WAL, batches of 100, synchronous=NORMAL",
        backend="sqlite",
        kind="ceiling",
        func="bench.ceilings:sqlite_drain",
        params={"batch": 100, "synchronous": "NORMAL"},
    ),
    System(
        key="pgqueuer-enqueue-bulk",
        table="W1.enqueue",
        label="PgQueuer Queries.enqueue(lists), chunks of 1,000",
        backend="postgres",
        kind="peer",
        func="bench.peer_pgqueuer:enqueue_bulk",
        params={"chunk": 1000},
    ),
    System(
        key="huey-enqueue",
        table="W1.enqueue",
        label="huey SqliteHuey task() calls, fsync on",
        backend="sqlite",
        kind="peer",
        func="bench.peer_huey:enqueue_single",
    ),
    System(
        key="pgqueuer-pickup",
        table="W2.pickup",
        label="PgQueuer 1.6 (LISTEN/NOTIFY)",
        backend="postgres",
        kind="peer",
        func="bench.peer_pgqueuer:pickup",
        params={"batch_size": 10},
        settings="continuous mode, batch_size=10, enqueue of one job per sample",
    ),
    System(
        key="huey-pickup",
        table="W2.pickup",
        label="huey 3.5 SqliteHuey (polling every 100 ms)",
        backend="sqlite",
        kind="peer",
        func="bench.peer_huey:pickup",
        params={"initial_delay": 0.1, "max_delay": 0.1},
        settings="initial_delay=0.1 (default), max_delay=0.1 (default 10 s: capped here)",
    ),
    System(
        key=W7_PG_PEER,
        table="W7.small",
        label="PgQueuer 1.6, defaults",
        backend="postgres",
        kind="peer",
        func="bench.peer_pgqueuer:drain_incr",
        settings="PgQueuer.run() defaults (batch_size=10, continuous), uvloop, async def + redis.asyncio",
    ),
    System(
        key=W7_SQLITE_PEER,
        table="W7.small",
        label="huey 3.5 SqliteHuey, defaults",
        backend="sqlite",
        kind="peer",
        func="bench.peer_huey:drain_incr",
        settings="consumer workers=1 thread (default), synchronous=FULL (SQLite's default), periodic off",
    ),
    System(
        key=W7_PG_CEILING,
        table="W7.small",
        label="raw psycopg loop, claim 100, INCR inline, complete 100",
        backend="postgres",
        kind="ceiling",
        func="bench.ceilings:psycopg_drain",
        params={"batch": 100, "job": "incr"},
        settings="as raw-psycopg-100 (W1), one blocking INCR per job in the loop",
    ),
    System(
        key=W7_SQLITE_CEILING,
        table="W7.small",
        label="raw sqlite3 loop, claim 100, INCR inline, complete 100",
        backend="sqlite",
        kind="ceiling",
        func="bench.ceilings:sqlite_drain",
        params={"batch": 100, "synchronous": "FULL", "job": "incr"},
        settings="as raw-sqlite-full (W1), one blocking INCR per job in the loop",
    ),
)


def all_systems() -> tuple[System, ...]:
    from bench.bouncer import BOUNCER_SYSTEMS
    from bench.rota_flow import ROTA_FLOW_SYSTEMS
    from bench.rota_issue12 import ROTA_ISSUE12_SYSTEMS
    from bench.rota_systems import ROTA_SYSTEMS

    return PEERS + ROTA_SYSTEMS + BOUNCER_SYSTEMS + ROTA_ISSUE12_SYSTEMS + ROTA_FLOW_SYSTEMS


def table(key: str) -> Table:
    return next(t for t in TABLES if t.key == key)


def select(systems: tuple[System, ...], only: str | None) -> list[System]:
    """Systems matching any token: a workload (W1), a table (W1.drain), `peers` (peers and
    ceilings), `rota`, `postgres`/`sqlite`, or a system key."""
    if not only:
        return list(systems)
    tokens = {t.strip().lower() for t in only.split(",") if t.strip()}

    def wanted(s: System) -> bool:
        names = {s.key, s.table.lower(), s.table.split(".")[0].lower(), s.kind, s.backend}
        if s.kind in ("peer", "ceiling"):
            names.add("peers")
        return bool(tokens & names)

    return [s for s in systems if wanted(s)]
