"""Runs made by a process that does not declare their task (rota trigger, rota retry,
retry_many, backfill, another app's schedule ticks) get their limit and rate keys from the
declarations a worker stored at start (rota/limit_specs.py), on both stores. A key only the
declaring code can compute (a callable by=) waits unresolved until a declaring worker keys
it: never unlimited."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import rota
from rota.limit_specs import UNRESOLVED
from rota.stores.base import Outcome

from .conftest import WITH_MYSQL, store_url


@pytest.fixture(params=WITH_MYSQL)
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """This suite runs on MySQL/MariaDB too (conftest.WITH_MYSQL)."""
    yield from store_url(request, tmp_path)


START = datetime(2030, 1, 1, 0, 0, 30, tzinfo=UTC)
ERROR = '{"type": "Boom", "message": "no"}'


def _gates(app: rota.App) -> dict[str, tuple[Any, ...]]:
    with app.store._read() as s:  # type: ignore[attr-defined]
        rows = s.q_text("SELECT id, limit_name, limit_key, rate_name, rate_key FROM rota_runs")
    return {str(r[0]): tuple(r[1:]) for r in rows}


def _declaring(app_factory: Callable[..., rota.App], **options: Any) -> rota.App:
    """The worker's app: declares the limited tasks and stores them (prepare)."""
    app = app_factory(**options)

    @app.task(limit=rota.Limit(1, by="customer_id"), rate=rota.Rate(50, per=60), name="export")
    def export(customer_id: int, fmt: str = "csv", region: str = "eu") -> None: ...

    @app.task(limit=rota.Limit(1, by=("region", "fmt")), name="by_default")
    def by_default(customer_id: int, fmt: str = "csv", region: str = "eu") -> None: ...

    @app.task(limit=rota.Limit(1, by=lambda order, **_: order["shop"]), name="by_call")
    def by_call(order: dict[str, str]) -> None: ...

    app.migrate()
    app.prepare()
    return app


def test_triggers_and_retries_from_a_process_without_the_task_carry_its_stored_limit(
    app_factory: Callable[..., rota.App],
) -> None:
    worker = _declaring(app_factory)
    client = app_factory()  # declares nothing: as `rota trigger` and `rota retry` are
    client.add_schedule("pos", "export", every=3600, args=[7], overlap="concurrent")
    client.add_schedule("kw", "export", every=3600, kwargs={"customer_id": 7, "fmt": "json"}, overlap="concurrent")
    client.add_schedule("dflt", "by_default", every=3600, args=[1], overlap="concurrent")
    ids = [client.trigger(name).id for name in ("pos", "kw", "dflt")]
    gates = _gates(client)
    assert [gates[i] for i in ids] == [
        ("export", "7", "export", ""),
        ("export", "7", "export", ""),
        ("by_default", '["eu", "csv"]', None, None),  # as the declaring code keys it
    ]
    (claimed,) = [c for c in worker.store.claim("w", 10, None, 30.0) if c.task == "export"]
    assert worker.store.claim("w", 10, None, 30.0) == []  # customer 7's other run waits
    worker.store.finish([Outcome(claimed.id, claimed.token, "failed", error=ERROR, history="{}")])
    retry = client.retry(str(claimed.id))
    assert _gates(client)[retry.id] == ("export", "7", "export", "")


def test_retry_many_and_backfill_from_a_process_without_the_task_carry_its_stored_limit(
    app_factory: Callable[..., rota.App],
) -> None:
    clock = rota.FakeClock(START)
    worker = _declaring(app_factory, clock=clock)
    client = app_factory(clock=clock)
    client.add_schedule("pos", "export", every=60, args=[7], overlap="concurrent")
    refs = client.backfill("pos", start=START - timedelta(minutes=2), end=START)  # 23:59 and 00:00
    assert len(refs) == 2 and {_gates(client)[r.id] for r in refs} == {("export", "7", "export", "")}
    claimed = worker.store.claim("w", 10, None, 30.0)
    assert len(claimed) == 1  # one per customer
    worker.store.finish([Outcome(claimed[0].id, claimed[0].token, "failed", error=ERROR, history="{}")])
    assert client.retry_many(task="export") == 1
    (retry,) = [r for r in client.list_runs(status="pending") if r.retry_of is not None]
    assert _gates(client)[retry.id] == ("export", "7", "export", "")
    # the declaring process's own retry_many keys its retries too (from its code)
    handle = worker.tasks["export"].enqueue(5)
    (mine,) = [c for c in worker.store.claim("w", 10, None, 30.0) if str(c.id) == handle.id]
    worker.store.finish([Outcome(mine.id, mine.token, "failed", error=ERROR, history="{}")])
    assert worker.retry_many(task="export") == 1
    (again,) = [r for r in worker.list_runs(status="pending") if r.retry_of == str(mine.id)]
    assert _gates(worker)[again.id] == ("export", "5", "export", "")


