"""The lifecycle table (rota/lifecycle.py) and the stores' statements agree: every statement
that changes a run names transitions of the table, and every transition has statements, in
every store. The docs' tables (docs/concepts/lifecycle.md) list the same transitions, with
the same from and to states, and the same states."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rota import lifecycle
from rota.stores.sqlstore.queries import load_migrations, load_queries, query_transitions

DIALECTS = ("postgres", "sqlite", "mysql")
DOCS = Path(__file__).resolve().parent.parent / "docs" / "concepts" / "lifecycle.md"
CHANGES_A_RUN = re.compile(r"\b(UPDATE|INSERT\s+INTO|DELETE\s+FROM|COPY)\s+rota_runs\b", re.IGNORECASE)


def run_changing(dialect: str) -> set[str]:
    return {name for name, sql in load_queries(dialect, "now()").items() if CHANGES_A_RUN.search(sql)}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_statement_that_changes_a_run_names_its_transitions(dialect: str) -> None:
    named = query_transitions(dialect)
    changing = run_changing(dialect)
    assert changing >= {"claim", "start", "finish", "hand_back", "rescue", "request_cancel"}
    missing = sorted(changing - named.keys())
    assert not missing, f"{dialect}: statements that change runs without a `-- transition:` line: {missing}"
    unknown = {name: t for name, ts in named.items() for t in ts if t not in lifecycle.BY_NAME}
    assert not unknown, f"{dialect}: transitions not in rota/lifecycle.py: {unknown}"
    nothing = sorted(name for name in changing if not named[name])
    # only write probes name none, and PostgreSQL's history sweep (schema 17), which moves a
    # succeeded run to rota_history as it is: where a run is kept is not a transition
    assert all(name.startswith("probe_") or name == "move_history" for name in nothing), nothing


def trigger_transitions(dialect: str) -> set[str]:
    """Transitions made by a database trigger, named in a migration's `transition:` comment."""
    text = "\n".join(m.sql for m in load_migrations(dialect))
    return {n.strip() for line in re.findall(r"transition: ([a-z_, ]+)", text) for n in line.split(",")}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_transition_has_its_statements(dialect: str) -> None:
    named = query_transitions(dialect)
    made = {t for ts in named.values() for t in ts}
    database = {t.name for t in lifecycle.TRANSITIONS if t.actor == lifecycle.DATABASE}
    made |= trigger_transitions(dialect) & database
    assert not [t.name for t in lifecycle.TRANSITIONS if t.name not in made]


def test_the_table_names_only_known_states_and_every_state_is_reached() -> None:
    states = set(lifecycle.STATES)
    for t in lifecycle.TRANSITIONS:
        assert set(t.from_states) <= states and set(t.to_states) <= states, t
        assert t.actor in {lifecycle.CLIENT, lifecycle.WORKER, lifecycle.ANY_WORKER, lifecycle.DATABASE}
        assert t.checks and t.description
    reached = {s for t in lifecycle.TRANSITIONS for s in t.to_states}
    assert reached == states
    assert len(lifecycle.BY_NAME) == len(lifecycle.TRANSITIONS)
    assert "| start | held | running | owner |" in lifecycle.table_markdown()


def docs_table(text: str, heading: str) -> tuple[list[str], list[list[str]]]:
    """The header and rows of the table under `## heading` of a Markdown page."""
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = section.strip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return table[0], table[2:]  # the header; the row under it is the |---| line


def _states(cell: str) -> set[str]:
    """A from or to cell: state names, comma-separated; "(new run)" or "(deleted)": none."""
    return set() if cell.startswith("(") else {state.strip() for state in cell.split(",")}


