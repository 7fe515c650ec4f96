"""The SQLite backend: the store (store.py), its connections and writers' queue
(connection.py), its half of the flow claim (flow.py) and of transactional handlers
(handler_tx.py); its SQL in sql/queries/<role>.sql and sql/migrations/NNNN_<name>.sql."""

from __future__ import annotations

from .connection import sqlite_path
from .store import SQLiteStore

__all__ = ["SQLiteStore", "sqlite_path"]