def test_a_callable_key_waits_unresolved_until_a_declaring_worker_keys_it(
    app_factory: Callable[..., rota.App],
) -> None:
    worker = _declaring(app_factory)
    client = app_factory()
    client.add_schedule("a", "by_call", every=3600, args=[{"shop": "a"}], overlap="concurrent")
    first, second = client.trigger("a").id, client.trigger("a").id
    assert _gates(client)[first] == (UNRESOLVED, "", None, None)  # no limit has that name: no claim takes it
    other = app_factory()

    @other.task(name="unrelated")
    def unrelated() -> None: ...

    other.prepare()  # a worker that does not declare by_call
    assert other.store.claim("w2", 10, None, 30.0) == []
    (claimed,) = worker.store.claim("w", 10, None, 30.0)  # keys them first, then one per shop
    assert claimed.task == "by_call"
    assert {_gates(client)[i] for i in (first, second)} == {("by_call", "a", None, None)}
    assert worker.store.claim("w", 10, None, 30.0) == []


def test_a_deploy_that_removes_a_limit_removes_it_from_runs_made_elsewhere(
    app_factory: Callable[..., rota.App],
) -> None:
    _declaring(app_factory)
    client = app_factory()
    client.add_schedule("pos", "export", every=3600, args=[7], overlap="concurrent")
    newer = app_factory()

    @newer.task(name="export")
    def export(customer_id: int, fmt: str = "csv", region: str = "eu") -> None: ...

    newer.prepare()
    run_id = client.trigger("pos").id
    assert _gates(client)[run_id] == (None, None, None, None)


