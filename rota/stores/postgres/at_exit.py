"""Connection pools still open when the interpreter exits are closed at its start (atexit).

A psycopg_pool.ConnectionPool runs threads: its workers and its scheduler. A pool still open
at exit and reachable only through a reference cycle (a store, its App, and back) is closed by
its finalizer during the interpreter's last garbage collection. On CPython 3.13 the pool's
threads no longer run by then, and the finalizer waits 5 s for each of them: a `rota worker`
on PostgreSQL ended about 20 s after it said it stopped, as did any script that used an App
without `app.close()`. atexit functions run before that, while the threads still run: the
close takes milliseconds. Only this process's pools: a forked child's copies are the parent's
(rota/stores/forks.py).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import weakref
from typing import Any, TypeVar

P = TypeVar("P")

_OPEN: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()  # pool: the pid that opened it


def closed_at_exit(pool: P) -> P:
    """Close `pool` when the interpreter exits, if it is still open then (and in this process)."""
    _OPEN[pool] = os.getpid()
    return pool


def _close_open_pools() -> None:
    me = os.getpid()
    for pool, pid in list(_OPEN.items()):
        if pid == me:
            with contextlib.suppress(Exception):  # closed already, or its server gone: exiting anyway
                pool.close(timeout=1.0)


atexit.register(_close_open_pools)
