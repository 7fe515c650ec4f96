"""Chooses the named-locks backend: Redis when the App has a locks URL, else the run store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lock_backend import LockBackend
from .store_locks import StoreLocks

if TYPE_CHECKING:
    from .app import App


def make_lock_backend(app: App) -> LockBackend:
    if app.locks_url:
        from .redis_locks import RedisLocks  # imports redis: only when asked for

        return RedisLocks(app.locks_url)
    return StoreLocks(app)


__all__ = ["make_lock_backend"]
