"""A worker whose database goes away does not spin while it waits for it. Before, MySQL's
watch thread (rota.worker.wakeups: the quick change probe every 10-20 ms) opened a new
connection at every look, TLS context and all: a worker cut off from MariaDB burned about 70 %
of a core for as long as the outage lasted. A failed look now backs off (LOOK_BACKOFF doubling
to LOOK_BACKOFF_MAX); the poll still claims meanwhile, and the worker comes back as before."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import rota

from ..procs import WorkerProcs, cpu_seconds, wait_until
from .conftest import APP, all_final, enqueue_rec, starts
from .proxy import FaultProxy

WINDOW = 3.0
# Of one core, over the window, while the database refuses every connection (before: ~0.7).
CEILING = 0.25


def test_a_worker_cut_off_from_its_database_waits_without_spinning(
    server_url: str,
    server_client: rota.App,
    proxies: Callable[..., FaultProxy],
    workers: Callable[[str], WorkerProcs],
    exec_log: Path,
) -> None:
    proxy = proxies(url=server_url)
    procs = workers(proxy.url(server_url))
    first = enqueue_rec(server_client, 2)
    procs.start(APP, concurrency=4, lease=2.0, poll=0.1)
    wait_until(lambda: starts(exec_log) >= 2, 30, "the first runs to start")
    wait_until(all_final(server_client, first), 30, "the first runs to end")
    proxy.cut()
    time.sleep(1.0)  # the worker meets the outage
    pid = procs.procs[0].pid
    before, at = cpu_seconds(pid), time.monotonic()
    time.sleep(WINDOW)
    share = (cpu_seconds(pid) - before) / (time.monotonic() - at)
    assert share < CEILING, f"the worker used {share:.0%} of a core while its database was away"
    proxy.restore()
    later = enqueue_rec(server_client, 2, start=10)
    wait_until(all_final(server_client, later), 30, "the runs enqueued after the outage to end")
    assert procs.procs[0].poll() is None
