"""Database connections inherited across fork().

A forked child (a handler that forks, a pre-fork web server that imported the app) holds
copies of its parent's sockets: the parent's sessions on the server. Used in the child, two
processes talk on one session; closed in the child (`app.close()`, a pool's finalizer, an
exit), the driver says goodbye (PostgreSQL's Terminate, MySQL's COM_QUIT) and the server ends
the PARENT's session, whose next statement fails with "server closed the connection".

So in every child, right after the fork: each tracked connection's descriptor is pointed at
/dev/null (the child's copy only: the parent's socket is untouched), whatever the child then
does with the connection object (close it, drop it) reaches no server; and each store drops
its pools (`after_fork`) and opens its own connections at its next use.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from typing import Any, Protocol, TypeVar

C = TypeVar("C")


class ForkAware(Protocol):
    def after_fork(self) -> None: ...


_CONNECTIONS: weakref.WeakSet[Any] = weakref.WeakSet()  # anything with fileno()
_HOLDERS: weakref.WeakSet[Any] = weakref.WeakSet()


def track(connection: C) -> C:
    """Silence `connection` (its `fileno()`) in every child forked from now on."""
    _CONNECTIONS.add(connection)
    return connection


def fork_safe(holder: ForkAware) -> None:
    """Call `holder.after_fork()` in every child forked from now on (after the silencing)."""
    _HOLDERS.add(holder)


def _after_fork_in_child() -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        for connection in list(_CONNECTIONS):
            with contextlib.suppress(Exception):  # closed already, or no descriptor
                fd = connection.fileno()
                if fd >= 0:
                    os.dup2(devnull, fd)
    finally:
        os.close(devnull)
    for holder in list(_HOLDERS):
        holder.after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
