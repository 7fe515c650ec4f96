"""What a hot/history split of `rota_runs` would buy on PostgreSQL (issue 19, target 1), measured
before building it: the same claim and finish statements on two layouts, side by side.

- `one-table`: today's schema (every migration), today's `claim` and `finish_succeeded`.
- `split`: the same schema, but `rota_runs` keeps only the indexes the active work needs
  (claim, due, held, exclusive, key, tick, misfire, flow) and final runs move, in the finish's
  own statement (`DELETE ... RETURNING` into `INSERT`), to `rota_history`, which has the
  listing and pruning indexes instead (task, schedule, finished, unhappy, retry_of, tick).

Each round drains `--runs` no-op runs (a transaction finishes a `--batch` and claims the next, as a
busy worker's finish-and-claim does) once per layout,
in a fresh database, the layouts' order alternating; `--history N` first puts N final runs in
the history (the same table for one-table). It prints the PostgreSQL backend's CPU and the
client's wall time per run, medians over the rounds with the spread. A probe, not the product:
the split layout here has no answer yet for the tick uniqueness across both tables, the
triggers a move must fire (schedules, dependents, limits), or the listings over both tables.

    .venv/bin/python -m bench.split_probe --rounds 5 --runs 20000 --history 0
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench.dbs import DEFAULT_PG_URL, _drop_db, _recreate_db

# Indexes only final runs use (listings, pruning, retries): on the history alone in the split.
HISTORY_ONLY = ("finished", "task", "schedule", "unhappy", "unhappy_schedule", "unhappy_task", "retry_of")
FINISH_MOVE = """
WITH v AS MATERIALIZED (
    SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token, e->>2 AS result, (e->>3)::float8 AS started
    FROM json_array_elements(%(rows)s::json) AS e
),
gone AS (
    DELETE FROM rota_runs r USING v
    WHERE r.id = ANY(ARRAY(SELECT id FROM v)) AND r.id = v.id AND r.token = v.token
      AND r.status = 'running'
    RETURNING r.*, v.result AS v_result
)
INSERT INTO rota_history ({columns})
SELECT {moved} FROM gone
RETURNING id
"""


# The `lean` layout: one table, today's successful finish without its schedule, dependent and
# limit CTEs (what those cost a no-op run, apart from the move).
LEAN_FINISH = """
WITH v AS MATERIALIZED (
    SELECT (e->>0)::bigint AS id, (e->>1)::bigint AS token, e->>2 AS result, (e->>3)::float8 AS started
    FROM json_array_elements(%(rows)s::json) AS e
)
UPDATE rota_runs r
SET status = 'succeeded', result = v.result, error = NULL, finished_at = now(), lease_until = NULL,
    attempt = CASE WHEN v.started IS NOT NULL AND r.started_at IS NULL THEN r.attempt + 1 ELSE r.attempt END,
    started_at = coalesce(r.started_at, now() - make_interval(secs => v.started))
FROM v
WHERE r.id = ANY(ARRAY(SELECT id FROM v)) AND r.id = v.id AND r.token = v.token AND r.status = 'running'
RETURNING r.id
"""


# The `bare` layout's statements: the floor's tables, and a claim and a move with nothing but
# what a no-op run needs (no held runs, misfire, cancel or flow tests; no schedule or
# dependent locks; one CASE-free SET).
BARE_CLAIM = """
UPDATE rota_runs SET status = 'running', owner = %(owner)s, token = nextval('rota_token_seq'),
    attempt = attempt + 1, started_at = now(), lease_until = now() + make_interval(secs => %(lease)s)
WHERE id = ANY(ARRAY(
    SELECT id FROM rota_runs
    WHERE status = 'pending' AND NOT held AND due_at <= now() AND limit_name IS NULL AND rate_name IS NULL
    ORDER BY priority DESC, due_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED))
