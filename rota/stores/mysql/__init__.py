"""The MySQL and MariaDB store (mysql:// and mariadb:// URLs): a backend in a folder of its
own — its session and pool (session.py), migrations and checks (migrate.py, sql/NNNN_*.sql),
hot path (hot_path.py) and named queries split by role (sql/queries/<role>.sql)."""

from __future__ import annotations

from .store import MySQLStore

__all__ = ["MySQLStore"]
