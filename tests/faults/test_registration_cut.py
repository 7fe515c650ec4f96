"""A worker's connection cut as it registers (review of issue 44): its registry row never
ends without its own lease. Before, the lease was a second statement after the row's: a cut
between them left the row without it (the failure only logged at debug), and the listings
judged the live worker by each viewer's lease for its whole life (lost while alive, to a
viewer with a shorter lease). Now the row and its lease are one statement: a cut loses both,
the start is retried, and the row is written whole."""

from __future__ import annotations

import time
from collections.abc import Callable

import rota

from ..conftest import make_app, start_worker, wait_for
from .proxy import FaultProxy

LEASE = 4.5


def test_a_worker_cut_as_it_writes_its_lease_registers_with_it(
    server_url: str, server_client: rota.App, proxies: Callable[..., FaultProxy]
) -> None:
    server_client.migrate()
    proxy = proxies(url=server_url)
    app = make_app(proxy.url(server_url), lease=LEASE)
    # forwarded, then its reply held: the statement that writes the lease (and, before, the
    # second one of the registration) never commits; the cut ends its transaction
    proxy.hold_after(b"rota_workers", b"lease = ")
    worker = start_worker(app)
    try:
        assert proxy.triggered.wait(30), "the worker never wrote its lease"
        time.sleep(0.2)
        proxy.cut()
        time.sleep(0.5)
        proxy.restore()

        def registered() -> bool:
            return any(w.id == worker.id and w.lease is not None for w in server_client.list_workers())

        wait_for(registered, 30, "the worker's row with its lease")  # before: the row, lease NULL for good
        wait_for(lambda: worker.state == "running", 30, "the worker to run")
        [row] = [w for w in server_client.list_workers() if w.id == worker.id]
        assert row.lease == LEASE and row.alive, row
    finally:
        proxy.restore()
        worker.stop(wait=True, timeout=10)
        app.close()
