"""rota's settings in a Django project: the `ROTA` dict of settings.py.

    ROTA = {
        "APP": "shop.tasks:app",              # the project's rota.App (module:attribute)
        "DATABASE_URL": "postgresql://...",   # default: Django's "default" database
    }

Both keys are optional. Without DATABASE_URL, rota uses the database of
`DATABASES["default"]` when it is PostgreSQL, MySQL/MariaDB or SQLite (so a run enqueued on
Django's connection commits with the request's rows); another engine needs DATABASE_URL.
"""

from __future__ import annotations

import importlib
from typing import Any
from urllib.parse import quote, urlencode

from ...app import App
from ...errors import ConfigurationError

KEYS = ("APP", "DATABASE_URL")
# OPTIONS of Django's PostgreSQL backend that are not libpq connection parameters
_DJANGO_ONLY = {"isolation_level", "assume_role", "pool", "server_side_binding", "cursor_factory"}


def rota_settings() -> dict[str, Any]:
    """settings.ROTA, checked: a dict with only the known keys."""
    from django.conf import settings

    value = getattr(settings, "ROTA", {})
    if not isinstance(value, dict):
        raise ConfigurationError(f"settings.ROTA must be a dict, got {type(value).__name__}")
    unknown = sorted(set(value) - set(KEYS))
    if unknown:
        raise ConfigurationError(f"settings.ROTA: unknown key(s) {', '.join(unknown)}; valid: {', '.join(KEYS)}")
    return value


def database_url(alias: str = "default") -> str:
    """ROTA["DATABASE_URL"], else the URL of Django's database `alias` (PostgreSQL, MySQL or SQLite)."""
    configured = rota_settings().get("DATABASE_URL")
    if configured:
        return str(configured)
    from django.db import connections

    return url_of(connections[alias].settings_dict)


def url_of(db: dict[str, Any]) -> str:
    """A rota database URL for a Django DATABASES entry (sqlite3, postgresql or mysql engine)."""
    engine = str(db.get("ENGINE", ""))
    name = str(db.get("NAME") or "")
    if engine.endswith("sqlite3"):
        if not name or name == ":memory:" or name.startswith("file:") or "mode=memory" in name:
            raise ConfigurationError(
                f"Django's SQLite database {name or '(no NAME)'!r} is in memory: rota needs a file "
                "(set NAME, and for tests DATABASES['default']['TEST']['NAME'], to a path)"
            )
        return f"sqlite:///{name}"
    if engine.endswith(("postgresql", "postgis")):
        options = {k: str(v) for k, v in (db.get("OPTIONS") or {}).items() if k not in _DJANGO_ONLY}
        return f"postgresql://{_auth(db)}{db.get('HOST') or ''}{_port(db)}/{quote(name, safe='')}{_query(options)}"
    if engine.endswith("mysql"):
        return _mysql_url(db, name)
    raise ConfigurationError(
        f"Django's database engine {engine!r} is not one rota runs on: set ROTA['DATABASE_URL'] "
        "to a postgresql://, mysql:// or sqlite:/// URL"
    )


def _mysql_url(db: dict[str, Any], name: str) -> str:
    """mysql://user:password@host:port/name for Django's MySQL backend (mysqlclient, or PyMySQL
    installed as MySQLdb): a HOST that is a path, or OPTIONS unix_socket, is the socket; OPTIONS
    ssl's ca is kept; the rest (charset, init_command, isolation_level) rota sets its own way."""
    options = dict(db.get("OPTIONS") or {})
    if "read_default_file" in options:
        raise ConfigurationError(
            "Django's MySQL database reads its settings from an option file (OPTIONS read_default_file), "
            "which rota cannot read: set ROTA['DATABASE_URL'] to its mysql:// URL"
        )
    host = str(db.get("HOST") or "")
    query: dict[str, str] = {}
    if host.startswith("/"):
        host, query["unix_socket"] = "localhost", host
    if options.get("unix_socket"):
        query["unix_socket"] = str(options["unix_socket"])
    ssl = options.get("ssl")
    if isinstance(ssl, dict) and ssl.get("ca"):
        query["ssl_ca"] = str(ssl["ca"])
    return f"mysql://{_auth(db)}{host or '127.0.0.1'}{_port(db)}/{quote(name, safe='')}{_query(query)}"


def _auth(db: dict[str, Any]) -> str:
    user = quote(str(db.get("USER") or ""), safe="")
    password = quote(str(db.get("PASSWORD") or ""), safe="")
    return f"{user}:{password}@" if password else (f"{user}@" if user else "")


def _port(db: dict[str, Any]) -> str:
    return f":{db['PORT']}" if db.get("PORT") else ""


def _query(options: dict[str, str]) -> str:
    return f"?{urlencode(options)}" if options else ""


def app_path() -> str | None:
    """ROTA["APP"] (module:attribute), or None."""
    path = rota_settings().get("APP")
    if path is not None and (not isinstance(path, str) or ":" not in path):
        raise ConfigurationError(
            f"settings.ROTA['APP'] must be 'module:attribute', e.g. 'shop.tasks:app', got {path!r}"
        )
    return path


_default_app: App | None = None


def get_app() -> App:
    """The project's App: ROTA["APP"] imported, else one App on `database_url()` (made once)."""
    global _default_app
    path = app_path()
    if path is not None:
        module, _, attr = path.partition(":")
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part, None)
        if not isinstance(obj, App):
            raise ConfigurationError(f"settings.ROTA['APP'] = {path!r} is a {type(obj).__name__}, not a rota.App")
        return obj
    if _default_app is None:
        _default_app = App(database_url())
    return _default_app


def __getattr__(name: str) -> Any:
    if name == "app":  # `rota worker rota.contrib.django.conf:app`: the project's App
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
