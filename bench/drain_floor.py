"""The floor of a W1 drain on each engine: the cheapest SQL a claim + finish cycle could use,
on rota's own runs table, driven from Python with the drivers rota uses (psycopg, PyMySQL with
rota's converters), one thread, claims of `--batch` and a finish of the previous batch.

Each round, for each index variant, PostgreSQL then MariaDB (alternated in one invocation): a
fresh scratch database (bench_floor_*) migrated by rota (the same table, columns and indexes;
PostgreSQL's triggers dropped: the floor has no trigger work on either side), `--runs` pending
runs inserted by one INSERT ... SELECT, then drained:

- PostgreSQL: claim = one `UPDATE ... WHERE id IN (SELECT ... ORDER BY the claim index LIMIT n
  FOR UPDATE SKIP LOCKED) RETURNING` the 15 columns a claim hands back (a token per row from a
  sequence); finish = one `UPDATE ... FROM unnest(ids, tokens)` (the token checked); a commit each.
- MariaDB: claim = `SELECT` the same columns `FOR UPDATE SKIP LOCKED` by the claim index, one
  `UPDATE` of the counter (LAST_INSERT_ID) for the batch's tokens, one `UPDATE ... WHERE id IN`
  (the token from the id's place); finish = one `UPDATE ... WHERE (id, token) IN (...)`; a
  commit each.

Index variants (`--variants`): `full` (rota's), `min` (the primary key and the claim index
only), and `mysql-lean` (MariaDB without rota_runs_status and rota_runs_task_status, the two
listing indexes keyed on `status` that a claim and a finish both move; rota_runs_lease, which
the rescue needs, kept; compared with PostgreSQL's full runs, not run again). Printed per variant: each engine's median rate over the
rounds (min-max), MariaDB / PostgreSQL (the ratio of medians), client CPU and the server
backend's CPU per run (/proc: the servers must run on this machine), and each statement's
median wall time per run.

    PYTHONPATH=$PWD python -m bench.drain_floor [--runs 20000] [--rounds 3] [--batch 100]
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.dbs import DEFAULT_MYSQL_URL, DEFAULT_PG_URL, scratch_store

COLUMNS = (
    "id, task, args, kwargs, attempt, max_attempts, token, timeout, backoff, schedule, "
    "scheduled_for, started_at, lease_until, priority, due_at"
)
PG_CLAIM = f"""
UPDATE rota_runs SET status = 'running', owner = %(owner)s, token = nextval('rota_token_seq'),
    attempt = attempt + 1, started_at = now(), misfire_at = NULL,
    lease_until = now() + make_interval(secs => 30)
WHERE id IN (SELECT id FROM rota_runs
             WHERE status = 'pending' AND NOT held AND limit_name IS NULL AND rate_name IS NULL
               AND due_at <= now()
             ORDER BY (-priority::bigint), due_at, id LIMIT %(n)s FOR UPDATE SKIP LOCKED)
RETURNING {COLUMNS}"""
PG_FINISH = """
UPDATE rota_runs r SET status = 'succeeded', result = 'null', error = NULL, finished_at = now(),
    lease_until = NULL
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS b(id, token)
WHERE r.id = b.id AND r.token = b.token AND r.status = 'running'"""
MY_LOCK = f"""
SELECT {COLUMNS} FROM rota_runs FORCE INDEX (rota_runs_claim)
WHERE pending_held = 0 AND due_at <= UTC_TIMESTAMP(6) AND limit_name IS NULL AND rate_name IS NULL
ORDER BY priority DESC, due_at, id LIMIT %(n)s FOR UPDATE SKIP LOCKED"""
MY_TOKENS = "UPDATE rota_counters SET value = LAST_INSERT_ID(value + %(n)s) WHERE name = 'token'"
MY_CLAIM = """
UPDATE rota_runs SET status = 'running', owner = %(owner)s, token = %(base)s + FIND_IN_SET(id, %(idlist)s),
    attempt = attempt + 1, started_at = UTC_TIMESTAMP(6), misfire_at = NULL,
    lease_until = UTC_TIMESTAMP(6) + INTERVAL 30 SECOND