def docs_mismatches(text: str) -> list[str]:
    """Where the page's tables and rota/lifecycle.py disagree: a transition missing or unknown,
    its from or to states or who makes it; a state missing or unknown."""
    header, rows = docs_table(text, "Transitions")
    assert header == ["transition", "from", "to", "who", "what it checks"], header
    names = [row[0].strip("`") for row in rows]
    documented = dict(zip(names, rows, strict=True))
    wrong = [f"{name}: listed twice" for name in sorted({n for n in names if names.count(n) > 1})]
    wrong += [f"{t.name}: missing" for t in lifecycle.TRANSITIONS if t.name not in documented]
    wrong += [f"{name}: not in rota/lifecycle.py" for name in sorted(documented.keys() - lifecycle.BY_NAME.keys())]
    for name, (_, src, dst, who, _checks) in documented.items():
        t = lifecycle.BY_NAME.get(name)
        if t is not None and _states(src) != set(t.from_states):
            wrong.append(f"{name}: from {src!r}, the code says {', '.join(t.from_states)}")
        if t is not None and _states(dst) != set(t.to_states):
            wrong.append(f"{name}: to {dst!r}, the code says {', '.join(t.to_states)}")
        if t is not None and t.actor not in who:
            wrong.append(f"{name}: who {who!r}, the code says {t.actor}")
    header, rows = docs_table(text, "States")
    assert header[0] == "state", header
    shown = set().union(*(_states(row[0]) for row in rows))
    wrong += [f"state {s!r}: missing" for s in lifecycle.STATES if s not in shown]
    wrong += [f"state {s!r}: not in rota/lifecycle.py" for s in sorted(shown - set(lifecycle.STATES))]
    return wrong


def test_the_docs_tables_match_the_lifecycle_table() -> None:
    """docs/concepts/lifecycle.md lists every transition of rota/lifecycle.py and no other,
    each with its from and to states and who makes it, and every state."""
    assert docs_mismatches(DOCS.read_text()) == []


def test_the_docs_check_catches_a_row_missing_unknown_or_wrong() -> None:
    text = DOCS.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `skip_unkeyed` |"))
    assert docs_mismatches(text.replace(row + "\n", "")) == ["skip_unkeyed: missing"]
    assert docs_mismatches(text.replace("| `skip_unkeyed` |", "| `skip_unkeyd` |")) == [
        "skip_unkeyed: missing",
        "skip_unkeyd: not in rota/lifecycle.py",
    ]
    wrong_from = text.replace(row, row.replace("| due, due later, made ahead |", "| due, made ahead |"))
    code = ", ".join(lifecycle.BY_NAME["skip_unkeyed"].from_states)
    assert docs_mismatches(wrong_from) == [f"skip_unkeyed: from 'due, made ahead', the code says {code}"]
    assert docs_mismatches(text.replace("| waiting on parents | `pending` |", "| waiting | `pending` |")) == [
        "state 'waiting on parents': missing",
        "state 'waiting': not in rota/lifecycle.py",
    ]


def test_state_of_reads_each_state_from_a_run_record(db_url: str) -> None:
    from datetime import timedelta

    import rota
    from rota.stores.base import Outcome
    from rota.stores.records import REFUSED

    from .conftest import make_app

    clock = rota.FakeClock()
    app = make_app(db_url, clock=clock)

    @app.task(name="t", retries=1)
    def t() -> None: ...

    def state(h: rota.RunHandle) -> str:
        return lifecycle.state_of(h.refresh(), app.store.now())

    later = t.options(delay=timedelta(seconds=60)).enqueue()
    a, b, c = t.enqueue(), t.enqueue(), t.enqueue()
    assert (state(later), state(a)) == (lifecycle.DUE_LATER, lifecycle.DUE)
    claimed = sorted(app.store.claim("w", 3, None, 30.0, 1), key=lambda x: x.id)
    assert [state(h) for h in (a, b, c)] == [lifecycle.STARTED, lifecycle.HELD, lifecycle.HELD]
    app.cancel(c.id)
    assert state(c) == lifecycle.CANCEL_REQUESTED
    app.store.hand_back([(x.id, x.token) for x in claimed], "stop")
    assert [state(h) for h in (a, b, c)] == [lifecycle.HANDED_BACK, lifecycle.DUE, "cancelled"]
    app.add_schedule("q", "t", every=3600, overlap="queue")
    first, second = app.trigger("q"), app.trigger("q")
    assert (state(first), state(second)) == (lifecycle.DUE, lifecycle.QUEUED)
    # a tick given back by a worker that lacks its task is due later, not "made ahead"
    (held,) = [x for x in app.store.claim("w", 10, None, 30.0, 10) if x.id == int(first.id)]
    app.store.finish([Outcome(held.id, held.token, REFUSED, error='{"type": "TaskNotFound"}')])
    assert state(first) == lifecycle.DUE_LATER
    app.close()
