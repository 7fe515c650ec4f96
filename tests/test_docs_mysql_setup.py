"""The deploy guide's MySQL/MariaDB set-up, run as written: its CREATE DATABASE, CREATE USER
and GRANT statements (names made unique for the test), then `rota migrate` as the migrating
user and a worker's write check and an enqueue as the other. The guide used to list CREATE,
ALTER, INDEX, DROP and TRIGGER alone for `rota migrate`, which then failed: SELECT denied."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import rota
from rota.cli import main

from .conftest import require

PAGE = Path(__file__).resolve().parent.parent / "docs" / "how-to" / "deploy.md"
BLOCK = re.compile(r"<!-- test: mysql-setup -->\s*\n```sql\n(.*?)\n```", re.S)


def _statements(suffix: str) -> list[str]:
    (sql,) = BLOCK.findall(PAGE.read_text())
    sql = re.sub(r"\brota\.\*", f"rota_t_{suffix}.*", sql)
    sql = sql.replace("CREATE DATABASE rota ", f"CREATE DATABASE rota_t_{suffix} ")
    sql = sql.replace("'rota_migrate'@", f"'rm_{suffix}'@").replace("'rota'@", f"'rw_{suffix}'@")
    return [s.strip() for s in sql.split(";") if s.strip()]


@pytest.mark.mysql
def test_the_deploy_guides_mysql_users_can_migrate_and_work() -> None:
    require("mysql")
    from tests.mysql_db import _parts, admin

    admin_url = os.environ.get("ROTA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/mysql")
    suffix = uuid.uuid4().hex[:10]
    parts: dict[str, Any] = _parts(admin_url)
    server = f"{parts['host']}:{parts['port']}"
    conn = admin(admin_url)
    try:
        with conn.cursor() as cur:
            for statement in _statements(suffix):
                cur.execute(statement)
        migrate = CliRunner().invoke(
            main, ["migrate", "--database-url", f"mysql://rm_{suffix}:secret-m@{server}/rota_t_{suffix}"]
        )
        assert migrate.exit_code == 0, migrate.output
        app = rota.App(f"mysql://rw_{suffix}:secret@{server}/rota_t_{suffix}")
        app.store.check_writable()  # what a worker's start runs

        @app.task(name="t")
        def t() -> None: ...

        assert t.enqueue().refresh().status == "pending"
        app.close()
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS rota_t_{suffix}")
            for user in (f"rm_{suffix}", f"rw_{suffix}"):
                cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
        conn.close()
