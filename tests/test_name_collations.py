"""Names that differ only by trailing spaces, case or accents are different names on every
store. MySQL/MariaDB's PAD SPACE collations (utf8mb4_bin among them) compared 'a' and 'a '
as equal, so on that store alone a schedule 'nightly ' upserted over 'nightly', a lock
'a ' excluded 'a', a unique key 'x ' was deduplicated against 'x', a paused queue 'q '
paused 'q' and a limit pool or key 'l ' shares the room of 'l'. That one difference is kept and
documented (docs/how-to/deploy.md, "MySQL and MariaDB": a table-by-table NO PAD conversion
breaks name joins while it runs): on MySQL the trailing-space spellings are left out here, and
test_mysql_compares_names_with_trailing_spaces_as_equal pins what it does instead."""

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


def spellings(app: rota.App) -> list[str]:
    """SPELLINGS, but on MySQL/MariaDB (PAD SPACE) those that differ only by trailing spaces."""
    if app.store.dialect != "mysql":
        return SPELLINGS
    return [n for n in SPELLINGS if n == n.rstrip(" ")]


def _app(app_factory: Callable[..., rota.App]) -> rota.App:
    app = app_factory()

    @app.task(name="job")
    def job(n: int = 0) -> int:
        return n

    @app.task(limit=rota.Limit(1, by="k"), name="keyed")
    def keyed(k: str) -> str:
        return k

    for name in spellings(app):
        app.task(limit=rota.Limit(1, name=f"pool{name}"), name=f"pooled{name}")(lambda: None)
    app.migrate()
    app.prepare()  # what a worker does at start: declares the tasks, stores the limits
    return app


def test_schedules_differing_by_a_trailing_space_or_case_are_distinct(app_factory: Callable[..., rota.App]) -> None:
    app = _app(app_factory)
    names = spellings(app)
    for every, name in enumerate(names, start=60):
        app.add_schedule(f"nightly{name}", "job", every=every)
    assert sorted(s.name for s in app.list_schedules()) == sorted(f"nightly{n}" for n in names)
    assert [app.get_schedule(f"nightly{n}").name for n in names] == [f"nightly{n}" for n in names]


def test_locks_differing_by_case_do_not_exclude_each_other(app_factory: Callable[..., rota.App]) -> None:
    app = _app(app_factory)
    leases = [app.try_lock(f"lock{n}", ttl=30) for n in CASES]
    assert [lease is not None for lease in leases] == [True] * len(CASES)
    assert sorted(lock.name for lock in app.list_locks()) == sorted(f"lock{n}" for n in CASES)


def test_unique_keys_differing_by_a_trailing_space_or_case_are_not_deduplicated(
    app_factory: Callable[..., rota.App],
) -> None:
    app = _app(app_factory)
    names = spellings(app)
    job = app.tasks["job"]
    windowed = [job.options(key=f"w{n}", unique_for=600).enqueue(i).id for i, n in enumerate(names)]
    active = [job.options(key=f"a{n}").enqueue(i).id for i, n in enumerate(names)]
    assert len(set(windowed)) == len(names)
    assert len(set(active)) == len(names)
    # and each key still deduplicates against itself
    assert job.options(key=f"w{names[1]}", unique_for=600).enqueue(99).id == windowed[1]
    assert job.options(key=f"a{names[1]}").enqueue(99).id == active[1]


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
    names = spellings(app)
    assert sorted(limit.name for limit in app.store.list_limits() if limit.name.startswith("pool")) == sorted(
        f"pool{n}" for n in names
    )
    for n in names:
        app.tasks[f"pooled{n}"].enqueue()
        app.tasks["keyed"].enqueue(f"k{n}")
    claimed = app.store.claim(OWNER, 100, None, 30.0)  # one slot each: every run fits its own room
    assert len(claimed) == 2 * len(names)


def test_tasks_differing_by_a_trailing_space_or_case_are_declared_apart(app_factory: Callable[..., rota.App]) -> None:
    app = _app(app_factory)
    names = spellings(app)
    declared = app.store.declared_tasks()
    assert sorted(t for t in declared if t.startswith("pooled")) == sorted(f"pooled{n}" for n in names)


def test_mysql_compares_names_with_trailing_spaces_as_equal(app_factory: Callable[..., rota.App]) -> None:
    """The documented difference: on MySQL/MariaDB a key 'x ' is deduplicated against 'x'."""
    app = _app(app_factory)
    job = app.tasks["job"]
    first, second = job.options(key="x").enqueue(1).id, job.options(key="x ").enqueue(2).id
    assert (first == second) == (app.store.dialect == "mysql")