WHERE id IN %(ids)s"""
MY_FINISH = """
UPDATE rota_runs SET status = 'succeeded', result = 'null', error = NULL, finished_at = UTC_TIMESTAMP(6),
    lease_until = NULL
WHERE (id, token) IN %(pairs)s AND status = 'running'"""
FILL = {
    "postgres": "INSERT INTO rota_runs (task, scheduled_for, due_at, created_at) "
    "SELECT 't', now(), now(), now() FROM generate_series(1, %(n)s)",
    "mysql": "INSERT INTO rota_runs (task, scheduled_for, due_at, created_at) "
    "SELECT 't', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) FROM seq_1_to_{n}",
}
KEEP = {"postgres": {"rota_runs_pkey", "rota_runs_claim_from"}, "mysql": {"PRIMARY", "rota_runs_claim"}}
LEAN = {"rota_runs_status", "rota_runs_task_status"}


def _ticks(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Timer:
    """Wall time per statement kind."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)

    @contextmanager
    def __call__(self, kind: str) -> Iterator[None]:
        t = time.perf_counter()
        yield
        self.seconds[kind] += time.perf_counter() - t


def _pg_connect(url: str) -> tuple[Any, int]:
    import psycopg

    conn = psycopg.connect(url)
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
    conn.commit()
    return conn, int(pid)


def _my_connect(url: str) -> tuple[Any, int]:
    import pymysql

    from rota.stores.mysql.session import connect_kwargs

    kwargs = connect_kwargs(url, 5.0, 50)
    conn = pymysql.connect(**{**kwargs, "autocommit": False})
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        cur.execute("SELECT TID FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()")
        tid = cur.fetchone()[0]
    conn.commit()
    return conn, int(tid)


def _prepare(backend: str, url: str, variant: str, runs: int) -> None:
    """rota's schema, the variant's indexes (PostgreSQL: no triggers), the pending runs."""
    import rota

    app = rota.App(url, retention=None)
    app.migrate()
    app.close()
    conn, _ = (_pg_connect if backend == "postgres" else _my_connect)(url)
    cur = conn.cursor()
    if backend == "postgres":
        cur.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = 'rota_runs'::regclass AND NOT tgisinternal")
        for (name,) in cur.fetchall():
            cur.execute(f"DROP TRIGGER {name} ON rota_runs")
        cur.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'rota_runs'")
    else:
        cur.execute("SELECT DISTINCT index_name FROM information_schema.statistics "
                    "WHERE table_schema = DATABASE() AND table_name = 'rota_runs'")  # fmt: skip
    names = {str(r[0]) for r in cur.fetchall()}
    drop = names - KEEP[backend] if variant == "min" else set()
    if variant == "mysql-lean" and backend == "mysql":
        drop = LEAN & names
    for name in sorted(drop):
        if backend == "postgres":
            cur.execute(f"ALTER TABLE rota_runs DROP CONSTRAINT IF EXISTS {name}")
            cur.execute(f"DROP INDEX IF EXISTS {name}")
        else:
            cur.execute(f"ALTER TABLE rota_runs DROP INDEX `{name}`")
    cur.execute(FILL[backend].format(n=runs), {"n": runs})
    conn.commit()
    cur.execute("ANALYZE rota_runs" if backend == "postgres" else "ANALYZE TABLE rota_runs")
    if backend == "mysql":
        cur.fetchall()
    conn.commit()
    conn.close()


def _pg_cycle(conn: Any, batch: int, timer: Timer, held: list[tuple[int, int]]) -> list[tuple[int, int]]:
    cur = conn.cursor()
    with timer("claim UPDATE ... RETURNING"):
        cur.execute(PG_CLAIM, {"owner": "w", "n": batch})
        rows = cur.fetchall()
    with timer("claim COMMIT"):
        conn.commit()
    if held:
        with timer("finish UPDATE"):
            cur.execute(PG_FINISH, {"ids": [h[0] for h in held], "tokens": [h[1] for h in held]})
        with timer("finish COMMIT"):
            conn.commit()
    return [(int(r[0]), int(r[6])) for r in rows]


