"""A hand-written zero date in a pending run's misfire_at (a client without strict mode, a
dump restored) must not corrupt rota_runs_misfire (migration 0024) when rota's strict
sessions later move the run (review of 0024): MariaDB computes an indexed virtual DATETIME
column under the session's sql_mode, so the zero date was the index entry under the hand
edit's mode and NULL under rota's (NO_ZERO_DATE): the entry was never removed, CHECK TABLE
found the index corrupted, and after that every query reading the index failed (1712)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from . import mysql_db
from .conftest import MYSQL, MYSQL_URL, store_url


@pytest.fixture(params=[MYSQL])
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    yield from store_url(request, tmp_path)


def _check(url: str) -> list[tuple[Any, ...]]:
    conn = mysql_db.admin(MYSQL_URL)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CHECK TABLE `{url.rsplit('/', 1)[1]}`.rota_runs EXTENDED")
            return list(cur.fetchall())
    finally:
        conn.close()


def test_a_zero_misfire_date_moved_by_rota_leaves_the_misfire_index_whole(app_factory: Any, db_url: str) -> None:
    app = app_factory()
    app.migrate()
    task = app.task(name="t")(lambda x: x)
    handles = [task.enqueue(i) for i in range(3)]
    for h in handles[:2]:
        mysql_db.execute(db_url, f"UPDATE rota_runs SET misfire_at = {mysql_db.ZERO_DATE} WHERE id = {int(h.id)}")
    assert app.store.cancel(int(handles[0].id), "by hand") is not None  # pending -> cancelled, strict session
    mysql_db.execute(
        db_url,
        f"UPDATE rota_runs SET status = 'failed', misfire_at = {mysql_db.ZERO_DATE} WHERE id = {int(handles[2].id)}",
    )
    with app.store._tx() as s:  # failed -> pending again in rota's strict session (as a retry would)
        s.q_text(f"UPDATE rota_runs SET status = 'pending' WHERE id = {int(handles[2].id)}")
    rows = _check(db_url)
    assert [r[3] for r in rows if r[2] in ("error", "Error")] == [], rows
    assert all(r[3] == "OK" for r in rows if r[2] == "status") and rows[-1][3] == "OK", rows
    with app.store._read() as s:  # the index read after CHECK TABLE: refused (1712) when it found it corrupted
        by_index = s.q_text(
            "SELECT id FROM rota_runs FORCE INDEX (rota_runs_misfire) WHERE misfire_pending < UTC_TIMESTAMP(6) ORDER BY id"
        )
    assert [int(r[0]) for r in by_index] == [int(handles[1].id), int(handles[2].id)]  # not the cancelled run
