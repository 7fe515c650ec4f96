"""Settings of the test project: DATABASE_URL (sqlite:///path, postgresql://... or mysql://...), shared by
Django and rota (settings.ROTA names only the App: the database is Django's)."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

URL = os.environ["DATABASE_URL"]
if URL.startswith("sqlite:///"):
    path = URL.removeprefix("sqlite:///")
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": path, "TEST": {"NAME": path + ".test"}}}
elif URL.startswith("mysql://"):  # Django's MySQL backend on mysqlclient, or on PyMySQL as MySQLdb
    if os.environ.get("DJANGO_MYSQL_DRIVER") == "pymysql":
        import pymysql

        pymysql.install_as_MySQLdb()
    parts = urlsplit(URL)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.mysql",
            "NAME": parts.path.lstrip("/"),
            "USER": parts.username or "",
            "PASSWORD": parts.password or "",
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "OPTIONS": {"charset": "utf8mb4"},
            "TEST": {"NAME": os.environ["DJANGO_TEST_DATABASE"], "CHARSET": "utf8mb4", "COLLATION": "utf8mb4_bin"},
        }
    }
else:
    parts = urlsplit(URL)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": parts.path.lstrip("/"),
            "USER": parts.username or "",
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "TEST": {"NAME": os.environ["DJANGO_TEST_DATABASE"]},
        }
    }
SECRET_KEY = "test-only"
INSTALLED_APPS = ["rota.contrib.django", "orders"]
ROTA = {"APP": "orders.tasks:app"}
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
TASKS = {
    "default": {
        "BACKEND": "rota.contrib.django.RotaBackend",
        "OPTIONS": {"SCHEDULES": {"nightly-count": {"task": "orders.tasks.count_orders", "cron": "0 3 * * *"}}},
    }
}
