"""Named locks in the run store's `rota_locks` table (the default locks backend)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .models import LockInfo

if TYPE_CHECKING:
    from .stores.base import Store


class _HasStore(Protocol):
    @property
    def store(self) -> Store: ...


class StoreLocks:
    """Locks in the run store's `rota_locks` table (expiry from the database clock)."""

    def __init__(self, app: _HasStore) -> None:
        self.app = app

    def acquire(self, name: str, owner: str, ttl: float) -> int | None:
        return self.app.store.lock_acquire(name, owner, ttl)

    def renew(self, name: str, owner: str, token: int, ttl: float) -> bool:
        return self.app.store.lock_renew(name, owner, token, ttl)

    def release(self, name: str, owner: str, token: int) -> bool:
        return self.app.store.lock_release(name, owner, token)

    def list(self) -> list[LockInfo]:
        return self.app.store.list_locks()

    def clock(self) -> float | None:
        """The clock the expiry is judged on, in seconds, when it is this host's (SQLite:
        every process writes its own `now`), else None (PostgreSQL: the server's clock). A
        holder checks it besides its monotonic clock: a step of the host's clock (NTP, a
        resume from suspend) lets another process take the lock at once."""
        host_clock = getattr(self.app.store, "host_clock", None)
        return host_clock() if host_clock is not None else None


__all__ = ["StoreLocks"]
