"""The PostgreSQL backend: the store (store.py) and its parts, one role a module: the
connection and its statements (session.py), LISTEN/NOTIFY (listen.py, wake.py), failover,
migrations, vacuum and foreign sessions; its SQL in sql/queries/<role>.sql (named queries,
loaded by rota/stores/sqlstore/queries.py) and sql/migrations/NNNN_<name>.sql."""

from __future__ import annotations

from .store import PostgresStore

__all__ = ["PostgresStore"]
