"""The lifecycle table (rota/lifecycle.py) and the stores' statements agree: every statement
that changes a run names transitions of the table, and every transition has statements, in
every store."""

from __future__ import annotations

import re

import pytest

from rota import lifecycle
from rota.stores.queries import load_queries, query_transitions

DIALECTS = ("postgres", "sqlite")
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
    assert all(name.startswith("probe_") for name in nothing), nothing  # only write probes name none


def trigger_transitions(dialect: str) -> set[str]:
    """Transitions made by a database trigger, named in a migration's `transition:` comment."""
    from importlib import resources

    folder = resources.files("rota.stores") / "sql" / dialect
    text = "\n".join(f.read_text() for f in folder.iterdir() if f.name[:4].isdigit())
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
