"""Ports for the servers tests start (the dashboard, metrics, SMTP). Each pytest process
takes ports from its own block below the kernel's ephemeral range, so that neither another
xdist process nor an outgoing connection (a database client's) can take a port between the
probe here and the server's own bind, as a port the kernel handed out (bind to 0) could be."""

from __future__ import annotations

import itertools
import os
import socket

BASE = 20_000  # below ip_local_port_range (32768-60999 by default): never an outgoing port
BLOCK = 500  # ports per pytest process; gw0..gw23 stay below the ephemeral range
_turn = itertools.count()


def _process_index() -> int:
    """0 for gw0 (or no xdist), 1 for gw1, ..."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = name.removeprefix("gw")
    return int(digits) if digits.isdigit() else 0


def free_port() -> int:
    """A port of this process's block that nothing listens on now, a different one at each
    call (a server just stopped may still hold its last port)."""
    start = BASE + _process_index() * BLOCK
    for _ in range(BLOCK):
        port = start + next(_turn) % BLOCK
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {start}-{start + BLOCK - 1}")
