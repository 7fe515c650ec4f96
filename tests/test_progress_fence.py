"""ctx.progress is written only while the run's token holds it (issue 43), also against a
takeover that commits while the write waits: the write reads the run locked, so a stale
worker's progress never lands over the new holder's."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlparse

import pytest

import rota

from .conftest import MYSQL, store_url


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres), MYSQL])
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """SQLite has one writer at a time: no takeover can commit while a write waits."""
    yield from store_url(request, tmp_path)


def _connect(url: str) -> Any:
    if url.startswith("postgres"):
        import psycopg

        return psycopg.connect(url)
    import pymysql

    parts = urlparse(url)
    return pymysql.connect(host=parts.hostname, port=parts.port or 3306, user=unquote(parts.username or ""),
                           password=unquote(parts.password or ""), database=parts.path.lstrip("/"))  # fmt: skip


def test_progress_from_a_worker_whose_run_is_taken_over_meanwhile_is_refused(app: rota.App) -> None:
    app.migrate()
    app.task(name="held")(lambda: None).enqueue()
    (claim,) = app.store.claim("w1", 1, None, 30.0, 1)
    takeover = _connect(app.database_url)  # another worker's takeover, not yet committed
    cur = takeover.cursor()
    cur.execute(f"UPDATE rota_runs SET token = token + 1000 WHERE id = {claim.id}")
    saved: list[set[int]] = []
    write = threading.Thread(
        target=lambda: saved.append(app.store.save_progress([(claim.id, claim.token, 0.5, "stale")]))
    )
    write.start()
    time.sleep(0.5)  # the write waits for the run's row (before the fix: it read the old token and wrote)
    takeover.commit()
    write.join(10)
    takeover.close()
    assert saved == [set()]
    assert app.store.progress_of(claim.id) is None
