"""A worker's connection to MySQL/MariaDB cut at a chosen moment, through a TCP proxy: in
the middle of a claim, a heartbeat, a finish (before its COMMIT, or after it with the reply
lost), and a client's enqueue (idem). MySQL's statements travel as text, so the proxy finds
the moment by what the statement says. What DESIGN promises: nothing lost, no run executed
twice (no lease was lost: the cut is shorter than a lease), the worker logs "database is
back" and carries on. (test_scenarios_outage.py cuts PostgreSQL's and MySQL's connections
for longer than a lease, and loses a claim's reply.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import rota

from ..conftest import MYSQL, make_app, store_url
from ..procs import WorkerProcs, wait_until
from .conftest import APP, all_final, enqueue_rec, no_tracebacks, starts
from .invariants import check_invariants, read_log
from .proxy import FaultProxy


@pytest.fixture(params=[MYSQL])
def server_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from store_url(request, tmp_path)


# The statement a phase's cut follows (the first packet that holds the first pattern, then
# the second): the claim's token counter update (plain and flow claims), the heartbeat's
# locking read, the finish's locking read of the outcomes' runs.
PHASES: dict[str, tuple[str, tuple[bytes, ...], float]] = {
    "claim": ("hold_after", (b"UPDATE rota_counters",), 0.2),
    "heartbeat": ("hold_after", (b"SELECT id, cancel_requested FROM rota_runs",), 1.5),
    "finish": ("hold_after", (b"SELECT id, token, (exclusive",), 0.2),
    "finish-reply": ("hold_replies_after", (b"SELECT id, token, (exclusive", b"COMMIT"), 0.2),
}


@pytest.mark.parametrize("phase", list(PHASES))
def test_a_cut_in_the_middle_of_a_worker_statement_loses_nothing_and_runs_nothing_twice(
    phase: str,
    server_url: str,
    server_client: rota.App,
    proxies: Callable[..., FaultProxy],
    workers: Callable[[str], WorkerProcs],
    exec_log: Path,
) -> None:
    """One worker behind the proxy; once it is idle the proxy waits for the phase's
    statement, holds the connections (the statement ran; before its COMMIT, or with the
    COMMIT's reply held back for `finish-reply`), then cuts every connection for 0.5 s.
    Every run ends succeeded, executed once, one attempt; the worker says it is back."""
    how, patterns, seconds = PHASES[phase]
    proxy = proxies(url=server_url)
    procs = workers(proxy.url(server_url))
    procs.start(APP, concurrency=4, lease=2.0, poll=0.1)
    warm = enqueue_rec(server_client, 1, start=100)
    wait_until(all_final(server_client, warm), 30, "the first run to end")
    time.sleep(0.3)
    getattr(proxy, how)(*patterns)
    ids = enqueue_rec(server_client, 6, seconds=seconds)
    assert proxy.triggered.wait(15), f"the worker never sent the {phase} statement"
    time.sleep(0.3)  # held mid-transaction: its locks stay taken meanwhile
    proxy.cut()
    time.sleep(0.5)
    proxy.restore()
    wait_until(all_final(server_client, ids), 30, "every run to end")
    runs = check_invariants(server_client, exec_log, enqueued=warm + ids, leases_lost=False)
    started = read_log(exec_log).starts
    assert {i: (runs[i].status, runs[i].attempt, len(started[i])) for i in ids} == {i: ("succeeded", 1, 1) for i in ids}
    assert starts(exec_log) == 7
    assert "database is back" in procs.output(0)
    assert procs.procs[0].poll() is None
    no_tracebacks(procs)


@pytest.mark.parametrize("reply_lost", [False, True], ids=["before-commit", "reply-lost"])
def test_an_enqueue_cut_midway_raises_and_its_keyed_retry_makes_one_run(
    reply_lost: bool,
    server_url: str,
    server_client: rota.App,
    proxies: Callable[..., FaultProxy],
    workers: Callable[[str], WorkerProcs],
    exec_log: Path,
) -> None:
    """A client's enqueue whose connection is cut while its INSERT waits for COMMIT (nothing
    written) or after its COMMIT, before the reply (written): either way the enqueue raises
    DatabaseTransient, and the retry the docs recommend (the same key, unique_for) makes
    the run or finds it. It runs once."""
    proxy = proxies(url=server_url)
    app = make_app(proxy.url(server_url))
    try:

        @app.task(name="faults.rec", pass_context=True)
        def rec(ctx: rota.RunContext, i: int, seconds: float = 0.0) -> None: ...

        keyed = rec.options(key="cut-enqueue", unique_for=3600)
        rec.enqueue(-1)  # connected, migrated: the next statement is the insert
        if reply_lost:
            proxy.hold_replies_after(b"INSERT INTO rota_runs", b"COMMIT")
        else:
            proxy.hold_after(b"INSERT INTO rota_runs")
        raised: list[BaseException] = []
        thread = threading.Thread(target=_enqueue_into, args=(keyed, raised))
        thread.start()
        assert proxy.triggered.wait(10), "the enqueue never sent its insert"
        time.sleep(0.2)
        proxy.cut()
        thread.join(10)
        assert len(raised) == 1 and isinstance(raised[0], rota.DatabaseTransient), raised
        proxy.restore()
        kept = [r for r in server_client.list_runs(limit=100) if r.key == "cut-enqueue"]
        assert len(kept) == int(reply_lost)  # committed only when the reply was lost
        again = keyed.enqueue(7)
        assert again.created is not reply_lost
        assert [again.id] == ([str(kept[0].id)] if kept else [again.id])
    finally:
        app.close()
    procs = workers(server_url)
    procs.start(APP, concurrency=2, lease=2.0, poll=0.1)
    wait_until(all_final(server_client, [again.id]), 30, "the run to end")
    runs = check_invariants(server_client, exec_log, leases_lost=False)
    assert runs[str(again.id)].status == "succeeded" and len(read_log(exec_log).starts[str(again.id)]) == 1
    assert [r.key for r in server_client.list_runs(limit=100)].count("cut-enqueue") == 1


def _enqueue_into(task: Any, raised: list[BaseException]) -> None:
    try:
        task.enqueue(7)
    except BaseException as exc:
        raised.append(exc)
