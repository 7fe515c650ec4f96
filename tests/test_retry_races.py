"""Issue 41, item 3: concurrent callers of App.retry_many (threads, each with its own App and
connection, and processes) retry each final run at most once, on both stores; App.retry
racing them keeps its contract (each call makes a run) without letting retry_many add a
second retry after it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import rota
from rota.stores.base import NewRun, Outcome

from .conftest import WITH_MYSQL, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


ERROR = '{"type": "Boom", "message": "no"}'
ROOT = Path(__file__).resolve().parent.parent


def failed_runs(app: rota.App, n: int) -> list[int]:
    """`n` runs of task x that failed (claimed and finished as a worker would)."""
    app.store.insert_runs([NewRun(task="x") for _ in range(n)])
    claimed = app.store.claim("w", n, None, 30)
    app.store.finish([Outcome(c.id, c.token, "failed", error=ERROR, history="{}") for c in claimed])
    return sorted(c.id for c in claimed)


def retries_of(app: rota.App) -> Counter[int]:
    return Counter(int(r.retry_of) for r in app.list_runs(limit=100_000) if r.retry_of is not None)


def together(calls: list[Callable[[], object]]) -> list[object]:
    """Run the calls on threads released at the same moment; their results in order."""
    barrier = threading.Barrier(len(calls))
    results: list[object] = [None] * len(calls)

    def body(i: int) -> None:
        barrier.wait()
        try:
            results[i] = calls[i]()
        except Exception as exc:  # reported by the assertion below
            results[i] = exc

    threads = [threading.Thread(target=body, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not [r for r in results if isinstance(r, Exception)], results
    return results


def test_concurrent_retry_many_calls_retry_each_failed_run_once(app_factory: Callable[..., rota.App]) -> None:
    apps = [app_factory() for _ in range(4)]
    for round_ in range(3):
        failed = failed_runs(apps[0], 300)
        counts = together([lambda a=a: a.retry_many(status="failed", task="x") for a in apps])
        made = retries_of(apps[0])
        assert all(made[i] == 1 for i in failed), f"round {round_}: {Counter(made[i] for i in failed)}"
        assert sum(counts) == len(failed), (round_, counts)  # type: ignore[arg-type]
        for run in apps[0].list_runs(status="pending", limit=100_000):
            apps[0].cancel(run.id)  # final, not failed: the next round retries only its own


def test_retry_racing_retry_many_never_gets_a_retry_many_retry_after_it(
    app_factory: Callable[..., rota.App],
) -> None:
    apps = [app_factory() for _ in range(3)]
    for _ in range(3):
        failed = failed_runs(apps[0], 40)
        explicit: list[int] = []

        def one_by_one(app: rota.App = apps[2], failed: list[int] = failed, explicit: list[int] = explicit) -> None:
            for run_id in failed:
                explicit.append(int(app.retry(run_id).id))

        together([lambda: apps[0].retry_many(task="x"), lambda: apps[1].retry_many(task="x"), one_by_one])
        by_run: dict[int, list[int]] = {}
        for r in apps[0].list_runs(limit=100_000):
            if r.retry_of is not None and int(r.retry_of) in failed:
                by_run.setdefault(int(r.retry_of), []).append(int(r.id))
        for run_id in failed:
            ids = sorted(by_run[run_id])
            mine = [i for i in ids if i in explicit]
            many = [i for i in ids if i not in explicit]
            assert len(mine) == 1 and len(many) <= 1, (run_id, ids, mine)
            # retry_many passes over a run retried before: its retry, if any, came first
            assert not many or many[0] < mine[0], (run_id, ids, mine)
        for run in apps[0].list_runs(status="pending", limit=100_000):
            apps[0].cancel(run.id)


def test_two_retry_calls_at_once_make_two_runs(app_factory: Callable[..., rota.App]) -> None:
    """App.retry's contract: each call makes a new run, also when two come at once."""
    apps = [app_factory() for _ in range(2)]
    (run_id,) = failed_runs(apps[0], 1)
    handles = together([lambda a=a: a.retry(run_id) for a in apps])
    assert len({h.id for h in handles}) == 2  # type: ignore[attr-defined]
    assert retries_of(apps[0])[run_id] == 2


SCRIPT = textwrap.dedent(
    """
    import sys, time
    import rota
    app = rota.App(sys.argv[1], retention=None)
    start = float(sys.argv[2])
    time.sleep(max(0.0, start - time.time()))
    print(app.retry_many(status="failed", task="x"))
    app.close()
    """
)


def test_two_processes_retry_many_at_once_retry_each_failed_run_once(
    app_factory: Callable[..., rota.App], db_url: str
) -> None:
    app = app_factory()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for round_ in range(3):
        failed = failed_runs(app, 500)
        start = time.time() + 2.0  # both processes imported and connected by then
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", SCRIPT, db_url, str(start)], env=env, stdout=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        counts = [int(p.communicate(timeout=120)[0].strip()) for p in procs]
        made = retries_of(app)
        assert all(made[i] == 1 for i in failed), f"round {round_}: {Counter(made[i] for i in failed)}"
        assert sum(counts) == len(failed), (round_, counts)
        for run in app.list_runs(status="pending", limit=100_000):
            app.cancel(run.id)


def test_concurrent_retry_many_calls_retry_each_run_of_an_exclusive_schedule_once(
    app_factory: Callable[..., rota.App],
) -> None:
    """Runs of an exclusive schedule are retried one by one through its overlap policy, after
    their batch committed: each is still retried once."""
    apps = [app_factory() for _ in range(3)]

    @apps[0].task(name="t")
    def t() -> None: ...

    apps[0].add_schedule("q", "t", every=3600, overlap="queue")
    apps[0].store.insert_runs([NewRun(task="t", schedule="q") for _ in range(30)])
    claimed = apps[0].store.claim("w", 30, None, 30)
    apps[0].store.finish([Outcome(c.id, c.token, "failed", error=ERROR, history="{}") for c in claimed])
    failed = [c.id for c in claimed]
    counts = together([lambda a=a: a.retry_many(task="t") for a in apps])
    made = retries_of(apps[0])
    assert all(made[i] == 1 for i in failed), Counter(made[i] for i in failed)
    assert sum(counts) == len(failed), counts  # type: ignore[arg-type]
