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


__all__ = ["StoreLocks"]
