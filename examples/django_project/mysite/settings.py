"""Settings of the example project: Django and rota share one database.

DATABASE_URL: sqlite:///path/db.sqlite3, postgresql://user@host/db (psycopg 3 backend) or
mysql://user:password@host/db (MySQL or MariaDB: Django's backend on mysqlclient; without it,
`import pymysql; pymysql.install_as_MySQLdb()` at the top of this file, see the Django tutorial).
rota uses Django's default database (rota.contrib.django), so a run enqueued with Django's
connection commits with the request's rows (see shop/views.py). Deploy with
`python manage.py migrate && python manage.py rota_migrate` (rota's tables must exist before
a transaction enqueues), then run workers with `python manage.py rota_worker`.
"""

from __future__ import annotations

import os
from urllib.parse import parse_qs, urlsplit

DATABASE_URL = os.environ.get("DATABASE_URL", "sqlite:///db.sqlite3")


def django_database(url: str) -> dict[str, object]:
    if url.startswith("sqlite:///"):
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": url.removeprefix("sqlite:///")}
    parts = urlsplit(url)
    options: dict[str, object] = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    mysql = parts.scheme in ("mysql", "mariadb")
    if mysql:  # Django's MySQL backend: mysqlclient (`pip install mysqlclient`)
        options = {"charset": "utf8mb4", **options}
    return {
        "ENGINE": "django.db.backends.mysql" if mysql else "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/"),
        "USER": parts.username or "",
        "PASSWORD": parts.password or "",
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "OPTIONS": options,
    }


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = False
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = ["rota.contrib.django", "shop"]
ROTA = {"APP": "shop.tasks:app"}  # the database: Django's default one
# Django's Tasks API (django.tasks; django-tasks before Django 6) on rota, with a schedule
TASKS = {
    "default": {
        "BACKEND": "rota.contrib.django.RotaBackend",
        "OPTIONS": {"SCHEDULES": {"daily-summary": {"task": "shop.tasks.summary", "cron": "0 6 * * *"}}},
    }
}
ROOT_URLCONF = "mysite.urls"
DATABASES = {"default": django_database(DATABASE_URL)}
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
