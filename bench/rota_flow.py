"""rota's flow-control workloads (W10, issue 20): W1's drain of no-op runs, one worker process at
concurrency 100, for a task with no limit, with `limit=100`, and with `Limit(1, by="key")`
over 1,000 keys. The first is W1's own drain; the difference is what a limit costs."""

from __future__ import annotations

import os

from bench.core import Backend, Ctx, Metrics, System
from bench.measure import measure_drain
from bench.rota_workloads import DRAIN_CONCURRENCY, database, load_app_module, nothing_left, start_workers

FLOW_ENV = {"BENCH_ROTA_FLOW": "1"}  # bench.rota_app registers its limited tasks

KEYS = 1000
CHUNK = 5000


def limited_drain(ctx: Ctx, backend: Backend, keyed: bool = False) -> Metrics:
    """ctx.jobs runs of a limited task drained by one worker (concurrency 100)."""
    os.environ.update(FLOW_ENV)
    with database(ctx, backend) as url:
        m = load_app_module(url)
        task = m.noop_keyed if keyed else m.noop_limited
        for offset in range(0, ctx.jobs, CHUNK):
            n = min(CHUNK, ctx.jobs - offset)
            task.enqueue_many([(((offset + i) % KEYS,), {}) if keyed else ((), {}) for i in range(n)])
        m.app.prepare()  # store the limits (a worker does too, at start)
        start = start_workers(ctx, url, 1, DRAIN_CONCURRENCY, env=FLOW_ENV)
        return measure_drain(ctx, ctx.jobs, start, nothing_left(m.app), pg_url=url)


def _system(key: str, label: str, backend: Backend, func: str, **params: object) -> System:
    return System(
        key=key,
        table="W10.limits",
        label=label,
        backend=backend,
        kind="rota",
        func=func,
        params={"backend": backend, **params},
        settings=f"run_worker(concurrency={DRAIN_CONCURRENCY})",
    )


def _systems() -> tuple[System, ...]:
    backends: tuple[tuple[Backend, str], ...] = (("postgres", "pg"), ("sqlite", "sqlite"))
    out: list[System] = []
    for backend, short in backends:
        out += [
            _system(f"rota-{short}-limits-none", "rota, no limit", backend, "bench.rota_workloads:drain", workers=1),
            _system(f"rota-{short}-limits-100", "rota, limit=100", backend, f"{__name__}:limited_drain"),
            _system(
                f"rota-{short}-limits-keyed",
                f"rota, Limit(1, by=key), {KEYS:,} keys",
                backend,
                f"{__name__}:limited_drain",
                keyed=True,
            ),
        ]
    return tuple(out)


ROTA_FLOW_SYSTEMS: tuple[System, ...] = _systems()
