"""Names that differ only by trailing spaces, case or accents are different names on every
store. MySQL/MariaDB's PAD SPACE collations (utf8mb4_bin among them) compared 'a' and 'a '
as equal, so on that store alone a schedule 'nightly ' upserted over 'nightly', a lock
'a ' excluded 'a', a unique key 'x ' was deduplicated against 'x', a paused queue 'q '
paused 'q' and a limit pool or key 'l ' shared the room of 'l'. Migration 0025 keys every
name with a binary NO PAD collation (docs/how-to/deploy.md, "Names on MySQL/MariaDB")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import rota

from .conftest import WITH_MYSQL, store_url

OWNER = "collations-test"
# 'x', 'x ' and 'x  ' collide under PAD SPACE; 'X' and 'x́' would under a *_ci / *_ai collation.
SPELLINGS = ["x", "x ", "x  ", "X", "\u00e9", "e\u0301", "E"]
# Lock and queue names allow no space nor accent (their patterns): case alone tells them apart.
CASES = ["x", "X"]


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


def _app(app_factory: Callable[..., rota.App]) -> rota.App:
    app = app_factory()

    @app.task(name="job")
    def job(n: int = 0) -> int:
        return n

    @app.task(limit=rota.Limit(1, by="k"), name="keyed")
    def keyed(k: str) -> str:
        return k

    for name in SPELLINGS:
        app.task(limit=rota.Limit(1, name=f"pool{name}"), name=f"pooled{name}")(lambda: None)
    app.migrate()
    app.prepare()  # what a worker does at start: declares the tasks, stores the limits
    return app


def test_schedules_differing_by_a_trailing_space_or_case_are_distinct(app_factory: Callable[..., rota.App]) -> None:
    app = _app(app_factory)
    for every, name in enumerate(SPELLINGS, start=60):
        app.add_schedule(f"nightly{name}", "job", every=every)
    assert sorted(s.name for s in app.list_schedules()) == sorted(f"nightly{n}" for n in SPELLINGS)
    assert [app.get_schedule(f"nightly{n}").name for n in SPELLINGS] == [f"nightly{n}" for n in SPELLINGS]


def test_locks_differing_by_case_do_not_exclude_each_other(app_factory: Callable[..., rota.App]) -> None:
    app = _app(app_factory)
    leases = [app.try_lock(f"lock{n}", ttl=30) for n in CASES]
    assert [lease is not None for lease in leases] == [True] * len(CASES)
    assert sorted(lock.name for lock in app.list_locks()) == sorted(f"lock{n}" for n in CASES)


def test_unique_keys_differing_by_a_trailing_space_or_case_are_not_deduplicated(
    app_factory: Callable[..., rota.App],
) -> None:
    app = _app(app_factory)
    job = app.tasks["job"]
    windowed = [job.options(key=f"w{n}", unique_for=600).enqueue(i).id for i, n in enumerate(SPELLINGS)]
    active = [job.options(key=f"a{n}").enqueue(i).id for i, n in enumerate(SPELLINGS)]
    assert len(set(windowed)) == len(SPELLINGS)
    assert len(set(active)) == len(SPELLINGS)
    # and each key still deduplicates against itself
    assert job.options(key=f"w{SPELLINGS[1]}", unique_for=600).enqueue(99).id == windowed[1]
    assert job.options(key=f"a{SPELLINGS[1]}").enqueue(99).id == active[1]


def test_paused_queues_differing_by_case_are_distinct(app_factory: Callable[..., rota.App]) -> None:
    app = _app(app_factory)
    for n in CASES[1:]:
        app.pause_queue(f"q{n}", by=f"by{n}")
    app.tasks["job"].options(queue="qx").enqueue(1)
    queues = {q.name: (q.paused, q.paused_by) for q in app.list_queues()}
    assert queues == {"qx": (False, None), **{f"q{n}": (True, f"by{n}") for n in CASES[1:]}}
    assert [c.task for c in app.store.claim(OWNER, 10, None, 30.0)] == ["job"]  # 'qx' is not paused


def test_limit_pools_and_keys_differing_by_a_trailing_space_or_case_have_rooms_of_their_own(
    app_factory: Callable[..., rota.App],
) -> None:
    app = _app(app_factory)
    assert sorted(limit.name for limit in app.store.list_limits() if limit.name.startswith("pool")) == sorted(
        f"pool{n}" for n in SPELLINGS
    )
    for n in SPELLINGS:
        app.tasks[f"pooled{n}"].enqueue()
        app.tasks["keyed"].enqueue(f"k{n}")
    claimed = app.store.claim(OWNER, 100, None, 30.0)  # one slot each: every run fits its own room
    assert len(claimed) == 2 * len(SPELLINGS)


def test_tasks_differing_by_a_trailing_space_or_case_are_declared_apart(app_factory: Callable[..., rota.App]) -> None:
    app = _app(app_factory)
    declared = app.store.declared_tasks()
    assert sorted(t for t in declared if t.startswith("pooled")) == sorted(f"pooled{n}" for n in SPELLINGS)


@pytest.mark.mysql
def test_migration_25_keeps_the_stored_names_and_tells_them_apart_afterwards() -> None:
    """A database of version 24 (its tables utf8mb4_bin, PAD SPACE) with a schedule 'nightly '
    migrates to 25 in place: the schedule keeps its name, 'nightly' is then a schedule of its
    own, and no column of rota's tables is left with a PAD SPACE collation."""
    from tests import mysql_db

    from .conftest import MYSQL_URL, make_app, require

    require("mysql")
    with mysql_db.database(MYSQL_URL) as url:
        app = make_app(url)
        try:
            app.task(name="job")(lambda: None)
            app.migrate()
            tables = [
                t
                for (t,) in _rows(
                    url,
                    "SELECT TABLE_NAME FROM information_schema.TABLES"
                    " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME <> 'rota_migrations'",
                )
            ]
            for table in tables:  # back to version 24's collation
                mysql_db.execute(url, f"ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
            mysql_db.execute(url, "DELETE FROM rota_migrations WHERE version = 25")
            app.add_schedule("nightly ", "job", every=60)
            with pytest.raises(rota.ConfigurationError, match="already exists"):
                app.add_schedule("nightly", "job", every=60)  # the collision 0025 ends
            assert app.migrate() == ["0025_nopad_names"]
            app.add_schedule("nightly", "job", every=60)
            assert sorted(s.name for s in app.list_schedules()) == ["nightly", "nightly "]
        finally:
            app.close()
        padded = _rows(
            url,
            "SELECT TABLE_NAME, COLUMN_NAME, COLLATION_NAME FROM information_schema.COLUMNS"
            " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME <> 'rota_migrations' AND COLLATION_NAME IS NOT NULL"
            " AND COLLATION_NAME NOT IN ('utf8mb4_nopad_bin', 'utf8mb4_0900_bin')",
        )
        assert padded == []


def _rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    import pymysql

    from tests import mysql_db

    conn = pymysql.connect(**mysql_db._parts(url), database=url.rsplit("/", 1)[1], autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return list(cur.fetchall())
    finally:
        conn.close()