def test_a_worker_started_before_the_first_limit_deploy_takes_limited_runs_under_their_limit(
    app_factory: Callable[..., rota.App], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("rota.stores.sqlstore.limits.FLOW_RECHECK", 0.0)
    old = app_factory()

    @old.task(name="export")
    def export(customer_id: int) -> None: ...

    old.migrate()
    old.prepare()  # no limit or rate in the database yet: its claims are plain ones
    assert old.store.claim("old", 10, None, 30.0) == []
    _declaring(app_factory)  # the first deploy with limits
    client = app_factory()
    client.add_schedule("pos", "export", every=3600, args=[7], overlap="concurrent")
    for _ in range(3):
        client.trigger("pos")
    assert len(old.store.claim("old", 10, None, 30.0)) == 1  # it asked again: one per customer
    assert old.store.claim("old", 10, None, 30.0) == []


def test_a_tick_made_by_a_worker_of_another_app_carries_the_stored_limit(
    app_factory: Callable[..., rota.App],
) -> None:
    from .test_schedules import poll_once

    clock = rota.FakeClock(START)
    _declaring(app_factory, clock=clock)
    other = app_factory(clock=clock)

    @other.task(name="unrelated")
    def unrelated() -> None: ...

    other.add_schedule("pos", "export", every=60, kwargs={"customer_id": 9}, overlap="concurrent")
    clock.advance(timedelta(seconds=45))  # 00:01:15: the 00:01 tick is due
    poll_once(other)
    (tick,) = [r for r in other.list_runs(schedule="pos") if r.status == "pending"]
    assert _gates(other)[tick.id] == ("export", "9", "export", "")


class _Task:
    """What limit_specs reads of a declared task (rota.tasks.Task), for a handler `fn`."""

    def __init__(self, fn: Callable[..., Any], by: Any) -> None:
        from rota.limits import gate

        self.opts = type("Opts", (), {"limit": rota.Limit(1, by=by), "rate": None, "pass_context": False})()
        self.fn = fn
        self.limit_gate = gate("t", fn, self.opts.limit, False)  # type: ignore[attr-defined]
        self.rate_gate = None


def _both(fn: Callable[..., Any], by: Any, args: list[Any], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """The key the declaring code gives a call, and the one the stored spec gives it."""
    import json

    from rota.limit_specs import stamp_spec, task_spec
    from rota.limits import stamp
    from rota.stores.base import NewRun

    task = _Task(fn, by)
    code, stored = NewRun(task="t"), NewRun(task="t", args=json.dumps(args), kwargs=json.dumps(kwargs))
    stamp(code, task, args, kwargs)
    spec = task_spec(task)
    assert spec is not None
    stamp_spec(stored, spec)
    return code.limit_key, stored.limit_key


def test_the_stored_spec_keys_a_call_as_the_declaring_code_does() -> None:
    def f(a: int, b: str = "x", /, c: Any = None, *rest: Any, d: int = 4, **more: Any) -> None: ...

    def g(region: str, account: int = 0, *, shard: list[int] | None = None) -> None: ...

    cases: list[tuple[Callable[..., Any], Any, list[Any], dict[str, Any]]] = [
        (f, "a", [1], {}),
        (f, "b", [1], {}),
        (f, "b", [1, "y"], {}),
        (f, "c", [1, "y", {"k": [1, 2]}], {}),
        (f, "c", [1], {"c": "z"}),
        (f, "d", [1, "y", 3, 4, 5], {}),
        (f, "d", [1], {"d": 7}),
        (f, ("a", "d"), [1], {"d": 7, "e": 1}),
        (g, "region", ["eu"], {}),
        (g, ("region", "account"), [], {"region": "us", "account": 3}),
        (g, "shard", ["eu"], {"shard": [1, 2]}),
        (g, "shard", ["eu"], {}),
    ]
    for fn, by, args, kwargs in cases:
        code, stored = _both(fn, by, args, kwargs)
        assert code == stored, (fn.__name__, by, args, kwargs)


def test_a_key_the_stored_spec_cannot_compute_is_left_unresolved() -> None:
    import json

    from rota.limit_specs import stamp_spec, task_spec
    from rota.stores.base import NewRun

    def h(when: Any = datetime(2030, 1, 1, tzinfo=UTC), n: int = 0) -> None: ...

    def k(n: int) -> None: ...

    for fn, by, args in ((h, "when", []), (k, lambda n: str(n), [1]), (k, "n", [])):
        spec = task_spec(_Task(fn, by))
        assert spec is not None
        run = NewRun(task="t", args=json.dumps(args))
        stamp_spec(run, spec)
        assert (run.limit_name, run.limit_key, run.rate_name) == (UNRESOLVED, "", None)


def test_an_unresolved_run_whose_limit_a_newer_deploy_removed_runs_as_a_plain_one(
    app_factory: Callable[..., rota.App],
) -> None:
    _declaring(app_factory)
    client = app_factory()
    client.add_schedule("a", "by_call", every=3600, args=[{"shop": "a"}], overlap="concurrent")
    run_id = client.trigger("a").id
    assert _gates(client)[run_id][0] == UNRESOLVED
    newer = app_factory()

    @newer.task(name="by_call")
    def by_call(order: dict[str, str]) -> None: ...

    @newer.task(limit=1, name="other")  # the database still has limits: flow claims go on
    def other() -> None: ...

    newer.prepare()
    (claimed,) = newer.store.claim("w", 10, None, 30.0)
    assert str(claimed.id) == run_id and _gates(client)[run_id] == (None, None, None, None)


def test_a_running_worker_keys_and_runs_unresolved_runs_one_per_key(app_factory: Callable[..., rota.App]) -> None:
    import time

    from .conftest import start_worker

    worker_app = app_factory(poll_interval=0.2)
    spans: list[tuple[float, float]] = []

    @worker_app.task(limit=rota.Limit(1, by=lambda order: order["shop"]), name="by_call")
    def by_call(order: dict[str, str]) -> None:
        start = time.monotonic()
        time.sleep(0.2)
        spans.append((start, time.monotonic()))

    worker_app.migrate()
    start_worker(worker_app, concurrency=4)
    time.sleep(0.3)  # it started and stored its declarations
    client = app_factory()
    client.add_schedule("a", "by_call", every=3600, args=[{"shop": "a"}], overlap="concurrent")
    ids = [client.trigger("a").id for _ in range(3)]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(client.get_run(i).status != "succeeded" for i in ids):
        time.sleep(0.05)
    assert [client.get_run(i).status for i in ids] == ["succeeded"] * 3
    spans.sort()
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))  # one at a time: the shop's limit