def _my_cycle(conn: Any, batch: int, timer: Timer, held: list[tuple[int, int]]) -> list[tuple[int, int]]:
    cur = conn.cursor()
    with timer("claim SELECT ... FOR UPDATE SKIP LOCKED"):
        cur.execute(MY_LOCK, {"n": batch})
        rows = cur.fetchall()
    claimed: list[tuple[int, int]] = []
    if rows:
        ids = [int(r[0]) for r in rows]
        with timer("claim tokens UPDATE"):
            cur.execute(MY_TOKENS, {"n": len(ids)})
            base = int(cur.lastrowid) - len(ids)
        with timer("claim UPDATE"):
            cur.execute(MY_CLAIM, {"owner": "w", "base": base, "idlist": ",".join(map(str, ids)), "ids": ids})
        claimed = [(i, base + k + 1) for k, i in enumerate(ids)]
    with timer("claim COMMIT"):
        conn.commit()
    if held:
        with timer("finish UPDATE"):
            cur.execute(MY_FINISH, {"pairs": held})
        with timer("finish COMMIT"):
            conn.commit()
    return claimed


def _drain(backend: str, url: str, batch: int) -> dict[str, Any]:
    conn, server = (_pg_connect if backend == "postgres" else _my_connect)(url)
    cycle: Callable[..., list[tuple[int, int]]] = _pg_cycle if backend == "postgres" else _my_cycle
    timer, done, held = Timer(), 0, []
    c0, s0, t0 = time.process_time(), _ticks(server), time.perf_counter()
    while True:
        claimed = cycle(conn, batch, timer, held)
        done += len(held)
        if not claimed:
            break
        held = claimed
    c1, s1, t1 = time.process_time(), _ticks(server), time.perf_counter()
    conn.close()
    us = 1e6 / done
    return {
        "rate": done / (t1 - t0),
        "client": us * (c1 - c0),
        "server": us * (s1 - s0),
        "statements": {k: us * v for k, v in timer.seconds.items()},
    }


def _one(backend: str, admin: str, variant: str, args: argparse.Namespace) -> dict[str, Any]:
    name = f"bench_floor_{os.getpid()}_{backend}"
    with scratch_store(backend, admin, name) as url:
        _prepare(backend, url, variant, args.runs)
        return _drain(backend, url, args.batch)


def _summary(variant: str, results: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
    medians = {}
    print(f"\n## {variant}")
    for backend, label in (("postgres", "PostgreSQL"), ("mysql", "MariaDB")):
        got = results[variant][backend] or results["full"][backend]  # (mysql-lean: PostgreSQL's full runs)
        rates = [r["rate"] for r in got]
        medians[backend] = statistics.median(rates)
        print(
            f"{label:10s} {medians[backend]:8,.0f} runs/s ({min(rates):,.0f}-{max(rates):,.0f}, n={len(rates)}), "
            f"client CPU {statistics.median(r['client'] for r in got):.1f} µs/run, "
            f"server backend {statistics.median(r['server'] for r in got):.1f} µs/run"
        )
        for kind in got[0]["statements"]:
            print(f"    {kind:42s} {statistics.median(r['statements'][kind] for r in got):6.1f} µs/run")
    print(f"MariaDB / PostgreSQL: {medians['mysql'] / medians['postgres']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--variants", default="full,min,mysql-lean")
    parser.add_argument("--pg-url", default=os.environ.get("BENCH_PG_URL", DEFAULT_PG_URL))
    parser.add_argument("--mysql-url", default=os.environ.get("BENCH_MYSQL_URL", DEFAULT_MYSQL_URL))
    args = parser.parse_args()
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - {"full", "min", "mysql-lean"})
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; valid: full, min, mysql-lean")
    results = {v: {"postgres": [], "mysql": []} for v in variants}  # type: dict[str, dict[str, list[Any]]]
    print(f"runs {args.runs}, batch {args.batch}, rounds {args.rounds}, load {os.getloadavg()[0]:.2f}")
    for _ in range(args.rounds):
        for variant in variants:
            for backend, admin in (("postgres", args.pg_url), ("mysql", args.mysql_url)):
                if not (variant == "mysql-lean" and backend == "postgres" and "full" in variants):
                    results[variant][backend].append(_one(backend, admin, variant, args))
    for variant in variants:
        _summary(variant, results)
    print(f"load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