RETURNING id, task, args, kwargs, attempt, max_attempts, token
"""
BARE_MOVE = """
WITH gone AS (
    DELETE FROM rota_runs
    WHERE id = ANY(ARRAY(SELECT (e->>0)::bigint FROM json_array_elements(%(rows)s::json) AS e))
    RETURNING *
)
INSERT INTO rota_history ({columns})
SELECT {moved} FROM gone
RETURNING id
"""


def _pg_cpu(pid: int) -> float:
    """User + system CPU seconds of local process `pid` (the server runs on this host)."""
    import os

    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _columns(conn: Any) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = 'rota_runs' ORDER BY ordinal_position"
    ).fetchall()
    return [r[0] for r in rows]


def _split(conn: Any, drop: bool = True) -> str:
    """Turns the migrated schema into the split layout; returns its finish statement. With
    `drop` false the active table keeps every index (the `move` layout). (Schema 17's own
    history table, view and trigger make way for the probe's.)"""
    conn.execute("DROP VIEW rota_runs_all")
    conn.execute("DROP TABLE rota_history")
    conn.execute("CREATE TABLE rota_history (LIKE rota_runs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
    conn.execute("ALTER TABLE rota_history ADD PRIMARY KEY (id)")
    for name in (*HISTORY_ONLY, "tick"):
        definition = conn.execute("SELECT pg_get_indexdef(%s::regclass)", (f"rota_runs_{name}",)).fetchone()[0]
        made = definition.replace(f"rota_runs_{name} ON", f"rota_history_{name} ON").replace(
            ".rota_runs ", ".rota_history "
        )
        conn.execute(made)
        if name != "tick" and drop:
            conn.execute(f"DROP INDEX rota_runs_{name}")
    return _move(conn, FINISH_MOVE, "v_result")


def _move(conn: Any, template: str, result: str) -> str:
    """`template` with the history's columns, and what a successful finish sets."""
    columns = _columns(conn)
    moved = {"status": "'succeeded'", "result": result, "finished_at": "now()", "lease_until": "NULL"}
    select = ", ".join(moved.get(c, c) for c in columns)
    return template.format(columns=", ".join(columns), moved=select)


def _floor(conn: Any) -> str:
    """The split with only what a no-op drain needs (the active work's primary key and claim
    index; the history's primary key): the floor any layout of these statements can reach."""
    finish = _split(conn)
    rows = conn.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
        " AND tablename IN ('rota_runs', 'rota_history') AND indexname NOT LIKE '%%_pkey'"
        " AND indexname <> 'rota_runs_claim'"
    ).fetchall()
    for (index,) in rows:
        conn.execute(f'DROP INDEX "{index}"')
    return finish


def _fill(conn: Any, table: str, runs: int, status: str) -> None:
    finished = "now()" if status != "pending" else "NULL"
    conn.execute(
        f"INSERT INTO {table} (task, status, scheduled_for, due_at, finished_at, attempt, started_at)"
        f" SELECT 'noop', %s, now(), now(), {finished}, 1, now() FROM generate_series(1, %s)",
        (status, runs),
    )


@contextmanager
def _database(admin_url: str, layout: str) -> Iterator[Any]:
    import psycopg

    import rota

    name = f"bench_split_probe_{layout.replace('-', '_')}"
    url = _recreate_db(admin_url, name)
    rota.App(url).store.close()  # every migration
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            yield conn
    finally:
        _drop_db(admin_url, name)


def _drain(conn: Any, claim_sql: str, finish: str, runs: int, batch: int) -> tuple[float, float]:
    """Claims and finishes every pending run, as a busy worker does: each transaction
    finishes the batch before and claims the next. Returns (server CPU s, wall s)."""
    import json

    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    claim = {"owner": "probe", "limit": batch, "start": batch, "lease": 30.0, "now": None}
    cpu0, wall0 = _pg_cpu(pid), time.perf_counter()
    done, got = 0, list[Any]()
    while True:
        with conn.transaction():
            if got:
                rows = json.dumps([[r[0], r[6], "null", None] for r in got])
                done += len(conn.execute(finish, {"rows": rows, "now": None}).fetchall())
            got = conn.execute(claim_sql, claim).fetchall()
        if not got:
            break
    assert done == runs, (done, runs)
    return _pg_cpu(pid) - cpu0, time.perf_counter() - wall0


def _statements(conn: Any, layout: str) -> tuple[str, str]:
    """Makes `layout` in the migrated database; returns its claim and finish statements."""
    from rota.stores.sqlstore.queries import load_queries

    queries = load_queries("postgres", "coalesce(%(now)s::timestamptz, now())")
    if layout == "one-table":
        return queries["claim"], queries["finish_succeeded"]
    if layout == "no-trigger":  # today's, without the row trigger a move fires (schema 17)
        conn.execute("DROP TRIGGER rota_run_moved ON rota_runs")
        return queries["claim"], queries["finish_succeeded"]
    if layout == "split":
        return queries["claim"], _split(conn)
    if layout == "move":
        return queries["claim"], _split(conn, drop=False)
    if layout == "lean":
        return queries["claim"], LEAN_FINISH
    if layout == "floor":
        return queries["claim"], _floor(conn)
    assert layout == "bare", layout
    _floor(conn)
    return BARE_CLAIM, _move(conn, BARE_MOVE, "'null'")


def one(admin_url: str, layout: str, runs: int, batch: int, history: int) -> tuple[float, float]:
    with _database(admin_url, layout) as conn:
        claim, finish = _statements(conn, layout)
        final = "rota_runs" if layout == "lean" else "rota_history"  # (schema 17 keeps succeeded runs there)
        if history:
            _fill(conn, final, history, "succeeded")
        _fill(conn, "rota_runs", runs, "pending")
        conn.execute("VACUUM ANALYZE")
        measured = _drain(conn, claim, finish, runs, batch)
        kept = conn.execute(
            "SELECT (SELECT count(*) FROM rota_runs WHERE status = 'succeeded')"
            " + (SELECT count(*) FROM rota_history WHERE status = 'succeeded')"
        ).fetchone()[0]
        assert kept == runs + history, (layout, kept, runs + history)  # every run final, none lost
        return measured


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.split_probe", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--history", type=int, default=0, help="final runs kept before the drain")
    parser.add_argument("--pg-url", default=DEFAULT_PG_URL)
    parser.add_argument("--layouts", default="one-table,split", help="of one-table, lean, move, split, floor, bare")
    args = parser.parse_args(argv)
    layouts = args.layouts.split(",")
    results: dict[str, list[tuple[float, float]]] = {layout: [] for layout in layouts}
    for i in range(args.rounds):
        order = layouts if i % 2 == 0 else layouts[::-1]
        for layout in order:
            cpu, wall = one(args.pg_url, layout, args.runs, args.batch, args.history)
            results[layout].append((cpu, wall))
            print(
                f"round {i + 1} {layout:9} server {cpu / args.runs * 1e6:6.1f} µs/run  wall {wall / args.runs * 1e6:6.1f} µs/run"
            )
    print(f"\n{args.runs:,} runs, batches of {args.batch}, {args.history:,} final runs kept, {args.rounds} rounds")
    print("| layout | server CPU µs/run (median, min-max) | wall µs/run (median, min-max) |\n|---|--:|--:|")
    for layout, got in results.items():
        cpus = [c / args.runs * 1e6 for c, _ in got]
        walls = [w / args.runs * 1e6 for _, w in got]
        print(f"| {layout} | {_spread(cpus)} | {_spread(walls)} |")


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


if __name__ == "__main__":
    main()
