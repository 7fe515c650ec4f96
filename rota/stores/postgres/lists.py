"""How the PostgreSQL store lists runs by task or schedule (schema version 4; the history
table of version 17), and reads the dashboard's charts (one statement per bucket, all in one
round trip).

rota_runs_task and rota_runs_schedule leave running runs out, so that a claim writes no
entry in them (it cannot be a HOT update: it changes `status`). A listing by task or
schedule that names no status takes the newest runs from that index and the newest running
ones from rota_runs_active, each read in id order through its own index, and merges them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...models import STATUSES
from ..base import RunFilter
from ..sqlstore.store import SqlStore

_PART = "(SELECT id FROM rota_runs{where} AND status {op} 'running' ORDER BY {order})"
_KEPT = "(SELECT id FROM rota_history{where} ORDER BY {order})"


def runs_suffix(suffix: str, flt: RunFilter) -> str:
    """`suffix` (" WHERE ... ORDER BY id DESC LIMIT n", read from the view rota_runs_all) as
    index reads merged, when the filter names a task or a schedule and no status: two of
    rota_runs, and rota_history's by task (schema 17; a schedule's runs are never there);
    else `suffix` unchanged."""
    if flt.status is not None or (flt.task is None and flt.schedule is None):
        return suffix
    where, _, order = suffix.partition(" ORDER BY ")
    parts = [_PART.format(where=where, op=op, order=order) for op in ("<>", "=")]
    if flt.schedule is None:
        parts.append(_KEPT.format(where=where, order=order))
    # `= ANY(ARRAY(...))`: the ids first, then each table's primary key probed for them; an IN
    # here let the planner walk the view's primary keys from the newest run until it met them
    # all (45 ms for a task's last 50 runs at 2,000,000 kept)
    return f" WHERE id = ANY(ARRAY({' UNION ALL '.join(parts)})) ORDER BY {order}"


def status_terms(store: SqlStore, flt: RunFilter, params: dict[str, Any]) -> list[str]:
    """PostgresStore._status_terms: a known status as a literal, not a parameter. The store's
    statements are prepared after a few calls (psycopg), and a cached generic plan for
    `status = $1` cannot use the partial indexes (rota_runs_active, rota_runs_unhappy and
    migration 0012's by task and schedule), whose predicates name the statuses: it walks the
    history instead (62 ms for a task's failed runs at 2,000,000 runs, against 0.05 ms). One
    statement text per status keeps each plan on its index."""
    if flt.status in STATUSES:
        return [f"status = '{flt.status}'"]
    return SqlStore._status_terms(store, flt, params)


def runs_where(store: SqlStore, flt: RunFilter) -> tuple[str, dict[str, Any]]:
    """PostgresStore._runs_where."""
    suffix, params = SqlStore._runs_where(store, flt)
    return runs_suffix(suffix, flt), params


def web_rows(store: Any, query: str, params: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    """PostgresStore.web_rows. A chart's buckets (parameter sets that differ only in `lo` and
    `hi`) are read by ONE statement: the bucket's query joined LATERAL to the list of buckets,
    so it is planned once, not once per bucket (a 7-day chart has 168; planning one over both
    tables of schema 17 cost more than running it). Other reads: the statements in pipeline
    mode, one transaction, one sync."""
    if len(params) > 1 and all(_same_but_bounds(p, params[0]) for p in params):
        sql = store.queries[query].replace("%(lo)s", "b.lo").replace("%(hi)s", "b.hi")
        args = {k: v for k, v in params[0].items() if k not in ("lo", "hi")}
        los, his = [float(p["lo"]) for p in params], [float(p["hi"]) for p in params]
        buckets = [list[Any]() for _ in params]
        with store._read() as s:
            rows = s.q_text(
                "SELECT b.i, q.* FROM unnest(%(los)s::float8[], %(his)s::float8[]) WITH ORDINALITY AS b(lo, hi, i)"
                f" CROSS JOIN LATERAL ({sql}) AS q ORDER BY b.i",
                los=los,
                his=his,
                **args,
            )
        for row in rows:
            buckets[int(row[0]) - 1].append(tuple(row[1:]))
        return buckets
    with store._session(False, pipeline=True) as s:
        for p in params:
            s.send(query, **p)
    return [list(rows) for rows in s.received]


def _same_but_bounds(p: Mapping[str, Any], first: Mapping[str, Any]) -> bool:
    return (
        "lo" in p
        and "hi" in p
        and {k: v for k, v in p.items() if k not in ("lo", "hi")}
        == {k: v for k, v in first.items() if k not in ("lo", "hi")}
    )
