"""Named SQL: every backend defines the same queries and numbered migrations, from its own
folder (rota/stores/<backend>/sql/); each query is defined once across the folder's files,
and each fragment (rota/stores/sqlstore/queries.py) is known, used, and uses its parameters."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rota import lifecycle
from rota.stores.sqlstore import queries as loader
from rota.stores.sqlstore.queries import load_migrations, load_queries, query_sources, query_transitions

# Every backend with SQL of its own (a new one adds itself here, with what only it defines).
BACKENDS = ("postgres", "sqlite", "mysql")
NOW = {"postgres": "now()", "sqlite": ":now", "mysql": "UTC_TIMESTAMP(6)"}

# SQLite has no sequences: a claim reads the token counter and bumps it only when it claimed
# (a damaged counter starts again past the runs' tokens: token_rebase).
# Its finish runs one prepared UPDATE per outcome (executemany: no RETURNING), so it reads the
# runs its outcomes still hold first (finish_holding); PostgreSQL's finish returns them. Its
# refuse (one UPDATE per run: no DELETE inside) takes a refused rated run's start out of the
# rate's log in a statement before it (refuse_unlog; disown_unlog for disown); PostgreSQL's refuse
# and disown do it in a CTE.
# PostgreSQL only: the flow claim's planner setting (no bitmap scans while walking the keys
# near the head) and its one-statement take of limit keys after the advisory locks (SQLite,
# one writer with nothing changing meanwhile, takes them step by step).
ONLY = {
    "sqlite": {"next_token", "take_token", "token_rebase", "finish_holding", "refuse_unlog", "disown_unlog"},
    "postgres": {
        "flow_walk_plan",
        "claim_plan",
        "flow_take_limits",
        "move_history",
        "history_estimate",
    },  # 2 last: schema 17
    # MySQL/MariaDB orchestrates as SQLite does (the token counter, finish_holding, the unlog
    # statements), and has these of its own: the claim's first step that locks the due runs'
    # ids (no UPDATE ... RETURNING), what PostgreSQL's and SQLite's triggers do to rota_runs
    # itself (a MySQL trigger may not update its own table: ended_runs, release_dependents,
    # cancel_dependents), the change probes instead of NOTIFY (data_version, change_probe), the flow claim's
    # lock, the migrations table's probe, the claim's tokens in one statement (take_tokens) and the
    # tick pass's first lock, taken without waiting (take_tick).
    "mysql": {
        "next_token",
        "take_token",
        "token_rebase",
        "finish_holding",
        "refuse_unlog",
        "disown_unlog",
        "claim_ids",
        "take_tokens",
        "claim_in_queues_ids",
        "claim_ahead_ids",
        "claim_ahead_in_queues_ids",
        "ended_runs",
        "release_dependents",
        "cancel_dependents",
        "data_version",
        "change_probe",
        "flow_lock",
        "migrations_table",
        "take_tick",
        "tick_held",
    },
}


def test_every_backend_defines_the_same_named_queries() -> None:
    names = {backend: set(load_queries(backend, NOW[backend])) for backend in BACKENDS}
    shared = {backend: found - ONLY.get(backend, set()) for backend, found in names.items()}
    first = shared[BACKENDS[0]]
    for backend in BACKENDS:
        assert shared[backend] == first, f"{backend}: {sorted(shared[backend] ^ first)}"
        assert names[backend] >= ONLY.get(backend, set()), backend


def test_every_backend_has_the_same_migration_numbers() -> None:
    numbers = {backend: [(m.version, m.name) for m in load_migrations(backend)] for backend in BACKENDS}
    for backend in BACKENDS:
        assert numbers[backend] == numbers[BACKENDS[0]] and numbers[backend][0] == (1, "initial"), backend


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_fragment_is_known_used_and_uses_its_parameters(backend: str) -> None:
    sources = query_sources(backend)
    assert not sources.unused_fragments(), f"{backend}: fragments no query uses: {sorted(sources.unused_fragments())}"
    for name, block in [*sources.queries.items(), *sources.fragments.items()]:
        unknown = sources.uses(block) - set(sources.fragments)
        assert not unknown, f"{block.file}: {name} uses unknown fragments {sorted(unknown)}"
        unused = {p for p in block.params if "{{" + p + "}}" not in block.text}
        assert not unused, f"{block.file}: fragment {name} never uses its parameters {sorted(unused)}"
        assert not set(block.params) & set(sources.fragments), f"{block.file}: {name}'s parameter names a fragment"
    loaded = load_queries(backend, NOW[backend])
    left = {name: sql for name, sql in loaded.items() if "{{" in sql or "}}" in sql}
    assert not left, f"{backend}: unexpanded references in {sorted(left)}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_query_names_known_transitions(backend: str) -> None:
    named = query_transitions(backend)
    assert set(named) <= set(load_queries(backend, NOW[backend]))
    unknown = {name: t for name, ts in named.items() for t in ts if t not in lifecycle.BY_NAME}
    assert not unknown, f"{backend}: transitions not in rota/lifecycle.py: {unknown}"


def write(folder: Path, **files: str) -> None:
    (folder / "queries").mkdir(parents=True)
    for name, text in files.items():
        (folder / "queries" / f"{name}.sql").write_text(text)


@pytest.fixture
def fake_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The loader reading a backend folder of the test's own (tmp_path/sql)."""
    folder = tmp_path / "sql"
    monkeypatch.setattr(loader, "_folder", lambda _backend, *parts: folder.joinpath(*parts))
    return folder


def test_fragments_expand_with_arguments_and_indentation(fake_backend: Path) -> None:
    write(
        fake_backend,
        a="-- name: one\nWITH x AS (\n    {{pick(ANY(ARRAY(SELECT id FROM v)), 2)}}\n)\nSELECT {{cols}} FROM x\n",
        b="-- fragment: pick(ids, n)\n-- a comment line goes\nSELECT id FROM t\nWHERE id = {{ids}}\n  LIMIT {{n}}\n"
        "-- fragment: cols\nid, {now}\n",
    )
    assert load_queries("fake", "now()") == {
        "one": "WITH x AS (\n    SELECT id FROM t\n    WHERE id = ANY(ARRAY(SELECT id FROM v))\n      LIMIT 2\n)\nSELECT id, now() FROM x"
    }


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"a": "-- name: q\nSELECT 1\n", "b": "-- name: q\nSELECT 2\n"},
            "query 'q' is defined twice: in fake/sql/queries/a.sql and in fake/sql/queries/b.sql",
        ),
        ({"a": "-- name: q\nSELECT {{nope}}\n"}, "fake/sql/queries/a.sql: 'q' uses the unknown fragment 'nope'"),
        ({"a": "-- name: q\nSELECT {{f}}\n-- fragment: f\n{{f}}\n"}, "fragment 'f' uses itself"),
        (
            {"a": "-- name: q\nSELECT {{f(1)}}\n-- fragment: f(a, b)\n{{a}}{{b}}\n"},
            "gives fragment 'f' 1 argument(s), it takes 2",
        ),
    ],
)
def test_a_load_error_names_the_file_and_the_query(fake_backend: Path, files: dict[str, str], message: str) -> None:
    write(fake_backend, **files)
    with pytest.raises(RuntimeError, match=re.escape(message)):
        load_queries("fake", "now()")


def test_an_unused_fragment_is_found(fake_backend: Path) -> None:
    write(fake_backend, a="-- name: q\nSELECT 1\n-- fragment: spare\nSELECT 2\n")
    assert query_sources("fake").unused_fragments() == {"spare"}
